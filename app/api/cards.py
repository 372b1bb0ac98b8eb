"""The checks of a job's count of cards (issue 42) that need its account or the fleet, made at
submit before anything is written: a job of several cards is refused, with a 422 naming `gpus`,
when its account's max_running (which counts cards) is below its count, or when no host of the
live fleet has that many cards of a class it may run on in its queue. A fleet where no worker
has been heard at all accepts it: it waits, as a job of one card waits for its class. A job of
one card costs no read here (its submit is the hot path)."""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError

from app.api.runtime import Runtime
from app.api.submissions import Submission
from app.auth import Account
from app.fleet.view import largest_host, live_fleet_async


async def check_cards(runtime: Runtime, account: Account, job: Submission) -> None:
    """A 422 naming `gpus` when the account or the fleet cannot run a job of job.gpus cards."""
    if job.gpus == 1:
        return
    most = account.max_running
    if most is not None and most < job.gpus:
        raise _refused(
            "gpus_over_max_running",
            f"this job takes {job.gpus} cards, more than the account's max_running ({most}), "
            "which counts the cards its running jobs hold: it could never start",
        )
    settings = runtime.settings
    fleet = await live_fleet_async(runtime.redis, settings.fleet_ttl_s, runtime.clock.now())
    if not fleet:
        return  # no worker heard yet (a fleet starting): the job waits for one
    largest = largest_host(fleet, job.kind, job.gpu_classes)
    if largest < job.gpus:
        classes = "" if not job.gpu_classes else f" of class {' or '.join(job.gpu_classes)}"
        raise _refused(
            "gpus_no_host",
            f"no host of the fleet has {job.gpus} cards{classes} serving the {job.kind} queue "
            f"(the most on one host is {largest}): a job's cards are all on one host",
        )


def _refused(kind: str, message: str) -> RequestValidationError:
    """A 422 in the shape of FastAPI's own, about the body's `gpus`."""
    return RequestValidationError([{"type": kind, "loc": ("body", "gpus"), "msg": message}])
