"""ddp-burn, the sample type of several cards: it registers with its range of cards and without
torch, sleeps on CPU workers (through the in-process runner, with two simulated devices), and its
DDP path trains over two ranks on the CPU with gloo where torch is installed."""

from __future__ import annotations

import json
import multiprocessing
import re
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.jobs import JobCancelledError, JobContext, load_registry
from app.jobs.builtin.ddp import DdpIn, DdpOut, ddp_burn, stop_at
from app.jobs.context import Device
from app.worker.calls import Call, never
from app.worker.inline import InlineExecutor

DOCS = Path(__file__).resolve().parents[2] / "docs" / "jobs.md"
TWO_CPU_DEVICES = (Device("cpu-a@host-1", None), Device("cpu-b@host-1", None))
BUDGET_S = 2.0


def test_it_registers_with_a_range_of_one_to_eight_cards() -> None:
    found = load_registry(entry_points=False).get("ddp-burn")
    assert found is ddp_burn
    assert (found.gpus, found.queue, found.max_duration_s) == ((1, 8), "short", 3000)
    assert set(found.input_model.model_json_schema()["properties"]) == {"backend", "cpu_ddp"}
    assert found.requires == ()  # torch is optional: without it the type sleeps on CPU workers


def test_the_documented_ddp_type_registers_without_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/jobs.md's `ddp-train`, put in a module of its own as the docs say: torch is imported
    by its ranks and its run, not by the module, so the API can list it without torch."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    (example,) = [block for block in blocks if 'name="ddp-train"' in block]
    package = tmp_path / "docs_ddp_team"
    package.mkdir()
    (package / "ddp.py").write_text(example)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = load_registry(["docs_ddp_team.ddp"], entry_points=False).get("ddp-train")
    assert found is not None
    assert (found.gpus, found.queue) == ((2, 4), "long")


def test_nccl_on_the_cpu_is_refused_at_submit() -> None:
    with pytest.raises(ValidationError, match="nccl runs on GPUs only"):
        ddp_burn.parse_input({"cpu_ddp": True, "backend": "nccl"})
    assert ddp_burn.parse_input({"cpu_ddp": True}) == DdpIn(cpu_ddp=True)


def test_the_ranks_stop_before_the_deadline_by_a_margin() -> None:
    assert stop_at(1000.0, 0.0) == 995.0  # 5 s before a long budget's end
    assert stop_at(2.0, 0.0) == pytest.approx(1.8)  # a tenth of a short one
    assert stop_at(0.0, 10.0) == 0.0  # a budget already spent


def test_on_cpu_workers_it_sleeps_its_budget_and_counts_its_devices() -> None:
    executor = InlineExecutor(load_registry(entry_points=False))
    call = Call("t1", "ddp-burn", "{}", BUDGET_S, None, devices=TWO_CPU_DEVICES)
    ended = executor.run(call, never)
    assert ended.end == "success", ended.error
    assert ended.output is not None
    out = DdpOut.model_validate(json.loads(ended.output))
    assert (out.devices, out.steps, out.loss) == (2, [], None)
    assert out.seconds >= BUDGET_S - 0.1  # its deadline less the time before the job began


def test_a_cancel_ends_the_sleep() -> None:
    ctx = JobContext(
        "t1", None, None, time.time() + 60, _stop=lambda: True, devices=TWO_CPU_DEVICES
    )  # fmt: skip
    with pytest.raises(JobCancelledError):
        ddp_burn.make().run(ctx, DdpIn())


# two processes that import torch and build a DDP model: seconds each, too slow for the unit tier
@pytest.mark.integration
def test_ddp_with_gloo_trains_over_two_ranks_on_the_cpu() -> None:
    pytest.importorskip("torch", reason="torch is an optional extra: the DDP path needs it")
    ctx = JobContext("t1", None, None, time.time() + BUDGET_S, devices=TWO_CPU_DEVICES)
    out = ddp_burn.make().run(ctx, DdpIn(cpu_ddp=True))
    assert isinstance(out, DdpOut)
    assert out.devices == 2
    assert len(out.steps) == 2
    assert out.steps[0] == out.steps[1] > 0  # the ranks agree on when to stop
    assert out.loss is not None and out.loss > 0


@pytest.mark.integration
def test_a_cancel_ends_the_ranks() -> None:
    pytest.importorskip("torch", reason="torch is an optional extra: the DDP path needs it")
    asked = time.monotonic() + 1.0  # once the ranks have started, not before

    def stop() -> bool:
        return time.monotonic() >= asked

    ctx = JobContext("t1", None, None, time.time() + 60, _stop=stop, devices=TWO_CPU_DEVICES)
    with pytest.raises(JobCancelledError, match="cancelled after"):
        ddp_burn.make().run(ctx, DdpIn(cpu_ddp=True))
    assert multiprocessing.active_children() == []  # ended and reaped before the raise
