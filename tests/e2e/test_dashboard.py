"""The dashboard in a real headless Chromium (Debian's), against a real stack: jobs followed
live, cancelled and billed, the queues for admins; and a typed job's type, progress bar, log
tail and artifacts (the `reporter` type of tests/client/reporting.py, run by a real worker).

Playwright drives the browser that the system installed (`executable_path`): no browser is ever
downloaded. Where Chromium is missing the test is skipped; CI installs it first (.ci/run).
Every wait is one of Playwright's auto-waiting expectations, bounded by WAIT_MS.

With FAIRGPU_SCREENSHOT_DIR set, the final screenshot is also written there as dashboard.png
(that is how docs/img/dashboard.png is made).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Locator,
    Page,
    expect,
    sync_playwright,
)

from app.api.factory import create_app
from app.api.routes.dashboard import ASSETS, FOLDER, PAGE
from app.dev.stack import Stack
from tests.client.reporting import FILES, LAST_LINE
from tests.e2e.conftest import DEMO_KEY, OTHER_KEY
from tests.support import fast_settings

WAIT_MS = 30_000
SCREENSHOT_DIR = "FAIRGPU_SCREENSHOT_DIR"
DEBIAN_CHROMIUM = Path("/usr/bin/chromium")

# Records every value each job row's data-status takes, in order, so that the test can check
# the path a job took on the page and not only where it ended.
WATCH_STATUSES = """() => {
  const seen = {};
  window.statusHistory = seen;
  const note = (row, value) => {
    const id = row.dataset.taskId;
    const path = (seen[id] = seen[id] || []);
    if (value && path[path.length - 1] !== value) path.push(value);
  };
  new MutationObserver((records) => {
    const touched = new Set();
    for (const record of records) {
      if (record.type === "attributes") {
        note(record.target, record.oldValue);
        touched.add(record.target);
      }
    }
    for (const row of touched) note(row, row.dataset.status);
  }).observe(document.getElementById("jobs-body"), {
    subtree: true,
    attributes: true,
    attributeFilter: ["data-status"],
    attributeOldValue: true,
  });
}"""


def chromium() -> str | None:
    """Debian's chromium: the one on PATH, else where the package puts it."""
    found = shutil.which("chromium")
    if found:
        return found
    return str(DEBIAN_CHROMIUM) if DEBIAN_CHROMIUM.exists() else None


