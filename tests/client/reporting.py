"""A job type that reports as it runs, for the clients' end-to-end tests (the dashboard's, in
tests/e2e/test_dashboard.py): register it with JOB_MODULES=tests.client.reporting.

`reporter` logs its lines three ways (stdout, stderr, ctx.log) with progress, then waits, its
progress at one half, until the file its input names exists, so that a test sees it running
for as long as it needs to; then it says one more line and leaves two files, one in a folder.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pydantic import BaseModel, Field

from app.jobs import JobContext, job

#: What the job leaves, by artifact name.
FILES = {"result.txt": "done\n", "plots/loss.csv": "epoch,loss\n1,0.50\n2,0.25\n"}
LAST_LINE = "finishing"
POLL_S = 0.05  # how often the job looks for its go-ahead file


class Report(BaseModel):
    lines: int = Field(3, ge=0, le=100)
    go: str = Field(description="the job finishes once a file exists at this path")


class Reported(BaseModel):
    lines: int


@job(name="reporter", queue="short", max_duration_s=60, description="Reports; waits for a file.")
def reporter(ctx: JobContext, inp: Report) -> Reported:
    """Lines and progress, a wait for the go-ahead file, then files."""
    ctx.progress(0.0, "starting")
    for n in range(inp.lines):
        print(f"out {n}", flush=True)
        print(f"err {n}", file=sys.stderr, flush=True)
        ctx.log(f"log {n}")
    ctx.progress(0.5, "waiting for the go-ahead")
    while not Path(inp.go).exists():
        ctx.check_cancelled()
        time.sleep(POLL_S)
    ctx.log(LAST_LINE)
    for name, text in FILES.items():
        target = ctx.output_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    ctx.progress(1.0, "done")
    return Reported(lines=inp.lines)
