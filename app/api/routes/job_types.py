"""Job types: GET /job-types, what a job may be and what its input and output look like."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import CallerDep, RuntimeDep
from app.api.responses import ERRORS
from app.api.routing import KeyedRoute
from app.jobs import JobType
from app.models import KINDS, JobTypeView
from app.settings import Settings

router = APIRouter(tags=["jobs"], route_class=KeyedRoute)


@router.get("/job-types", response_model=list[JobTypeView], responses=ERRORS)
async def job_types(caller: CallerDep, runtime: RuntimeDep) -> list[JobTypeView]:
    """Every job type this service knows, by name: its queue, its longest time budget (in its
    queue and in each), the JSON Schemas of its input and output, and whether its runs may be
    preempted. A type whose dependency is not installed is listed as unavailable, with why;
    submitting one is a 422."""
    return [view(job_type, runtime.settings) for job_type in runtime.job_types.types()]


def view(job_type: JobType, settings: Settings) -> JobTypeView:
    """A job type as clients see it: its limits are what a submit accepts (app/api/submissions.py
    _duration), the type's own or the queue's, the lower."""
    reason = job_type.unavailable
    limits = {q: min(job_type.max_duration_s, settings.max_duration_s(q)) for q in KINDS}
    return JobTypeView(
        name=job_type.name,
        queue=job_type.queue,
        max_duration_s=limits[job_type.queue],
        max_duration_s_by_queue=limits,
        description=job_type.description,
        input_schema=job_type.input_schema(),
        output_schema=job_type.output_model.model_json_schema(),
        available=reason is None,
        unavailable_reason=reason,
        preemptible=job_type.preemptible,
    )