@pytest.fixture
def browser() -> Iterator[Browser]:
    executable = chromium()
    if executable is None:
        pytest.skip("Chromium is not installed (Debian's `chromium` package; .ci/run installs it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1050})
    try:
        yield context.new_page()
    finally:
        context.close()


def sign_in(page: Page, key: str) -> None:
    page.locator("#key-input").fill(key)
    page.locator("#key-use").click()
    expect(page.locator("#signed-in")).to_be_visible(timeout=WAIT_MS)


def submit(page: Page, kind: str, duration_s: float) -> Locator:
    """Submit a job through the form; its row, found by the task id the page was given."""
    rows = page.locator("#jobs-body tr.job")
    before = rows.count()
    page.locator("#submit-kind").select_option(kind)
    page.locator("#submit-duration").fill(str(duration_s))
    page.locator("#submit-button").click()
    expect(rows).to_have_count(before + 1, timeout=WAIT_MS)
    task_id = rows.first.get_attribute("data-task-id")
    assert task_id is not None
    return page.locator(f'#jobs-body tr[data-task-id="{task_id}"]')


def status_of(row: Locator) -> Callable[[str], None]:
    def wait(status: str) -> None:
        expect(row).to_have_attribute("data-status", status, timeout=WAIT_MS)

    return wait


def job(stack: Stack, key: str, task_id: str | None) -> dict[str, Any]:
    reply = httpx.get(f"{stack.url}/task-status/{task_id}", headers={"X-API-Key": key}, timeout=10)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def billed_total(stack: Stack, key: str) -> tuple[int, float]:
    reply = httpx.get(f"{stack.url}/billing-records", headers={"X-API-Key": key}, timeout=10)
    assert reply.status_code == 200, reply.text
    records = reply.json()
    return len(records), sum(record["cost"] for record in records)


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_dashboard_follows_jobs_live_cancels_bills_and_shows_queues_to_admins(
    make_stack: Callable[..., Stack], page: Page, tmp_path: Path
) -> None:
    stack = make_stack(workers=1)
    problems: list[str] = []

    def console(message: ConsoleMessage) -> None:
        # Chromium logs each 4xx answer to fetch() as "Failed to load resource", and the test
        # asks for one on purpose; any other error (a CSP refusal, say) is a problem.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            problems.append(message.text)

    page.on("console", console)
    page.on("pageerror", lambda error: problems.append(str(error)))

    response = page.goto(f"{stack.url}/dashboard")
    assert response is not None and response.status == 200
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    page.evaluate("() => { window.stillTheSamePage = true; }")

    # An account that is not an admin: its account line, and no queues panel.
    sign_in(page, OTHER_KEY)
    expect(page.locator("#account-line")).to_contain_text("22222222-", timeout=WAIT_MS)
    expect(page.locator("#queues-panel")).to_be_hidden()
    assert page.evaluate("() => sessionStorage.getItem('fairgpu.apiKey')") == OTHER_KEY
    page.locator("#key-forget").click()
    expect(page.locator("#signed-in")).to_be_hidden()
    assert page.evaluate("() => sessionStorage.getItem('fairgpu.apiKey')") is None

    # The admin: the queues panel appears and lists both queues.
    sign_in(page, DEMO_KEY)
    expect(page.locator("#account-line")).to_contain_text("11111111-", timeout=WAIT_MS)
    expect(page.locator("#account-line")).to_contain_text("admin")
    expect(page.locator("#jobs-empty")).to_be_visible(timeout=WAIT_MS)  # its (empty) list came
    expect(page.locator("#queues-panel")).to_be_visible(timeout=WAIT_MS)
    for queue in ("short", "long"):
        expect(page.locator(f'#queues-body tr[data-queue="{queue}"]')).to_be_visible(
            timeout=WAIT_MS
        )
    assert DEMO_KEY not in page.url and OTHER_KEY not in page.url

    # The server's refusal, with its detail, in the message area.
    page.locator("#submit-kind").select_option("short")
    page.locator("#submit-duration").fill("61")
    page.locator("#submit-button").click()
    expect(page.locator("#messages")).to_contain_text("at most 60", timeout=WAIT_MS)

    page.evaluate(WATCH_STATUSES)
    # A long job takes the only worker, so a short one submitted next waits, first in line.
    long_job = submit(page, "long", 600)
    status_of(long_job)("STARTED")
    short_job = submit(page, "short", 0.5)
    status_of(short_job)("PENDING")
    expect(short_job.locator('[data-col="place"]')).to_have_text(
        "next · waiting for a GPU", timeout=WAIT_MS
    )

    # Cancelling the running job stops it; the short one then runs, all seen live.
    long_job.locator("button.cancel").click()
    expect(page.locator("#messages")).to_contain_text("asked it to stop", timeout=WAIT_MS)
    status_of(long_job)("REVOKED")
    status_of(short_job)("SUCCESS")
    expect(long_job.locator("button.cancel")).to_be_hidden()
    expect(short_job.locator('[data-col="worker"]')).to_contain_text("cpu1@")
    history = page.evaluate("() => window.statusHistory")
    short_id = short_job.get_attribute("data-task-id")
    long_id = long_job.get_attribute("data-task-id")
    assert history[short_id] == ["PENDING", "STARTED", "SUCCESS"]
    assert history[long_id][-2:] == ["STARTED", "REVOKED"]

    # The bill: both jobs (the cancelled one for the seconds it ran), and their total.
    total = page.locator("#bill-total")
    expect(total).to_have_attribute("data-count", "2", timeout=WAIT_MS)
    count, cost = billed_total(stack, DEMO_KEY)
    assert count == 2
    assert float(total.get_attribute("data-total") or "nan") == pytest.approx(cost)
    expect(page.locator("#bill-body tr")).to_have_count(2)
    # Rows hidden in the bill's scroll area are announced: made one row high here, as a long
    # bill would be, it says so until scrolled to the end.
    more, area = page.locator("#bill-more"), page.locator("#bill-scroll")
    expect(more).to_be_hidden()
    area.evaluate(
        "a => { const top = a.getBoundingClientRect().top;"
        " const row = a.querySelector('tbody tr').getBoundingClientRect();"
        " a.style.maxHeight = `${row.bottom - top}px`; }"
    )
    expect(more).to_have_text("1 more row below: scroll the bill", timeout=WAIT_MS)
    area.evaluate("a => { a.scrollTop = a.scrollHeight; }")
    expect(more).to_be_hidden(timeout=WAIT_MS)

    # One job running and one waiting, for the screenshot.
    running = submit(page, "long", 900)
    status_of(running)("STARTED")
    waiting = submit(page, "short", 20)
    status_of(waiting)("PENDING")
    expect(waiting.locator('[data-col="place"]')).to_have_text(
        "next · waiting for a GPU", timeout=WAIT_MS
    )
    # Its start estimate, counted from now; "unknown" where the server has none.
    estimate = job(stack, DEMO_KEY, waiting.get_attribute("data-task-id"))["estimated_start_at"]
    starts = re.compile(r"^(in \d.*|any moment)$") if estimate is not None else "unknown"
    expect(waiting.locator('[data-col="eta"]')).to_have_text(starts, timeout=WAIT_MS)
    expect(page.locator('#queues-body tr[data-queue="long"] [data-col="in-flight"]')).to_have_text(
        "1", timeout=WAIT_MS
    )
    # No limit holds a job back: the queues say so (a held one is counted there, and its row says
    # why it waits: tests/dashboard/test_page_script.py)
    expect(page.locator('#queues-body tr[data-queue="long"] [data-col="held"]')).to_have_text("0")
    expect(running.locator('[data-col="runs"]')).to_have_text("1")

    assert page.evaluate("() => window.stillTheSamePage") is True  # never reloaded
    shot = page.screenshot(path=tmp_path / "dashboard.png", full_page=True)
    assert shot.startswith(b"\x89PNG")
    folder = os.environ.get(SCREENSHOT_DIR)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "dashboard.png").write_bytes(shot)
    assert problems == []


