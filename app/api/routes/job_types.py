"""Job types: GET /job-types, what a job may be and what its input and output look like."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import CallerDep, RuntimeDep
from app.api.responses import ERRORS
from app.api.routing import KeyedRoute
from app.fleet.needs import catalog_of, serving
from app.jobs import JobType
from app.models import KINDS, JobTypeView
from app.settings import Settings

router = APIRouter(tags=["jobs"], route_class=KeyedRoute)


@router.get("/job-types", response_model=list[JobTypeView], responses=ERRORS)
async def job_types(caller: CallerDep, runtime: RuntimeDep) -> list[JobTypeView]:
    """Every job type this service knows, by name: its queue, its longest time budget (in its
    queue and in each), the JSON Schemas of its input and output, whether its runs may be
    preempted, what its jobs need of their card and the GPU classes that can serve them, and how
    many cards a job of it takes (min_gpus, the default, to max_gpus). A type
    whose dependency is not installed is listed as unavailable, with why; submitting one is a
    422."""
    return [view(job_type, runtime.settings) for job_type in runtime.job_types.types()]


def view(job_type: JobType, settings: Settings) -> JobTypeView:
    """A job type as clients see it: its limits are what a submit accepts (app/api/submissions.py
    _duration), the type's own or the queue's, the lower; its classes are those a submit that
    does not narrow them may run on (app/fleet/needs.py)."""
    reason = job_type.unavailable
    gpu = None if job_type.gpu is None else list(job_type.gpu)
    catalog = catalog_of(settings.gpu_classes)
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
        gpu=gpu,
        min_gpu_memory_gb=job_type.min_gpu_memory_gb,
        gpu_classes=serving(catalog, job_type.gpu, job_type.min_gpu_memory_gb),
        min_gpus=job_type.gpus[0],
        max_gpus=job_type.gpus[1],
    )
