"""Job types that an operator registers: the Python API a job is written against.

    from app.jobs import JobContext, job

See docs/jobs.md for how to write, register, test and deploy one.
"""

from app.jobs.context import (
    FAILURE_KINDS,
    Device,
    JobCancelledError,
    JobContext,
    JobFailedError,
    JobPreemptedError,
)
from app.jobs.registry import (
    MAX_OUTPUT_BYTES,
    JobType,
    Registry,
    RegistryError,
    job,
    load_registry,
)

__all__ = [
    "FAILURE_KINDS",
    "MAX_OUTPUT_BYTES",
    "Device",
    "JobCancelledError",
    "JobContext",
    "JobFailedError",
    "JobPreemptedError",
    "JobType",
    "Registry",
    "RegistryError",
    "job",
    "load_registry",
]
