// Runs the dashboard's script (app/dashboard/dashboard.js) in Node against a small stand-in of
// the DOM and of the API, for tests of what its rows show that need no browser
// (tests/dashboard/test_page_script.py; tests/e2e/test_dashboard.py drives a real Chromium).
//
// Reads a JSON scenario on stdin:
//   {"answers": {"<path>": <JSON body>, ...},     what fetch() answers, by the path asked
//    "streams": {"<task id>": "<event-stream text>"},   each job's stream (then held open)
//    "until": [["<task id>", "<data-col>", "<text>"], ...]}   wait until each cell shows it
//                                         ("queue:<name>" for a row of the queues panel)
//                                         ("fleet:<host>/<class>" for a row of the fleet)
// and prints {"rows": {id: {col: text, "title:" + col: title}}, "queues": {name: {col: text}},
// "fleet": {"<host>/<class>": {col: text}}, "fleetClasses": <the classes' line>,
// "waited": true|false} once every `until` holds, or after DEADLINE_MS.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const vm = require("node:vm");

const DEADLINE_MS = 5000;
const SCRIPT = path.join(__dirname, "..", "..", "app", "dashboard", "dashboard.js");

class Element {
  constructor(tag) {
    Object.assign(this, { tagName: tag, children: [], dataset: {}, listeners: {}, parent: null });
    Object.assign(this, { hidden: false, disabled: false, textContent: "", title: "" });
    Object.assign(this, { className: "", value: "", style: {}, attributes: {} });
    this.classList = { toggle() {}, add() {}, remove() {} };
  }
  append(...items) {
    for (const item of items) this.appendChild(item);
  }
  appendChild(item) {
    if (typeof item === "object") {
      item.parent = this;
      this.children.push(item);
    }
    return item;
  }
  prepend(...items) {
    for (const item of items.reverse()) {
      item.parent = this;
      this.children.unshift(item);
    }
  }
  replaceChildren(...items) {
    this.children = [];
    this.append(...items);
  }
  after(item) {
    const siblings = this.parent.children;
    siblings.splice(siblings.indexOf(this) + 1, 0, item);
    item.parent = this.parent;
  }
  remove() {
    if (this.parent) this.parent.children.splice(this.parent.children.indexOf(this), 1);
    this.parent = null;
  }
  addEventListener(name, listener) {
    (this.listeners[name] ||= []).push(listener);
  }
  setAttribute(name, value) {
    this.attributes[name] = String(value);
  }
  removeAttribute(name) {
    delete this.attributes[name];
  }
  getBoundingClientRect() {
    return { top: 0, bottom: 0, left: 0, right: 0 };
  }
  querySelectorAll() {
    return [];
  }
}

function api(scenario) {
  const json = (body) =>
    new Response(JSON.stringify(body), { headers: { "Content-Type": "application/json" } });
  return async (asked) => {
    const stream = /^task-status\/stream\/(.+)$/.exec(asked);
    if (stream) {
      const text = scenario.streams[decodeURIComponent(stream[1])] || "";
      const body = new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode(text)); // then held open, as a live one
        },
      });
      return new Response(body, { headers: { "Content-Type": "text/event-stream" } });
    }
    if (asked in scenario.answers) return json(scenario.answers[asked]);
    const prefix = Object.keys(scenario.answers).find((p) => asked.split("?")[0] === p);
    if (prefix) return json(scenario.answers[prefix]);
    return new Response(JSON.stringify({ detail: `no answer for ${asked}` }), { status: 404 });
  };
}

function page(scenario) {
  const elements = new Map();
  const document = {
    getElementById(id) {
      if (!elements.has(id)) elements.set(id, new Element("div"));
      return elements.get(id);
    },
    createElement: (tag) => new Element(tag),
  };
  const stored = new Map([["fairgpu.apiKey", "a-key"]]); // signed in, as after a reload
  const sessionStorage = {
    getItem: (k) => (stored.has(k) ? stored.get(k) : null),
    setItem: (k, v) => stored.set(k, v),
    removeItem: (k) => stored.delete(k),
  };
  const context = vm.createContext({
    document,
    sessionStorage,
    fetch: api(scenario),
    performance: { getEntriesByType: () => [] },
    ResizeObserver: class {
      observe() {}
    },
    ...{ Response, ReadableStream, TextDecoder, TextEncoder, AbortController, URLSearchParams },
    ...{ setTimeout, clearTimeout, Intl, Date, console, URL, Blob },
  });
  vm.runInContext(fs.readFileSync(SCRIPT, "utf8"), context, { filename: SCRIPT });
  return document;
}

function cells(row) {
  const shown = {};
  for (const cell of row.children) {
    const col = cell.dataset.col;
    if (!col) continue;
    const said = cell.children.filter((c) => c.className === "progress-text");
    shown[col] = said.length ? said[0].textContent : cell.textContent;
    if (cell.title) shown[`title:${col}`] = cell.title;
  }
  return shown;
}

function seen(document) {
  const rows = {};
  for (const row of document.getElementById("jobs-body").children) {
    if (row.dataset.taskId && row.className === "job") rows[row.dataset.taskId] = cells(row);
  }
  const queues = {};
  for (const row of document.getElementById("queues-body").children) {
    queues[row.dataset.queue] = cells(row);
  }
  const fleet = {};
  for (const row of document.getElementById("fleet-body").children) {
    fleet[row.dataset.fleet] = cells(row);
  }
  return { rows, queues, fleet, fleetClasses: document.getElementById("fleet-classes").textContent };
}

// Whether every cell named shows its text; an id "queue:<name>" names a row of the queues,
// "fleet:<host>/<class>" one of the fleet.
function holds(shown, until) {
  return until.every(([id, col, text]) => {
    const [table, key] = id.startsWith("queue:")
      ? [shown.queues, id.slice(6)]
      : id.startsWith("fleet:")
        ? [shown.fleet, id.slice(6)]
        : [shown.rows, id];
    const row = table[key];
    return String((row || {})[col] || "").includes(text);
  });
}

async function main() {
  const scenario = JSON.parse(fs.readFileSync(0, "utf8"));
  const document = page(scenario);
  const deadline = Date.now() + DEADLINE_MS;
  let shown = seen(document);
  while (!holds(shown, scenario.until || []) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10)); // polling, bounded by the deadline
    shown = seen(document);
  }
  shown.waited = holds(shown, scenario.until || []);
  process.stdout.write(JSON.stringify(shown));
  process.exit(0); // the page's own timers would keep Node running
}

main().catch((error) => {
  process.stderr.write(String(error && error.stack ? error.stack : error));
  process.exit(1);
});
