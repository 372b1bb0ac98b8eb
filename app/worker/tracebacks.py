"""What a job's owner sees of an exception in their job, and what the worker's log keeps: the
owner gets the exception and the frames of the job type's own module only, named as the module
is (never a path of the server); the log gets the whole traceback."""

from __future__ import annotations

import sys
import traceback

from app.jobs.registry import JobType
from app.worker.calls import last_lines


def describe(exc: BaseException, job_type: JobType | None) -> str:
    """What the job's owner sees of its exception: the exception, then the frames of the job
    type's own module (named as the module is, not by this server's paths). fairgpu's frames
    and the libraries' stay in the worker's log (trace)."""
    head = type(exc).__name__ + (f": {exc}" if str(exc) else "")
    own = _module_file(job_type)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if own and f.filename == own]
    if not frames or job_type is None:
        return last_lines(head)
    shown = job_type.module.replace(".", "/") + ".py"
    where = [
        f'  File "{shown}", line {f.lineno}, in {f.name}' + (f"\n    {f.line}" if f.line else "")
        for f in frames
    ]
    return last_lines("\n".join([head, "in the job's code:", *where]))


def trace(exc: BaseException) -> str:
    """The whole traceback, for the worker's log."""
    return "".join(traceback.format_exception(exc)).rstrip()


def _module_file(job_type: JobType | None) -> str | None:
    """The file of the module that defines the job type, as tracebacks name it."""
    if job_type is None:
        return None
    module = sys.modules.get(job_type.module)
    found = getattr(module, "__file__", None)
    return str(found) if found else None
