"""The GPU check's steps for jobs of several cards (issue 42), on a machine of one card: a job of
two cards is refused at submit (no host has two), and `ddp-burn` runs on the one card (its DDP
path over one NCCL rank on a GPU; a sleep on a CPU worker)."""

from __future__ import annotations

from typing import Any, Protocol

import httpx

DDP_S = 20.0  # a rank's start (torch, NCCL) counts against it: docs/jobs.md


class Runs(Protocol):
    """What these steps need of gpu_check's Check."""

    client: httpx.Client

    def job(self, step: str, type_: str, inp: dict[str, Any], expect: str, **extra: Any) -> Any: ...


def gang_steps(check: Runs, seconds: float = DDP_S) -> dict[str, Any]:
    """The refusal's answer and the one-card run's output (a run of `seconds`)."""
    body = {"type": "ddp-burn", "input": {}, "duration_s": seconds, "gpus": 2}
    refused = check.client.post("/enqueue-task", json=body)
    detail = refused.json().get("detail") if refused.status_code == 422 else None
    kinds = [d.get("type") for d in detail or [] if isinstance(d, dict)]
    one = check.job("ddp-burn on one card", "ddp-burn", {}, "SUCCESS", duration_s=seconds, gpus=1)
    return {"two_cards": {"status": refused.status_code, "types": kinds}, "ddp_one": one.output}


def gang_verdicts(results: dict[str, Any], on_gpu: bool) -> dict[str, bool]:
    """The refusal (a 422 of type gpus_no_host), and on a GPU a DDP run with a loss."""
    two = results.get("two_cards") or {}
    wanted = {
        "a 2-card job is refused at submit (gpus_no_host)": two.get("status") == 422
        and "gpus_no_host" in (two.get("types") or []),
    }
    if on_gpu:
        out = results.get("ddp_one") or {}
        wanted["ddp-burn runs DDP on the one card"] = (
            out.get("devices") == 1 and out.get("loss") is not None
        )
    return wanted
