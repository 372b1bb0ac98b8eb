// fairgpu dashboard: plain JavaScript, no build step, no dependencies.
//
// Security rules this file keeps:
// - the API key lives in sessionStorage and in the X-API-Key header, never in a URL;
// - text from the server only ever reaches the page through textContent, title or dataset
//   (and an artifact's name through a link's download name and an encodeURIComponent path);
// - no inline code anywhere (the page's Content-Security-Policy forbids it anyway).
//
// Live updates: EventSource cannot send headers, so each live job's stream is read with
// fetch() and a ReadableStream, and the text/event-stream format is parsed here. A stream's
// unnamed events are the job's statuses; its named ones its progress, its log lines and its
// preemptions.

"use strict";

(() => {
  const KEY_STORE = "fairgpu.apiKey";
  const TERMINAL = new Set(["SUCCESS", "FAILURE", "REVOKED"]);
  const PAGE_SIZE = 25;
  const BILL_LIMIT = 1000; // the most /billing-records returns at once
  const QUEUES_EVERY_MS = 4000;
  const POLL_EVERY_MS = 3000; // live jobs that wait for a stream are read this often
  const POLL_BATCH = 5;
  const RETRY_FIRST_MS = 1000;
  const RETRY_MOST_MS = 15000;
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  const LOG_TAIL = 200; // the log lines a job's details show: the newest
  const LOG_MARK = { stdout: "out", stderr: "err", log: "log" };

  const byId = (id) => document.getElementById(id);
  const ui = {
    keyForm: byId("key-form"),
    keyInput: byId("key-input"),
    keyForget: byId("key-forget"),
    keyHint: byId("key-hint"),
    messages: byId("messages"),
    messageText: byId("message-text"),
    messageClose: byId("message-close"),
    signedIn: byId("signed-in"),
    accountLine: byId("account-line"),
    submitForm: byId("submit-form"),
    submitKind: byId("submit-kind"),
    submitDuration: byId("submit-duration"),
    submitButton: byId("submit-button"),
    jobsBody: byId("jobs-body"),
    jobsEmpty: byId("jobs-empty"),
    jobsMore: byId("jobs-more"),
    jobsLive: byId("jobs-live"),
    jobsRefresh: byId("jobs-refresh"),
    billBody: byId("bill-body"),
    billScroll: byId("bill-scroll"),
    billMore: byId("bill-more"),
    billTotal: byId("bill-total"),
    billRefresh: byId("bill-refresh"),
    queuesPanel: byId("queues-panel"),
    queuesBody: byId("queues-body"),
    queuesUpdated: byId("queues-updated"),
    fleetBody: byId("fleet-body"),
    fleetClasses: byId("fleet-classes"),
    adminForm: byId("admin-form"),
    adminTask: byId("admin-task"),
  };

  // Browsers open at most 6 HTTP/1.1 connections to one origin, and every open stream holds
  // one: over HTTP/1.1 keep two free for the page's other requests; over HTTP/2 or HTTP/3
  // streams share one connection.
  const STREAM_CAP = (() => {
    const entry = performance.getEntriesByType("navigation")[0];
    const protocol = (entry && entry.nextHopProtocol) || "";
    return /^h[23]/.test(protocol) ? 20 : 4;
  })();

  // Everything that belongs to one signed-in key; replaced as a whole when the key changes,
  // so that answers arriving for a previous key are recognised and dropped.
  let session = null;

  function newSession(key, account) {
    return {
      key,
      account,
      jobs: new Map(), // task_id -> {data, row, cells, stream, gone, polledAt}
      nextCursor: null,
      streams: 0,
      timers: new Set(),
      billSoon: null,
      closed: false,
    };
  }

  class ApiError extends Error {
    constructor(status, detail, retryAfter) {
      super(detail);
      this.status = status;
      this.retryAfter = retryAfter;
    }
  }

  // ---------------------------------------------------------------------------------------
  // Formatting

  function detailOf(body, response) {
    const detail = body && typeof body === "object" ? body.detail : undefined;
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) {
      return detail
        .map((item) => {
          if (!item || typeof item !== "object") return String(item);
          const where = Array.isArray(item.loc) ? item.loc.join(".") + ": " : "";
          return where + String(item.msg ?? "");
        })
        .join("; ");
    }
    return `${response.status} ${response.statusText || "error"}`;
  }

  function seconds(value) {
    if (!Number.isFinite(value)) return "";
    const s = Math.max(0, value);
    if (s < 10) return `${s.toFixed(1)} s`;
    if (s < 60) return `${Math.round(s)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
    return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  }

  function now() {
    return Date.now() / 1000;
  }

  function ago(at) {
    if (!Number.isFinite(at)) return "";
    const diff = now() - at;
    return diff < 1 ? "just now" : `${seconds(diff)} ago`;
  }

  function eta(at) {
    if (!Number.isFinite(at)) return "";
    const diff = at - now();
    return diff < 1 ? "any moment" : `in ${seconds(diff)}`;
  }

  function clock(at) {
    return Number.isFinite(at) ? new Date(at * 1000).toLocaleString() : "";
  }

  const money = new Intl.NumberFormat(undefined, {
    minimumFractionDigits: 2,
    maximumFractionDigits: 4,
  });
  const MICROS = 1e6;

  // A bill's exact cost in micro-units (a record from before exact billing has only `cost`).
  function micros(record) {
    const exact = Number(record.cost_micros);
    if (Number.isSafeInteger(exact)) return exact;
    return Math.round((Number(record.cost) || 0) * MICROS);
  }

  // ---------------------------------------------------------------------------------------
  // Messages

  function showMessage(text, kind) {
    ui.messageText.textContent = text;
    ui.messages.dataset.kind = kind;
    ui.messages.hidden = false;
  }

  function showError(error, doing) {
    const text = error instanceof ApiError ? error.message : String(error?.message ?? error);
    showMessage(doing ? `${doing}: ${text}` : text, "error");
  }

  function showInfo(text) {
    showMessage(text, "info");
  }

  ui.messageClose.addEventListener("click", () => {
    ui.messages.hidden = true;
  });

  // ---------------------------------------------------------------------------------------
  // HTTP

  function headersFor(key, extra) {
    return Object.assign({ "X-API-Key": key, Accept: "application/json" }, extra || {});
  }

  async function errorFrom(response) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    const retry = Number(response.headers.get("Retry-After"));
    return new ApiError(response.status, detailOf(body, response), retry);
  }

  // One JSON request with the owner's key (a session, or {key} to try one); throws ApiError
  // with the server's detail. A 401 ends the session it was made for.
  async function api(owner, method, path, body) {
    const init = { method, headers: headersFor(owner.key), cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    if (!response.ok) {
      const error = await errorFrom(response);
      if (error.status === 401 && session === owner) signOut(error);
      throw error;
    }
    const text = await response.text();
    return { status: response.status, data: text ? JSON.parse(text) : null };
  }

  // A timer that belongs to the session and dies with it.
  function later(owner, ms, action) {
    const timer = setTimeout(() => {
      owner.timers.delete(timer);
      if (!owner.closed) action();
    }, ms);
    owner.timers.add(timer);
    return timer;
  }

  function pause(owner, ms, signal) {
    return new Promise((resolve) => {
      const timer = later(owner, ms, resolve);
      const stop = () => {
        clearTimeout(timer);
        owner.timers.delete(timer);
        resolve();
      };
      signal.addEventListener("abort", stop, { once: true });
    });
  }

  // ---------------------------------------------------------------------------------------
  // Server-sent events, read from a fetch() body

  // Feeds text to onEvent({data, id, name}) one complete event at a time; id is null when
  // the event set none, name is "message" when it has no `event:` field. Lines end in \n,
  // \r\n or \r, as the event-stream format allows.
  function eventParser(onEvent) {
    let pending = "";
    let data = [];
    let id = null;
    let name = "message";

    function line(text) {
      if (text === "") {
        if (data.length > 0) onEvent({ data: data.join("\n"), id, name });
        data = [];
        id = null;
        name = "message";
        return;
      }
      if (text.startsWith(":")) return; // a comment: the server's keep-alive
      const colon = text.indexOf(":");
      const field = colon < 0 ? text : text.slice(0, colon);
      let value = colon < 0 ? "" : text.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") data.push(value);
      else if (field === "event") name = value;
      else if (field === "id" && !value.includes("\0")) id = value;
    }

    return (chunk) => {
      pending += chunk;
      let start = 0;
      for (let i = 0; i < pending.length; i += 1) {
        const c = pending[i];
        if (c !== "\n" && c !== "\r") continue;
        if (c === "\r" && i + 1 === pending.length) break; // perhaps half of a \r\n
        line(pending.slice(start, i));
        if (c === "\r" && pending[i + 1] === "\n") i += 1;
        start = i + 1;
      }
      pending = pending.slice(start);
    };
  }

  // Reads one response body to its end, or until onEvent returns true (the job ended).
  async function readEvents(body, onEvent) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let done = false;
    const feed = eventParser((event) => {
      if (!done && onEvent(event)) done = true;
    });
    try {
      while (!done) {
        const chunk = await reader.read();
        if (chunk.done) break;
        feed(decoder.decode(chunk.value, { stream: true }));
      }
    } finally {
      if (done) reader.cancel().catch(() => {});
      else reader.releaseLock();
    }
    return done;
  }

  // Follows one job until it ends, reconnecting with Last-Event-ID after a dropped stream.
  async function follow(owner, job) {
    const control = new AbortController();
    job.stream = control;
    owner.streams += 1;
    let lastId = null;
    let wait = RETRY_FIRST_MS;
    const taskId = job.data.task_id;
    try {
      while (!owner.closed && !control.signal.aborted && !isOver(job)) {
        const headers = headersFor(owner.key, { Accept: "text/event-stream" });
        if (lastId !== null) headers["Last-Event-ID"] = lastId;
        try {
          const response = await fetch(`task-status/stream/${encodeURIComponent(taskId)}`, {
            headers,
            cache: "no-store",
            signal: control.signal,
          });
          if (response.status === 204) {
            await refreshJob(owner, job); // ended before this connection: read its end
            break;
          }
          if (!response.ok) {
            const error = await errorFrom(response);
            if (error.status === 404) {
              markGone(job);
              break;
            }
            if (error.status === 401) {
              if (session === owner) signOut(error);
              break;
            }
            if (error.status === 429 && error.retryAfter > 0) wait = error.retryAfter * 1000;
            else throw error;
          } else {
            wait = RETRY_FIRST_MS;
            const ended = await readEvents(response.body, (event) => {
              if (event.id !== null) lastId = event.id;
              return onJobEvent(owner, job, event);
            });
            if (ended) break;
          }
        } catch (error) {
          if (control.signal.aborted || owner.closed) break;
          if (error instanceof ApiError && session === owner) showError(error, "Live updates");
        }
        await pause(owner, wait, control.signal);
        wait = Math.min(wait * 2, RETRY_MOST_MS);
      }
    } finally {
      job.stream = null;
      owner.streams -= 1;
      if (!owner.closed) {
        showLiveCount(owner);
        scheduleStreams(owner);
      }
    }
  }

  // One event of a job's stream; true once it says the job has ended.
  function onJobEvent(owner, job, event) {
    let data;
    try {
      data = JSON.parse(event.data);
    } catch {
      return false;
    }
    if (!data || typeof data !== "object") return false;
    if (event.name === "progress") {
      job.data = Object.assign({}, job.data, { progress: data });
      render(job);
    } else if (event.name === "log") {
      streamedLines(job, data);
    } else if (event.name === "preempted") {
      // {preemptions, seconds, ran_s}: its run yielded its GPU and it waits again (its
      // PENDING status, with its place, follows at once)
      const told = { status: "PENDING", position: null, result: null };
      if (Number.isInteger(data.preemptions)) told.preemptions = data.preemptions;
      if (Number.isFinite(data.ran_s)) told.ran_s = data.ran_s;
      update(owner, job, told);
    } else if (event.name === "message" && data.task_id === job.data.task_id) {
      update(owner, job, data);
      return TERMINAL.has(data.status);
    }
    return false; // `event: error`, or a kind of event this page does not know
  }

  function isOver(job) {
    return job.gone || TERMINAL.has(job.data.status);
  }

  // Which waiting job gets the next free stream: running ones first, then the queued ones
  // nearest the front, then the newest.
  function rank(job) {
    if (job.data.status === "STARTED") return -1;
    const place = job.data.position;
    return Number.isInteger(place) ? place : Number.MAX_SAFE_INTEGER;
  }

  function waitingJobs(owner) {
    return [...owner.jobs.values()].filter((job) => !job.stream && !isOver(job));
  }

  function scheduleStreams(owner) {
    if (owner.closed) return;
    const waiting = waitingJobs(owner);
    const newest = (a, b) => (b.data.enqueued_at ?? 0) - (a.data.enqueued_at ?? 0);
    waiting.sort((a, b) => rank(a) - rank(b) || newest(a, b));
    for (const job of waiting) {
      if (owner.streams >= STREAM_CAP) break;
      follow(owner, job);
    }
    showLiveCount(owner);
  }

  function showLiveCount(owner) {
    const waiting = waitingJobs(owner).length;
    const parts = [];
    if (owner.streams > 0) parts.push(`${owner.streams} live`);
    if (waiting > 0) parts.push(`${waiting} refreshed every ${POLL_EVERY_MS / 1000} s`);
    ui.jobsLive.textContent = parts.join(", ");
  }

  // Live jobs beyond the stream cap are read now and then, a few at a time.
  async function pollWaiting(owner) {
    const batch = waitingJobs(owner)
      .sort((a, b) => a.polledAt - b.polledAt)
      .slice(0, POLL_BATCH);
    for (const job of batch) {
      if (owner.closed) return;
      job.polledAt = Date.now();
      await refreshJob(owner, job);
    }
    later(owner, POLL_EVERY_MS, () => pollWaiting(owner));
  }

  async function refreshJob(owner, job) {
    try {
      const path = `task-status/${encodeURIComponent(job.data.task_id)}`;
      const { data } = await api(owner, "GET", path);
      if (session !== owner) return;
      update(owner, job, data);
      // a live job without a stream: its open log is read again with its status
      if (job.log && !job.stream && !isOver(job)) loadLog(owner, job);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) markGone(job);
      else if (session === owner && !owner.closed) showError(error, "Reading a job");
    }
  }

  // ---------------------------------------------------------------------------------------
  // The jobs table

  function cell(row, className, column) {
    const td = document.createElement("td");
    if (className) td.className = className;
    if (column) td.dataset.col = column;
    row.appendChild(td);
    return td;
  }

  function addJob(owner, state, atTop) {
    const known = owner.jobs.get(state.task_id);
    if (known) {
      update(owner, known, state);
      return known;
    }
    const row = document.createElement("tr");
    row.className = "job";
    row.dataset.taskId = state.task_id;
    const cells = {
      id: cell(row, "mono", "task"),
      kind: cell(row, "", "kind"),
      type: cell(row, "mono", "type"),
      status: cell(row, "status", "status"),
      progress: cell(row, "progress", "progress"),
      place: cell(row, "num", "place"),
      eta: cell(row, "", "eta"),
      worker: cell(row, "mono", "worker"),
      submitted: cell(row, "", "submitted"),
      waited: cell(row, "num", "waited"),
      ran: cell(row, "num", "ran"),
      runs: cell(row, "num", "runs"),
      preempted: cell(row, "num", "preempted"),
      actions: cell(row, "", "actions"),
    };
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "cancel";
    cancel.textContent = "Cancel";
    cancel.addEventListener("click", () => cancelJob(owner, job, cancel));
    const more = document.createElement("button");
    more.type = "button";
    more.className = "details";
    more.textContent = "Details";
    more.setAttribute("aria-expanded", "false");
    more.addEventListener("click", () => toggleDetails(owner, job));
    cells.actions.append(more, cancel);
    const bar = document.createElement("progress");
    bar.max = 1;
    const said = document.createElement("span");
    said.className = "progress-text";
    cells.progress.append(bar, said);
    const job = {
      data: state,
      row,
      cells,
      cancel,
      more,
      bar,
      said,
      details: null, // the row under it, made when first opened
      log: null, // its log tail, from when the details were first opened
      stream: null,
      gone: false,
      polledAt: 0,
    };
    owner.jobs.set(state.task_id, job);
    if (atTop) ui.jobsBody.prepend(row);
    else ui.jobsBody.appendChild(row);
    ui.jobsEmpty.hidden = true;
    render(job);
    return job;
  }

  function update(owner, job, state) {
    const ended = TERMINAL.has(state.status);
    const wasEnded = TERMINAL.has(job.data.status);
    if (wasEnded && !ended) return; // a late answer must not bring an ended job back
    job.data = Object.assign({}, job.data, state);
    render(job);
    if (ended && !wasEnded) {
      billSoon(owner);
      // The stream may have left lines out: the whole tail once more, now that it is final.
      if (job.log) loadLog(owner, job);
    }
  }

  function markGone(job) {
    job.gone = true;
    render(job);
  }

  // Why a queued job waits (its status's waiting_for), after its place in line.
  const WAITING_FOR = {
    gpu_class: "waiting for a card of its class",
    account_limit: "held by your account's limit",
    gpu: "waiting for a GPU",
    turn: "waiting for its turn",
  };

  function placeText(d) {
    if (d.status !== "PENDING" || !Number.isInteger(d.position)) return "";
    const place = d.position === 0 ? "next" : `${d.position} ahead`;
    const why = WAITING_FOR[d.waiting_for];
    return why ? `${place} · ${why}` : place;
  }

  function workerText(r) {
    if (!r.worker) return "";
    return Number.isInteger(r.gpu_id) ? `${r.worker} · GPU ${r.gpu_id}` : String(r.worker);
  }

  // The seconds its runs ran, as its bill counts them: those of its earlier runs and its
  // last once ended (ran_s), and the time since a run under way started.
  function ranText(d, r) {
    const before = Number.isFinite(d.ran_s) ? d.ran_s : 0;
    if (d.status === "STARTED" && Number.isFinite(r.started_at)) {
      return `${seconds(before + now() - r.started_at)} of ${seconds(r.duration_s)}`;
    }
    if (d.runs > 0) return seconds(before) + (d.status === "PENDING" ? " so far" : "");
    if (!Number.isFinite(r.started_at) || !Number.isFinite(r.finished_at)) return "";
    return seconds(r.finished_at - r.started_at); // a run its bill does not count
  }

  // Its runs that its bill counts (a status from before they were counted: its attempts).
  function runsText(d) {
    if (Number.isInteger(d.runs)) {
      return d.runs > 0 || d.status !== "PENDING" ? String(d.runs) : "";
    }
    return Number.isInteger(d.attempts) ? String(d.attempts) : "";
  }

  function preemptedText(d) {
    if (!(d.preemptions > 0)) return "";
    const tense = d.status === "PENDING" ? "resumes" : "resumed";
    return TERMINAL.has(d.status) ? String(d.preemptions) : `${d.preemptions} · ${tense}`;
  }

  function render(job) {
    const d = job.data;
    const c = job.cells;
    const r = d.result || {};
    const ended = TERMINAL.has(d.status);
    const live = !ended && !job.gone;
    const queued = live && d.status === "PENDING";
    const enqueued = d.enqueued_at ?? r.enqueued_at;
    const estimated = Number.isFinite(d.estimated_start_at);

    job.row.dataset.status = job.gone ? "GONE" : d.status;
    c.id.textContent = d.task_id.slice(0, 8);
    c.id.title = d.task_id;
    c.kind.textContent = d.kind ?? "";
    c.type.textContent = d.type ?? "burn";
    renderProgress(job, live && d.status === "STARTED" ? d.progress : null);
    c.status.textContent =
      (job.gone ? "expired" : d.status) + (d.cancel_requested && live ? " (stopping)" : "");
    c.status.title = d.error ? String(d.error) : "";
    c.place.textContent = queued ? placeText(d) : "";
    c.eta.textContent = !queued ? "" : estimated ? eta(d.estimated_start_at) : "unknown";
    c.eta.title = !queued ? "" : estimated ? clock(d.estimated_start_at) : "no live worker";
    c.worker.textContent = workerText(r);
    c.submitted.textContent = ago(enqueued);
    c.submitted.title = clock(enqueued);
    c.waited.textContent = Number.isFinite(r.started_at)
      ? seconds(r.started_at - enqueued)
      : queued
        ? seconds(now() - enqueued)
        : "";
    c.ran.textContent = ranText(d, r);
    c.ran.title = Number.isFinite(r.tflops) ? `${r.tflops.toFixed(1)} TFLOP/s` : "";
    c.runs.textContent = runsText(d);
    c.runs.title = Number.isInteger(d.attempts) ? `${d.attempts} started (lost ones too)` : "";
    c.preempted.textContent = preemptedText(d);
    const times = d.preemptions === 1 ? "once" : `${d.preemptions} times`;
    c.preempted.title = d.preemptions > 0 ? `its run yielded its GPU ${times} to a job owed one` : "";
    job.cancel.hidden = !live;
    if (!live || d.cancel_requested) job.cancel.disabled = true;
    if (job.details && !job.details.hidden) renderArtifacts(job);
  }

  function percent(fraction) {
    return `${Math.round(fraction * 100)}%`;
  }

  // The bar and its words while the job runs and has said how far it is; a bar without a
  // value (it moves to and fro) while the job gives a message but no fraction.
  function renderProgress(job, progress) {
    const shown = progress && typeof progress === "object";
    job.bar.hidden = !shown;
    job.said.hidden = !shown;
    if (!shown) return;
    const fraction = Number(progress.fraction);
    const known = progress.fraction !== null && Number.isFinite(fraction);
    if (known) job.bar.value = Math.min(1, Math.max(0, fraction));
    else job.bar.removeAttribute("value");
    const message = typeof progress.message === "string" ? progress.message : "";
    job.said.textContent = [known ? percent(fraction) : "", message].filter(Boolean).join(" · ");
    job.said.title = message;
    job.bar.title = known ? percent(fraction) : "running";
  }

  async function cancelJob(owner, job, button) {
    button.disabled = true;
    try {
      const path = `tasks/${encodeURIComponent(job.data.task_id)}`;
      const { status, data } = await api(owner, "DELETE", path);
      if (session !== owner) return;
      if (data) update(owner, job, data);
      showInfo(
        status === 202
          ? `Job ${job.data.task_id.slice(0, 8)} is running; asked it to stop.`
          : `Job ${job.data.task_id.slice(0, 8)} cancelled.`
      );
    } catch (error) {
      if (session !== owner) return;
      showError(error, "Cancel");
      if (error instanceof ApiError && error.status === 409) await refreshJob(owner, job);
      else if (error instanceof ApiError && error.status === 404) markGone(job);
      else button.disabled = false;
    }
  }

  async function loadJobs(owner, more) {
    ui.jobsMore.disabled = true;
    const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (more && owner.nextCursor) query.set("cursor", owner.nextCursor);
    try {
      const { data } = await api(owner, "GET", `tasks?${query}`);
      if (session !== owner) return;
      for (const state of data.tasks || []) addJob(owner, state, false);
      owner.nextCursor = data.next_cursor || null;
      ui.jobsMore.hidden = !owner.nextCursor;
      ui.jobsEmpty.hidden = owner.jobs.size > 0;
      scheduleStreams(owner);
    } catch (error) {
      if (session === owner) showError(error, "Loading jobs");
    } finally {
      ui.jobsMore.disabled = false;
    }
  }

  function clearJobs(owner) {
    for (const job of owner.jobs.values()) if (job.stream) job.stream.abort();
    owner.jobs.clear();
    owner.nextCursor = null;
    ui.jobsBody.replaceChildren();
    ui.jobsMore.hidden = true;
    ui.jobsLive.textContent = "";
  }

  // ---------------------------------------------------------------------------------------
  // A job's details: its log tail and its artifacts, in a row under the job's own
  //
  // The log tail is read from GET tasks/{id}/logs when the details are first opened, then
  // grows with the log events of the job's stream. That stream replays the job's events from
  // its start, so a streamed line is added only if it is not one of the lines read (the same
  // time, stream and text, counted) and is not older than the first of them; lines streamed
  // while the read is out wait for its answer. When the job ends the tail is read once more,
  // since the stream may leave lines out when a job writes many.

  function toggleDetails(owner, job) {
    if (!job.details) job.details = makeDetails(owner, job);
    const open = job.details.hidden;
    job.details.hidden = !open;
    job.more.setAttribute("aria-expanded", String(open));
    if (!open) return;
    renderArtifacts(job);
    if (!job.log) {
      job.log = { lines: [], skip: new Map(), since: null, pending: null, request: null };
      loadLog(owner, job);
    }
  }

  function makeDetails(owner, job) {
    const row = document.createElement("tr");
    row.className = "details";
    row.dataset.detailsFor = job.data.task_id;
    row.hidden = true;
    const td = document.createElement("td");
    td.colSpan = job.row.children.length;
    const logHead = document.createElement("div");
    logHead.className = "details-head";
    const logTitle = document.createElement("h3");
    logTitle.textContent = "Log";
    const note = document.createElement("span");
    note.className = "muted log-note";
    const reload = document.createElement("button");
    reload.type = "button";
    reload.className = "log-reload";
    reload.textContent = "Reload log";
    reload.addEventListener("click", () => loadLog(owner, job));
    logHead.append(logTitle, note, reload);
    const log = document.createElement("pre");
    log.className = "log";
    log.tabIndex = 0;
    const filesTitle = document.createElement("h3");
    filesTitle.textContent = "Artifacts";
    const files = document.createElement("ul");
    files.className = "artifacts";
    const none = document.createElement("p");
    none.className = "muted artifacts-none";
    td.append(logHead, log, filesTitle, none, files);
    row.appendChild(td);
    job.row.after(row);
    job.parts = { note, log, files, none, artifactsShown: null };
    return row;
  }

  async function loadLog(owner, job) {
    const log = job.log;
    const request = {};
    log.request = request;
    log.pending = log.pending || []; // what the stream brings meanwhile
    try {
      const path = `tasks/${encodeURIComponent(job.data.task_id)}/logs?tail=${LOG_TAIL}`;
      const { data } = await api(owner, "GET", path);
      if (session !== owner || log.request !== request) return;
      const lines = Array.isArray(data && data.lines) ? data.lines : [];
      log.lines = lines.slice(-LOG_TAIL);
      log.skip = new Map();
      for (const line of lines) log.skip.set(logKey(line), (log.skip.get(logKey(line)) || 0) + 1);
      log.since = lines.length > 0 ? Number(lines[0].at) : null;
      const arrived = log.pending;
      log.pending = null;
      for (const line of arrived) addLogLine(log, line);
      job.parts.note.textContent = "";
    } catch (error) {
      if (session !== owner || log.request !== request) return;
      log.pending = null;
      showError(error, "Loading the log");
    }
    renderLog(job);
  }

  function logKey(line) {
    return `${Number(line.at)}|${line.stream}|${line.text}`;
  }

  // A log event of the job's stream: {lines, dropped}.
  function streamedLines(job, batch) {
    const log = job.log;
    if (!log) return; // nobody has opened the details: their first read will have these
    const lines = Array.isArray(batch.lines) ? batch.lines : [];
    for (const line of lines) {
      if (line && typeof line === "object") {
        if (log.pending) log.pending.push(line);
        else addLogLine(log, line);
      }
    }
    const dropped = Number(batch.dropped);
    if (dropped > 0 && !log.pending) {
      job.parts.note.textContent = "some lines were left out of the live view: Reload log";
    }
    renderLog(job);
  }

  function addLogLine(log, line) {
    const key = logKey(line);
    const unseen = log.skip.get(key) || 0;
    if (unseen > 0) {
      log.skip.set(key, unseen - 1);
      return;
    }
    if (log.since !== null && Number(line.at) < log.since) return;
    log.lines.push(line);
    if (log.lines.length > LOG_TAIL) log.lines.splice(0, log.lines.length - LOG_TAIL);
  }

  function renderLog(job) {
    const pre = job.parts.log;
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    const spans = job.log.lines.map((line) => {
      const span = document.createElement("span");
      span.className = "log-line";
      span.dataset.stream = String(line.stream);
      const when = new Date(Number(line.at) * 1000).toLocaleTimeString();
      const mark = LOG_MARK[line.stream] || "log";
      span.textContent = `${when} ${mark} ${String(line.text)}\n`;
      return span;
    });
    pre.replaceChildren(...spans);
    pre.dataset.count = String(spans.length);
    if (spans.length === 0) pre.textContent = job.log.pending ? "loading…" : "no log lines yet";
    if (atBottom) pre.scrollTop = pre.scrollHeight; // follow the end, unless scrolled up
  }

  // The job's artifacts, as links that download with the key; redrawn only when they change.
  function renderArtifacts(job) {
    const d = job.data;
    const found = d.status === "SUCCESS" && d.result && Array.isArray(d.result.artifacts);
    const list = found ? d.result.artifacts : [];
    const shown = JSON.stringify([d.status, list]);
    if (job.parts.artifactsShown === shown) return;
    job.parts.artifactsShown = shown;
    job.parts.none.hidden = list.length > 0;
    job.parts.none.textContent =
      d.status === "SUCCESS"
        ? "none: the job left no files"
        : TERMINAL.has(d.status)
          ? "none: only a job that succeeds keeps its files"
          : "none yet: they are listed when the job succeeds";
    job.parts.files.replaceChildren(...list.map((artifact) => artifactItem(job, artifact)));
  }

  function artifactPath(taskId, name) {
    const parts = String(name).split("/").map(encodeURIComponent);
    return `tasks/${encodeURIComponent(taskId)}/artifacts/${parts.join("/")}`;
  }

  function artifactItem(job, artifact) {
    const item = document.createElement("li");
    item.dataset.name = String(artifact.name);
    const link = document.createElement("a");
    link.className = "artifact";
    link.href = artifactPath(job.data.task_id, artifact.name);
    link.download = String(artifact.name).split("/").pop();
    link.textContent = String(artifact.name);
    link.addEventListener("click", (event) => {
      event.preventDefault(); // the link alone has no key: fetch it with the header instead
      if (session) downloadArtifact(session, job, artifact, link);
    });
    const size = document.createElement("span");
    size.className = "muted";
    size.textContent = ` ${bytes(Number(artifact.size))} · sha256 `;
    const digest = document.createElement("code");
    digest.textContent = String(artifact.sha256).slice(0, 12) + "…";
    digest.title = String(artifact.sha256);
    item.append(link, size, digest);
    return item;
  }

  function bytes(count) {
    if (!Number.isFinite(count)) return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let amount = count;
    let unit = 0;
    while (amount >= 1024 && unit < units.length - 1) {
      amount /= 1024;
      unit += 1;
    }
    return unit === 0 ? `${count} B` : `${amount.toFixed(1)} ${units[unit]}`;
  }

  // Fetches the file with the key, checks its SHA-256 where the browser can (a secure
  // context: HTTPS or this machine), and hands it to the browser as a download of a blob URL.
  async function downloadArtifact(owner, job, artifact, link) {
    if (link.dataset.busy) return;
    link.dataset.busy = "1";
    try {
      const response = await fetch(link.href, {
        headers: headersFor(owner.key, { Accept: "*/*" }),
        cache: "no-store",
      });
      if (!response.ok) throw await errorFrom(response);
      const blob = await response.blob();
      if (globalThis.crypto && crypto.subtle) {
        const digest = await crypto.subtle.digest("SHA-256", await blob.arrayBuffer());
        const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0"));
        if (hex.join("") !== String(artifact.sha256).toLowerCase()) {
          throw new Error("its SHA-256 does not match the listed one; not saved");
        }
      }
      if (session !== owner) return;
      const url = URL.createObjectURL(blob);
      const save = document.createElement("a");
      save.href = url;
      save.download = link.download;
      save.hidden = true;
      document.body.appendChild(save);
      save.click();
      save.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000); // once the browser has taken it
    } catch (error) {
      if (session === owner) showError(error, `Downloading ${artifact.name}`);
    } finally {
      delete link.dataset.busy;
    }
  }

  // ---------------------------------------------------------------------------------------
  // Submitting

  async function submitJob(owner) {
    const kind = ui.submitKind.value;
    const duration = Number(ui.submitDuration.value);
    ui.submitButton.disabled = true;
    try {
      const { data } = await api(owner, "POST", "enqueue-task", { kind, duration_s: duration });
      if (session !== owner) return;
      addJob(
        owner,
        { task_id: data.task_id, status: "PENDING", kind, attempts: 0, enqueued_at: now() },
        true
      );
      showInfo(`Submitted job ${data.task_id.slice(0, 8)} (${kind}, ${seconds(duration)}).`);
      scheduleStreams(owner);
    } catch (error) {
      if (session === owner) showError(error, "Submit");
    } finally {
      ui.submitButton.disabled = false;
    }
  }

  // ---------------------------------------------------------------------------------------
  // The bill

  // A scroll area that hides rows below its bottom edge says so: the line under it counts
  // them ("3 more rows below: scroll the bill"), and the area fades out at the bottom. Looked
  // at again as the area scrolls or changes size; call the returned function after a reload.
  function scrollCue(area, note, what) {
    const update = () => {
      const bottom = area.getBoundingClientRect().bottom;
      let below = 0;
      for (const row of area.querySelectorAll("tbody tr")) {
        if (row.getBoundingClientRect().bottom > bottom + 1) below += 1;
      }
      const rows = below === 1 ? "1 more row" : `${below} more rows`;
      note.textContent = below ? `${rows} below: scroll ${what}` : "";
      note.hidden = below === 0;
      area.classList.toggle("more-below", below > 0);
    };
    area.addEventListener("scroll", update, { passive: true });
    new ResizeObserver(update).observe(area);
    return update;
  }

  const billCue = scrollCue(ui.billScroll, ui.billMore, "the bill");

  function billSoon(owner) {
    if (owner.billSoon !== null) return;
    owner.billSoon = later(owner, 300, () => {
      owner.billSoon = null;
      loadBill(owner);
    });
  }

  async function loadBill(owner) {
    try {
      const { data } = await api(owner, "GET", `billing-records?limit=${BILL_LIMIT}`);
      if (session !== owner) return;
      const rows = [];
      // Summed in whole micro-units, as the server counts them, so that many small bills add
      // up exactly; only the figure shown is rounded (money: at most 4 decimals).
      let totalMicros = 0;
      for (const record of data) {
        totalMicros += micros(record);
        const row = document.createElement("tr");
        row.dataset.taskId = String(record.task_id);
        cell(row).textContent = clock(record.billed_at);
        const task = cell(row, "mono");
        task.textContent = String(record.task_id).slice(0, 8);
        task.title = String(record.task_id);
        cell(row).textContent = String(record.kind);
        cell(row, "num").textContent = seconds(record.gpu_seconds);
        cell(row, "num").textContent = money.format(record.cost);
        cell(row).textContent = String(record.description);
        rows.push(row);
      }
      ui.billBody.replaceChildren(...rows);
      billCue();
      const count = data.length === 1 ? "1 job" : `${data.length} jobs`;
      const partial = data.length >= BILL_LIMIT ? ` (latest ${BILL_LIMIT} only)` : "";
      const total = totalMicros / MICROS;
      ui.billTotal.textContent = `Total ${money.format(total)} for ${count}${partial}`;
      ui.billTotal.dataset.total = String(total);
      ui.billTotal.dataset.count = String(data.length);
    } catch (error) {
      if (session === owner) showError(error, "Loading the bill");
    }
  }

  // ---------------------------------------------------------------------------------------
  // Admin: the queues

  async function loadQueues(owner) {
    try {
      const { data } = await api(owner, "GET", "admin/queues");
      if (session !== owner) return;
      const rows = [];
      for (const queue of data.queues || []) {
        const row = document.createElement("tr");
        row.dataset.queue = String(queue.name);
        cell(row, "", "name").textContent = String(queue.name);
        cell(row, "num", "queued").textContent = String(queue.queued ?? "");
        cell(row, "num", "held").textContent = String(queue.held_by_limit ?? "");
        cell(row, "num", "in-flight").textContent = String(queue.in_flight ?? "");
        cell(row, "num", "workers").textContent = String(queue.workers ?? "");
        const lag = Number(queue.fairness_lag_s);
        cell(row, "num", "lag").textContent = Number.isFinite(lag) ? seconds(lag) : "";
        const top = cell(row, "mono", "top");
        top.textContent = (queue.top_accounts || [])
          .map((entry) => {
            const held = entry.held_by_limit > 0 ? ` (${entry.held_by_limit} held)` : "";
            return `${String(entry.user_id).slice(0, 8)}: ${entry.queued}${held}`;
          })
          .join(", ");
        top.title = (queue.top_accounts || []).map((entry) => String(entry.user_id)).join("\n");
        const stats = queue.stats && typeof queue.stats === "object" ? queue.stats : {};
        cell(row, "mono small", "stats").textContent = Object.entries(stats)
          .map(([name, value]) => `${name}=${String(value)}`)
          .join("  ");
        rows.push(row);
      }
      ui.queuesBody.replaceChildren(...rows);
      showFleet(data.fleet);
      ui.queuesUpdated.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (error) {
      if (session !== owner) return;
      if (error instanceof ApiError && error.status === 404) {
        ui.queuesPanel.hidden = true; // not an admin after all
        return;
      }
      showError(error, "Loading the queues");
    }
    later(owner, QUEUES_EVERY_MS, () => loadQueues(owner));
  }

  // The fleet: the workers heard within FLEET_TTL_S, one row per host and class, and a line per
  // class of the catalog (none without one); a server before the fleet sends none.
  function showFleet(fleet) {
    const rows = [];
    for (const host of (fleet && fleet.hosts) || []) {
      const row = document.createElement("tr");
      row.dataset.fleet = `${host.host ?? "?"}/${host.gpu_class ?? ""}`;
      cell(row, "", "host").textContent = String(host.host ?? "?");
      cell(row, "", "class").textContent = String(host.gpu_class ?? "–");
      cell(row, "num", "memory").textContent = gigabytes(host.memory_gb);
      for (const name of ["workers", "alive", "busy"]) {
        cell(row, "num", name).textContent = String(host[name] ?? "");
      }
      rows.push(row);
    }
    ui.fleetBody.replaceChildren(...rows);
    const named = ((fleet && fleet.classes) || []).filter((c) => c.gpu_class != null);
    ui.fleetClasses.textContent = named
      .map((c) => {
        const price = c.price == null ? "not in the catalog" : `price ${c.price}`;
        const counts = `${c.workers} workers, ${c.alive} alive, ${c.busy} busy`;
        return `${c.gpu_class} (${gigabytes(c.memory_gb)}, ${price}): ${counts}`;
      })
      .join(" · ");
  }

  function gigabytes(memory) {
    return memory == null ? "" : `${Number(memory)} GB`;
  }

  async function adminAction(owner, action) {
    const taskId = ui.adminTask.value.trim().toLowerCase();
    if (!UUID.test(taskId)) {
      showError("a task id looks like 0b7d1c2e-…: 36 characters", action);
      return;
    }
    try {
      await api(owner, "POST", `admin/tasks/${encodeURIComponent(taskId)}/${action}`);
      if (session !== owner) return;
      showInfo(`${action === "promote" ? "Promoted" : "Released"} job ${taskId.slice(0, 8)}.`);
      const job = owner.jobs.get(taskId);
      if (job) await refreshJob(owner, job);
      loadQueues(owner);
    } catch (error) {
      if (session === owner) showError(error, action === "promote" ? "Promote" : "Release");
    }
  }

  // ---------------------------------------------------------------------------------------
  // Signing in and out

  function tick(owner) {
    for (const job of owner.jobs.values()) render(job); // relative times move on
    later(owner, 1000, () => tick(owner));
  }

  async function signIn(key) {
    let account;
    try {
      ({ data: account } = await api({ key }, "GET", "account"));
    } catch (error) {
      showError(error, "Key");
      // A refused key that came from storage (a reload) is forgotten; one pasted while another
      // is in use leaves that one alone.
      if (error instanceof ApiError && error.status === 401 && !session) {
        sessionStorage.removeItem(KEY_STORE);
      }
      return;
    }
    signOut(null);
    sessionStorage.setItem(KEY_STORE, key);
    const owner = newSession(key, account);
    session = owner;
    const parts = [String(account.description || "account"), `account ${account.user_id}`];
    if (account.share !== undefined) parts.push(`share ${account.share}`);
    if (account.admin) parts.push("admin");
    ui.accountLine.textContent = parts.join(" · ");
    ui.keyInput.value = "";
    ui.keyInput.placeholder = "key in use (paste another to switch)";
    ui.keyForget.hidden = false;
    ui.keyHint.hidden = true;
    ui.signedIn.hidden = false;
    ui.jobsEmpty.hidden = true;
    ui.queuesPanel.hidden = !account.admin;
    ui.messages.hidden = true;
    await Promise.all([loadJobs(owner, false), loadBill(owner)]);
    if (session !== owner) return;
    if (account.admin) loadQueues(owner);
    tick(owner);
    later(owner, POLL_EVERY_MS, () => pollWaiting(owner));
  }

  // Ends the current session (all streams and timers); with an error, says why.
  function signOut(error) {
    const owner = session;
    session = null;
    if (owner) {
      owner.closed = true;
      for (const timer of owner.timers) clearTimeout(timer);
      owner.timers.clear();
      clearJobs(owner);
    }
    ui.signedIn.hidden = true;
    ui.queuesPanel.hidden = true;
    ui.keyForget.hidden = true;
    ui.keyHint.hidden = false;
    ui.accountLine.textContent = "";
    ui.billBody.replaceChildren();
    billCue();
    ui.billTotal.textContent = "";
    delete ui.billTotal.dataset.total;
    delete ui.billTotal.dataset.count;
    ui.queuesBody.replaceChildren();
    ui.fleetBody.replaceChildren();
    ui.fleetClasses.textContent = "";
    ui.keyInput.placeholder = "paste your X-API-Key";
    if (error) {
      sessionStorage.removeItem(KEY_STORE);
      showError(error, "Signed out");
    }
  }

  ui.keyForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = ui.keyInput.value.trim();
    if (!key) {
      showError("paste an API key first", "Key");
      return;
    }
    signIn(key);
  });

  ui.keyForget.addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORE);
    signOut(null);
    ui.messages.hidden = true;
  });

  ui.submitForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (session) submitJob(session);
  });

  ui.jobsMore.addEventListener("click", () => {
    if (session) loadJobs(session, true);
  });

  ui.jobsRefresh.addEventListener("click", () => {
    if (!session) return;
    clearJobs(session);
    loadJobs(session, false);
  });

  ui.billRefresh.addEventListener("click", () => {
    if (session) loadBill(session);
  });

  ui.adminForm.addEventListener("submit", (event) => event.preventDefault());
  for (const action of ["promote", "release"]) {
    byId(`admin-${action}`).addEventListener("click", () => {
      if (session) adminAction(session, action);
    });
  }

  const stored = sessionStorage.getItem(KEY_STORE);
  if (stored) signIn(stored);
})();