def submit_typed(stack: Stack, key: str, job_type: str, job_input: dict[str, Any]) -> str:
    body = {"type": job_type, "input": job_input}
    reply = httpx.post(
        f"{stack.url}/enqueue-task", json=body, headers={"X-API-Key": key}, timeout=10
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["task_id"])


def log_lines(details: Locator) -> list[str]:
    """The log tail's lines without their clock time ("err 1": these lines are one word)."""
    shown = details.locator(".log-line").all_text_contents()
    return [" ".join(text.split()[-2:]) for text in shown]


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_dashboard_shows_a_jobs_type_progress_log_tail_and_artifacts(
    make_stack: Callable[..., Stack], page: Page, tmp_path: Path
) -> None:
    stack = make_stack(workers=1, job_modules=["tests.client.reporting"])
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    go = tmp_path / "go-ahead"
    task_id = submit_typed(stack, DEMO_KEY, "reporter", {"lines": 3, "go": str(go)})

    page.goto(f"{stack.url}/dashboard")
    sign_in(page, DEMO_KEY)
    row = page.locator(f'#jobs-body tr.job[data-task-id="{task_id}"]')
    expect(row.locator('[data-col="type"]')).to_have_text("reporter", timeout=WAIT_MS)
    status_of(row)("STARTED")
    # The progress bar, while it runs, at the half the job reported while it waits.
    bar = row.locator('[data-col="progress"] progress')
    expect(bar).to_be_visible(timeout=WAIT_MS)
    expect(bar).to_have_attribute("value", "0.5", timeout=WAIT_MS)
    expect(row.locator(".progress-text")).to_have_text("50% · waiting for the go-ahead")

    # Its log tail: what it said so far, each stream marked; stderr's stand apart.
    row.locator("button.details").click()
    details = page.locator(f'#jobs-body tr.details[data-details-for="{task_id}"]')
    log = details.locator("pre.log")
    expect(log).to_have_attribute("data-count", "9", timeout=WAIT_MS)
    said = sorted(log_lines(details))
    assert said == sorted(f"{mark} {n}" for mark in ("out", "err", "log") for n in range(3))
    expect(details.locator('.log-line[data-stream="stderr"]')).to_have_count(3)
    expect(details.locator(".artifacts-none")).to_contain_text("none yet")

    # The go-ahead: its last line comes live, once, and its files are listed when it succeeds.
    go.write_text("go")
    status_of(row)("SUCCESS")
    expect(log).to_contain_text(LAST_LINE, timeout=WAIT_MS)
    expect(log).to_have_attribute("data-count", "10", timeout=WAIT_MS)
    assert log_lines(details).count(f"log {LAST_LINE}") == 1
    expect(bar).to_be_hidden()
    items = details.locator("ul.artifacts li")
    expect(items).to_have_count(len(FILES), timeout=WAIT_MS)
    assert sorted(items.evaluate_all("(all) => all.map((li) => li.dataset.name)")) == sorted(FILES)

    # A link downloads the file with the key (fetched with its header, saved from a blob).
    link = details.locator('li[data-name="plots/loss.csv"] a.artifact')
    with page.expect_download(timeout=WAIT_MS) as started:
        link.click()
    download = started.value
    assert download.suggested_filename == "loss.csv"
    saved = Path(download.path())
    assert saved.read_text() == FILES["plots/loss.csv"]
    listed = job(stack, DEMO_KEY, task_id)["result"]["artifacts"]
    digests = {a["name"]: a["sha256"] for a in listed}
    assert digests["plots/loss.csv"] == hashlib.sha256(saved.read_bytes()).hexdigest()
    assert DEMO_KEY not in (link.get_attribute("href") or "")
    assert problems == []


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_dashboard_shows_a_preemption_its_runs_and_a_job_held_by_its_limit(
    make_stack: Callable[..., Stack], page: Page
) -> None:
    """A preemptible job (tests/jobs/sample.py `checkpointed`, 10 s of steps) yields its only
    worker to another account's job and resumes: its row goes queued and back, and ends with
    its preemption and both runs shown, as its bill counts them. Then, at max_running 1, a
    second job says its account's limit holds it, and the queues count it."""
    policy = {"preempt_after_s": 1.0, "preempt_min_run_s": 1.0}
    stack = make_stack(workers=1, job_modules=["tests.jobs.sample"], **policy)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    reply = httpx.post(
        f"{stack.url}/enqueue-task",
        headers={"X-API-Key": DEMO_KEY},
        json={"type": "checkpointed", "input": {"steps": 200}, "duration_s": 30},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    task_id = str(reply.json()["task_id"])
    page.goto(f"{stack.url}/dashboard")
    sign_in(page, DEMO_KEY)
    page.evaluate(WATCH_STATUSES)
    row = page.locator(f'#jobs-body tr.job[data-task-id="{task_id}"]')
    status_of(row)("STARTED")
    owed = httpx.post(
        f"{stack.url}/enqueue-task",
        headers={"X-API-Key": OTHER_KEY},
        json={"kind": "short", "duration_s": 0.3},
        timeout=10,
    )
    assert owed.status_code == 200, owed.text
    expect(row.locator('[data-col="preempted"]')).to_have_text(
        re.compile(r"^1 · resume"), timeout=WAIT_MS
    )
    expect(row).to_have_attribute("data-status", "SUCCESS", timeout=60_000)
    assert page.evaluate("() => window.statusHistory")[task_id][-4:] == [
        "STARTED",
        "PENDING",
        "STARTED",
        "SUCCESS",
    ]
    expect(row.locator('[data-col="preempted"]')).to_have_text("1")
    expect(row.locator('[data-col="runs"]')).to_have_text("2")
    ended = job(stack, DEMO_KEY, task_id)
    assert (ended["runs"], ended["attempts"]) == (2, 2)
    expect(row.locator('[data-col="ran"]')).to_have_text(re.compile(r"^\d"))

    limited = httpx.patch(
        f"{stack.url}/admin/accounts/11111111-1111-1111-1111-111111111111",
        headers={"X-API-Key": DEMO_KEY},
        json={"max_running": 1},
        timeout=10,
    )
    assert limited.status_code == 200, limited.text
    first = submit(page, "long", 600)
    status_of(first)("STARTED")
    second = submit(page, "long", 600)
    expect(second.locator('[data-col="place"]')).to_have_text(
        "next · held by your account's limit", timeout=WAIT_MS
    )
    expect(page.locator('#queues-body tr[data-queue="long"] [data-col="held"]')).to_have_text(
        "1", timeout=WAIT_MS
    )
    assert problems == []


def test_page_and_assets_are_served_with_a_strict_policy_and_nothing_else_is() -> None:
    asyncio.run(check_served())


async def check_served() -> None:
    # No lifespan: the dashboard's routes never touch Redis.
    transport = httpx.ASGITransport(app=create_app(fast_settings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for path, media_type in [
            ("/dashboard", "text/html"),
            *((f"/dashboard/static/{name}", kind.split(";")[0]) for name, kind in ASSETS.items()),
        ]:
            reply = await client.get(path)
            assert reply.status_code == 200, path
            assert reply.headers["content-type"].startswith(media_type)
            assert reply.headers["x-content-type-options"] == "nosniff"
            policy = reply.headers["content-security-policy"]
            assert "default-src 'none'" in policy and "script-src 'self'" in policy
            assert "unsafe" not in policy and "form-action 'none'" in policy
        for path in [
            "/dashboard/static/dashboard.py",
            "/dashboard/static/..%2F..%2Fapi%2Fdashboard.py",
            "/dashboard/static/%2E%2E",
            "/dashboard/static/",
        ]:
            assert (await client.get(path)).status_code == 404, path
        assert "/dashboard" not in (await client.get("/openapi.json")).text


def test_page_needs_nothing_from_elsewhere_and_has_no_inline_code() -> None:
    html = (FOLDER / PAGE).read_text()
    assert "<script>" not in html and "<style" not in html and " style=" not in html
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", html)  # no onclick= and the like
    for name in [PAGE, *ASSETS]:
        text = (FOLDER / name).read_text()
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text), name  # no CDN
        assert "innerHTML" not in text and "outerHTML" not in text, name
