"""`fairgpu status` of a script job shows its exit code (a signal by name) and how its
environment was had, whatever way the job ended."""

from __future__ import annotations

import io

from rich.console import Console

from app.client.render import task_table
from app.models import JobResult, ScriptEnvironment, Status, TaskStatus

NOW = 1_800_000_000.0


def shown(state: TaskStatus) -> str:
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(task_table(state, None))
    return out.getvalue()


def script_job(how: Status, exit_code: int, environment: ScriptEnvironment) -> TaskStatus:
    return TaskStatus(
        task_id="0b7d2a4e-6c1f-4b8e-9d2a-3f5e6a7b8c39",
        status=how,
        kind="short",
        attempts=1,
        type="script",
        error_kind=None if how is Status.SUCCESS else "exit_code",
        result=JobResult(
            duration_s=60,
            enqueued_at=NOW - 30,
            started_at=NOW - 20,
            finished_at=NOW - 10,
            exit_code=exit_code,
            environment=environment,
        ),
    )


def test_a_failed_scripts_status_shows_its_exit_code_and_built_environment() -> None:
    text = shown(script_job(Status.FAILURE, 3, ScriptEnvironment(cached=False, seconds=12.0)))
    assert "exit code" in text and " 3" in text
    assert "built in 12" in text


def test_a_script_killed_by_a_signal_is_named_and_a_cache_hit_said() -> None:
    text = shown(script_job(Status.FAILURE, -9, ScriptEnvironment(cached=True, seconds=0.0)))
    assert "-9 (killed by SIGKILL)" in text
    assert "cached" in text


def test_a_typed_jobs_status_has_neither_row() -> None:
    state = script_job(Status.SUCCESS, 0, ScriptEnvironment(cached=True, seconds=0.0))
    typed = state.model_copy(
        update={
            "type": "burn",
            "result": state.result.model_copy(  # type: ignore[union-attr]
                update={"exit_code": None, "environment": None}
            ),
        }
    )
    text = shown(typed)
    assert "exit code" not in text and "environment" not in text
