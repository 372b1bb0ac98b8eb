"""The job type of the preemption scenario (JOB_MODULES=scripts.benchkit.preempt_jobs): a long,
preemptible job that sleeps in short steps and checkpoints the next step after each, so that a
run asked to yield loses at most one step. Light to import: the API loads it for the schema.
"""

from __future__ import annotations

import json
import time

from pydantic import BaseModel, ConfigDict, Field

from app.jobs import JobContext, job

#: The file in the job's checkpoint_dir: the next step to take.
STEP_FILE = "step.json"


class Steps(BaseModel):
    """How many steps, of how long each."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(ge=1, le=100_000)
    step_s: float = Field(0.1, gt=0, le=10)


class Stepped(BaseModel):
    """The steps done, where the last run began, and how often the job was preempted before."""

    done: int
    resumed_at: int
    preemptions: int


@job(
    name="bench-steps",
    queue="long",
    max_duration_s=3000,
    description="Sleeps in steps, checkpointed after each; yields its GPU when asked.",
    preemptible=True,
)
def bench_steps(ctx: JobContext, inp: Steps) -> Stepped:
    """Takes the steps from where the last run's checkpoint left off; each step's count goes to
    a temporary file renamed over the checkpoint, so a stop at any instant leaves a whole one."""
    saved = ctx.checkpoint_dir / STEP_FILE
    start = int(json.loads(saved.read_text())["next"]) if saved.exists() else 0
    for step in range(start, inp.steps):
        ctx.check_preempted()  # the checkpoint is current: yielding here loses nothing
        time.sleep(inp.step_s)  # the step's work
        partial = saved.with_suffix(".tmp")
        partial.write_text(json.dumps({"next": step + 1}))
        partial.replace(saved)
    return Stepped(done=inp.steps, resumed_at=start, preemptions=ctx.preemptions)
