"""Job types: the `@job` decorator, and the registry that finds them.

An operator writes a job type as a function `f(ctx, inp) -> Out` or as a class with
`setup(self, ctx)` (once per worker's child process) and `run(self, ctx, inp) -> Out`, where
`inp` and `Out` are pydantic models, and decorates it with `@job(...)`. An input is read as
JSON and strictly, whatever its model's own config says: no value is coerced (not "5" nor true
for an integer), and a field the model does not name is refused; a type opts out with
`@job(..., strict_input=False)`, and its model then reads inputs as it says. A type declared with
`@job(..., preemptible=True)` may have a run asked to yield its GPU and resumed later from its
checkpoint (JobContext.preempted, checkpoint_dir); no other type's run is ever preempted. A type
may say what it needs of its card (`gpu=[classes, in order of preference]`,
`min_gpu_memory_gb=N`: app/fleet/needs.py); a need is checked here for its form, and at submit
against the deployment's catalog. A type says how many cards each of its jobs takes, all of one
class on one host (`gpus=N`, or `gpus=(LOW, HIGH)` for a range a submit picks from with its body's
`gpus`, LOW by default; 1 when it says nothing); the fleet's largest host is checked at submit.
The registry imports
the built-in types (app.jobs.builtin), the modules named by JOB_MODULES and the entry points
of the group `fairgpu.jobs`, and collects every JobType it finds there. A name registered twice,
or a module that cannot be imported, is a RegistryError: the process stops at start.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol, cast, get_type_hints

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from app.card_models import MAX_GPUS
from app.jobs.context import JobContext
from app.models import KINDS, Kind

BUILTIN_MODULE = "app.jobs.builtin"
ENTRY_POINT_GROUP = "fairgpu.jobs"
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
#: The largest output a job may return, as JSON: it is kept in the job's record.
MAX_OUTPUT_BYTES = 64 * 1024


class RegistryError(Exception):
    """A job type is malformed, registered twice, or its module cannot be imported."""


class Runnable(Protocol):
    """What a child process holds for a job type: set up once, then run job after job."""

    def setup(self, ctx: JobContext) -> None:
        """Load what every job of the type needs (a model's weights)."""

    def run(self, ctx: JobContext, inp: BaseModel) -> BaseModel:
        """Run one job."""


@dataclass(frozen=True)
class JobType:
    """A registered job type: its name, queue, time budget, schemas, and the code that runs it."""

    name: str
    queue: Kind
    max_duration_s: float
    description: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    target: Callable[..., Any] = field(repr=False)
    requires: tuple[str, ...] = ()
    strict_input: bool = True
    preemptible: bool = False
    #: The GPU classes its jobs may run on, in order of preference; None: any class.
    gpu: tuple[str, ...] | None = None
    #: The memory of one card its jobs need, in GB (10^9 bytes); None: any card.
    min_gpu_memory_gb: float | None = None
    #: The cards each of its jobs takes, (LOW, HIGH): a submit picks from it, LOW by default.
    gpus: tuple[int, int] = (1, 1)

    @property
    def module(self) -> str:
        """The module that defines the type."""
        return str(getattr(self.target, "__module__", "?"))

    @property
    def unavailable(self) -> str | None:
        """Why the type cannot run here (a package it needs is not installed), or None."""
        missing = [name for name in self.requires if importlib.util.find_spec(name) is None]
        if not missing:
            return None
        return f"needs {', '.join(missing)}, not installed (see docs/jobs.md)"

    def make(self) -> Runnable:
        """A fresh instance to run jobs with: the class's instance, or the function wrapped."""
        if inspect.isclass(self.target):
            instance: Any = self.target()
            return cast(Runnable, instance)
        return _FunctionJob(self.target)

    def parse_input(self, raw: object) -> BaseModel:
        """The input (a JSON value, as json.loads reads it) as the type's model; pydantic's
        ValidationError when it does not fit. Read as JSON, so that the API, which reads the
        request, and the worker, which reads the input the API stored, judge the same text
        alike; strictly unless the type opted out (see the module's docstring)."""
        text = json.dumps(raw)
        if not self.strict_input:
            return self.input_model.model_validate_json(text)
        return self.input_model.model_validate_json(text, strict=True, extra="forbid")

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the input as parse_input reads it: a strict type's objects, nested
        ones too, take no property they do not name."""
        if not self.strict_input:
            return self.input_model.model_json_schema()
        return self.input_model.model_json_schema(schema_generator=_ClosedObjects)


class _ClosedObjects(GenerateJsonSchema):
    """JSON Schema of a strict input: extra="forbid" at validation applies to every model in
    it, which its own config may not say."""

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        """The model's object, closed to properties it does not name."""
        json_schema = super().model_schema(schema)
        json_schema["additionalProperties"] = False
        return json_schema


class _FunctionJob:
    """A function job type as a Runnable: nothing to set up."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self._function = function

    def setup(self, ctx: JobContext) -> None:
        """Nothing to load."""

    def run(self, ctx: JobContext, inp: BaseModel) -> BaseModel:
        """Call the function."""
        out: BaseModel = self._function(ctx, inp)
        return out


def job(
    *,
    name: str,
    queue: Kind = "short",
    max_duration_s: float = 60,
    description: str = "",
    requires: Sequence[str] = (),
    strict_input: bool = True,
    preemptible: bool = False,
    gpu: Sequence[str] | None = None,
    min_gpu_memory_gb: float | None = None,
    gpus: int | tuple[int, int] = 1,
) -> Callable[[Callable[..., Any]], JobType]:
    """Register a function or class as a job type (see the module's docstring). `requires` names
    importable packages it needs; where one is missing the type is listed as unavailable.
    `strict_input=False` reads inputs as the input model's own config says, coercion and
    unknown fields included, instead of strictly. `preemptible=True` lets the scheduler ask its
    runs to yield their GPU (docs/jobs.md, "Preemptible jobs and checkpoints"). `gpu` names the
    GPU classes its jobs may run on, in order of preference, and `min_gpu_memory_gb` the memory
    they need (docs/jobs.md, "What a job needs of its card"). `gpus` is the cards each job takes:
    N, or (LOW, HIGH) for a range its submits pick from (LOW by default), 1 <= LOW <= HIGH <=
    MAX_GPUS."""

    def register(target: Callable[..., Any]) -> JobType:
        _checked_name(name)  # before the annotations: the name is what an error names
        as_class: Any = target
        run = as_class.run if inspect.isclass(target) else target
        input_model, output_model = _models(name, run, skip_self=inspect.isclass(target))
        if inspect.isclass(target) and not callable(getattr(target, "setup", None)):
            target.setup = lambda self, ctx: None  # type: ignore[attr-defined]
        return JobType(
            name=_checked_name(name),
            queue=_checked_queue(name, queue),
            max_duration_s=_checked_budget(name, max_duration_s),
            description=description or (inspect.getdoc(target) or "").split("\n")[0],
            input_model=input_model,
            output_model=output_model,
            target=target,
            requires=tuple(requires),
            strict_input=strict_input,
            preemptible=_checked_flag(name, "preemptible", preemptible),
            gpu=_checked_classes(name, gpu),
            min_gpu_memory_gb=_checked_memory(name, min_gpu_memory_gb),
            gpus=_checked_gpus(name, gpus),
        )

    return register


def _checked_name(name: str) -> str:
    if not NAME.match(name):
        raise RegistryError(
            f"job type name {name!r}: use 1 to 64 of a-z, 0-9, '.', '_', '-', starting with a "
            "letter or digit"
        )
    return name


def _checked_queue(name: str, queue: str) -> Kind:
    for kind in KINDS:
        if queue == kind:
            return kind
    raise RegistryError(f"job type {name!r}: queue must be short or long, got {queue!r}")


def _checked_flag(name: str, flag: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise RegistryError(f"job type {name!r}: {flag} is True or False, got {value!r}")
    return value


def _checked_classes(name: str, gpu: object) -> tuple[str, ...] | None:
    """The classes a type names: a non-empty list of distinct class names (a bare string is
    refused: it would read as a list of letters)."""
    if gpu is None:
        return None
    if isinstance(gpu, str) or not isinstance(gpu, Sequence) or not gpu:
        raise RegistryError(
            f"job type {name!r}: gpu is a non-empty list of GPU class names, got {gpu!r}"
        )
    classes = tuple(gpu)
    if not all(isinstance(c, str) and NAME.match(c) for c in classes):
        raise RegistryError(
            f"job type {name!r}: gpu names classes as the catalog does (1 to 64 of a-z, 0-9, "
            f"'.', '_', '-'), got {gpu!r}"
        )
    if len(set(classes)) != len(classes):
        raise RegistryError(f"job type {name!r}: gpu names a class twice: {gpu!r}")
    return classes


def _checked_memory(name: str, memory_gb: object) -> float | None:
    if memory_gb is None:
        return None
    if (
        isinstance(memory_gb, bool)
        or not isinstance(memory_gb, int | float)
        or not 0 < memory_gb < math.inf
    ):
        raise RegistryError(
            f"job type {name!r}: min_gpu_memory_gb is a positive number of GB, got {memory_gb!r}"
        )
    return float(memory_gb)


def _checked_gpus(name: str, gpus: object) -> tuple[int, int]:
    """The range of cards a type's jobs take: N is (N, N); (LOW, HIGH) whole numbers with
    1 <= LOW <= HIGH <= MAX_GPUS (a bool is refused: True would read as one card)."""
    bounds: tuple[object, ...] = gpus if isinstance(gpus, tuple) else (gpus, gpus)
    match bounds:
        case (int() as low, int() as high) if (
            bool not in (type(low), type(high)) and 1 <= low <= high <= MAX_GPUS
        ):
            return low, high
    raise RegistryError(
        f"job type {name!r}: gpus is a whole number of cards N or a range (LOW, HIGH), "
        f"1 <= LOW <= HIGH <= {MAX_GPUS}, got {gpus!r}"
    )


def _checked_budget(name: str, seconds: float) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise RegistryError(f"job type {name!r}: max_duration_s must be a positive number")
    return float(seconds)


def _models(
    name: str, run: Callable[..., Any], *, skip_self: bool
) -> tuple[type[BaseModel], type[BaseModel]]:
    """The input and output models from run's annotations: (ctx, inp: In) -> Out."""
    try:
        hints = get_type_hints(run)
    except Exception as exc:
        raise RegistryError(f"job type {name!r}: cannot read its annotations: {exc}") from exc
    params = list(inspect.signature(run).parameters)[1 if skip_self else 0 :]
    if len(params) != 2:
        raise RegistryError(f"job type {name!r}: run takes (ctx, inp), got {params}")
    models = hints.get(params[1]), hints.get("return")
    if not all(inspect.isclass(m) and issubclass(m, BaseModel) for m in models):
        raise RegistryError(
            f"job type {name!r}: annotate its input and its return value with pydantic models"
        )
    return models  # type: ignore[return-value]


class Registry:
    """The job types of this process, by name."""

    def __init__(self, types: Iterable[JobType] = ()) -> None:
        self._types: dict[str, JobType] = {}
        for job_type in types:
            self.add(job_type)

    def add(self, job_type: JobType) -> None:
        """Register a type; a second type of the same name is a RegistryError."""
        seen = self._types.get(job_type.name)
        if seen is job_type:
            return  # the same object, imported into a second module
        if seen is not None:
            raise RegistryError(
                f"job type {job_type.name!r} is registered twice: in {seen.module} and in "
                f"{job_type.module}"
            )
        self._types[job_type.name] = job_type

    def get(self, name: str) -> JobType | None:
        """The type called name, or None."""
        return self._types.get(name)

    def types(self) -> list[JobType]:
        """Every type, by name."""
        return [self._types[name] for name in sorted(self._types)]

    def __contains__(self, name: object) -> bool:
        return name in self._types


def load_registry(modules: Sequence[str] = (), *, entry_points: bool = True) -> Registry:
    """The built-in types, those of `modules` (JOB_MODULES) and those of the `fairgpu.jobs`
    entry points."""
    registry = Registry()
    for module_name in [BUILTIN_MODULE, *modules]:
        _scan(registry, _import(module_name, f"JOB_MODULES names {module_name!r}"))
    if entry_points:
        for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = point.load()
            except Exception as exc:
                raise RegistryError(
                    f"entry point {point.name!r} ({point.value}) of {ENTRY_POINT_GROUP}: {exc}"
                ) from exc
            if isinstance(loaded, JobType):
                registry.add(loaded)
            elif isinstance(loaded, ModuleType):
                _scan(registry, loaded)
            else:
                raise RegistryError(
                    f"entry point {point.name!r} ({point.value}) is neither a module nor a @job"
                )
    return registry


def _import(module_name: str, why: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        problem = f"{type(exc).__name__}: {exc}"
        raise RegistryError(f"{why}, which cannot be imported: {problem}") from exc


def _scan(registry: Registry, module: ModuleType) -> None:
    for value in vars(module).values():
        if isinstance(value, JobType):
            registry.add(value)
