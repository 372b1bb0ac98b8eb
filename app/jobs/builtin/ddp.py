"""ddp-burn: the sample job type of several GPUs. On real cards it trains a small MLP with torch
DistributedDataParallel, one rank per card of the job, until its budget is spent, and reports the
steps each rank took and the loss averaged over them; on a CPU worker it sleeps, as `burn` does,
so that scheduling a job of several cards behaves the same on any machine. `{"cpu_ddp": true}`
runs the same DDP code on the CPU with gloo (a check of that path on a machine without cards).

The job's process sees exactly its cards (CUDA_VISIBLE_DEVICES), so rank r drives cuda:r. The
ranks are processes of their own (spawned: CUDA cannot be forked), which the job's own thread
watches: on a cancel it ends them. torch is imported only where DDP runs, so the type registers
and sleeps without it."""

from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.jobs.builtin.burn import run
from app.jobs.context import JobCancelledError, JobContext
from app.jobs.registry import job

#: The ranks stop this long before the job's deadline (or a tenth of its budget, if less): leaving
#: the process group and joining the ranks is work too, and must end within the budget.
MARGIN_S = 5.0
#: How often the job's thread looks at its stop flag while the ranks train.
WATCH_EVERY_S = 0.5
#: The ranks agree on whether to stop (one all-reduce) every this many steps: every rank must
#: take the same steps, or one would wait in an all-reduce that another never joins.
AGREE_EVERY = 10
#: How long a rank waits for the others (to join the group, in an all-reduce) before it fails.
RANK_TIMEOUT_S = 120.0
#: How long a rank that was told to end gets before it is killed.
END_GRACE_S = 5.0


class DdpIn(BaseModel):
    """The backend, and whether to run DDP on the CPU rather than sleep where there are no cards."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["nccl", "gloo"] | None = Field(
        None, description="torch.distributed's backend; default nccl on GPUs, gloo on the CPU"
    )
    cpu_ddp: bool = Field(
        False,
        description="run DDP on the CPU with gloo, one rank per device of the job, instead of "
        "on its GPUs (or, on a CPU worker, instead of sleeping)",
    )

    @model_validator(mode="after")
    def _gloo_on_the_cpu(self) -> DdpIn:
        if self.cpu_ddp and self.backend == "nccl":
            raise ValueError("nccl runs on GPUs only: with cpu_ddp, use gloo (the default)")
        return self


class DdpOut(BaseModel):
    """How long it ran, over how many devices, the steps of each rank and their mean loss."""

    seconds: float
    devices: int = Field(description="the job's devices (len(ctx.devices)): one rank each")
    steps: list[int] = Field(description="steps per rank, rank 0 first; empty where it slept")
    loss: float | None = Field(
        None, description="the last step's loss averaged over the ranks; null where it slept"
    )


@job(
    name="ddp-burn",
    queue="short",
    max_duration_s=3000,
    gpus=(1, 8),
    description="Trains a small MLP with torch DDP over its cards (NCCL, one rank per card) for "
    "duration_s; a sleep on a CPU worker.",
)
def ddp_burn(ctx: JobContext, inp: DdpIn) -> DdpOut:
    """Trains with DDP over the job's cards for duration_s."""
    count = len(ctx.devices)
    if ctx.gpu_id is None and not inp.cpu_ddp:
        slept = run(False, max(0.0, ctx.deadline - time.time()), lambda: ctx.cancelled)
        if slept.stopped:
            raise JobCancelledError(f"stopped after {slept.seconds:.1f} s")
        return DdpOut(seconds=slept.seconds, devices=count, steps=[])
    device: Literal["cpu", "cuda"] = "cpu" if inp.cpu_ddp else "cuda"
    plan = Plan(
        device=device,
        backend=inp.backend or ("nccl" if device == "cuda" else "gloo"),
        ranks=count,
        port=free_port(),
        stop_at=stop_at(ctx.deadline, time.time()),
    )
    if device == "cuda":
        _check_cards(count)
    ctx.log(f"{count} ranks on {device}, backend {plan.backend}, port {plan.port}")
    trained = train(plan, lambda: ctx.cancelled)
    ctx.log(f"{trained.steps[0]} steps per rank, loss {trained.loss:.4f}")
    return DdpOut(seconds=trained.seconds, devices=count, steps=trained.steps, loss=trained.loss)


@dataclass(frozen=True)
class Plan:
    """What every rank is told: its device kind, the backend, the number of ranks, the port of
    rank 0's rendezvous on 127.0.0.1, and the Unix time at which the ranks stop."""

    device: Literal["cpu", "cuda"]
    backend: Literal["nccl", "gloo"]
    ranks: int
    port: int
    stop_at: float

    @property
    def width(self) -> int:
        """The MLP's width: large enough on a GPU that its matmuls keep the card busy, small on
        the CPU, where the run is a check of the path rather than a workload."""
        return 4096 if self.device == "cuda" else 64


@dataclass(frozen=True)
class Trained:
    """What the ranks reported: seconds from their start to their end, steps per rank (rank 0
    first), and the last loss averaged over them."""

    seconds: float
    steps: list[int]
    loss: float


def stop_at(deadline: float, now: float) -> float:
    """When the ranks stop: MARGIN_S before the deadline, or a tenth of the budget if less."""
    budget = max(0.0, deadline - now)
    return deadline - min(MARGIN_S, budget / 10)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for rank 0's rendezvous (asked of the kernel: two jobs
    on one host never pick the same one by rule)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _check_cards(count: int) -> None:
    """The job's process sees exactly its cards: fewer than its count is a deployment's fault
    worth naming, not a rank's CUDA error."""
    import torch

    seen = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    if seen < count:
        raise RuntimeError(
            f"the job has {count} cards but CUDA sees {seen} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )


def train(plan: Plan, cancelled: Callable[[], bool]) -> Trained:
    """Start plan.ranks ranks, wait for them, and collect what they report; on a cancel, end
    them and raise JobCancelledError. A rank that fails ends the others (torch's join does), and
    its error is raised here."""
    import torch.multiprocessing as torch_mp

    results: Any = multiprocessing.get_context("spawn").SimpleQueue()
    started = time.monotonic()
    ranks = torch_mp.start_processes(
        rank_main, args=(plan, results, os.getpid()), nprocs=plan.ranks, join=False,
        start_method="spawn",
    )  # fmt: skip
    try:
        while not ranks.join(timeout=WATCH_EVERY_S):
            if cancelled():
                raise JobCancelledError(f"cancelled after {time.monotonic() - started:.1f} s")
    finally:
        _end(ranks.processes)
    seconds = time.monotonic() - started
    reports = sorted(results.get() for _ in range(plan.ranks))
    return Trained(seconds, [steps for _, steps, _ in reports], reports[0][2])


def _end(processes: list[Any]) -> None:
    """End the ranks still running: terminate, then kill those still there after END_GRACE_S."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(END_GRACE_S)
        if process.is_alive():
            process.kill()
            process.join()


def rank_main(rank: int, plan: Plan, results: Any, launcher: int) -> None:
    """One rank: join the group, train until the ranks agree that plan.stop_at has passed,
    average the last loss over the ranks, and report (rank, steps, loss)."""
    _end_with(launcher)
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(plan.port)
    torch_any: Any = torch
    if plan.device == "cuda":
        torch_any.cuda.set_device(rank)
    else:
        torch_any.set_num_threads(1)  # N ranks of N threads each would share the CPU's cores
    device = torch_any.device(plan.device, rank if plan.device == "cuda" else None)
    dist.init_process_group(
        plan.backend, rank=rank, world_size=plan.ranks, timeout=timedelta(seconds=RANK_TIMEOUT_S)
    )
    try:
        steps, loss = _steps(torch_any, dist, plan, device)
        mean = loss.detach().float().reshape(1)
        dist.all_reduce(mean)
        results.put((rank, steps, float(mean.item()) / plan.ranks))
    finally:
        dist.destroy_process_group()


def _steps(torch_any: Any, dist: Any, plan: Plan, device: Any) -> tuple[int, Any]:
    """Train the MLP on random data (each rank its own: seeded by rank) until the ranks agree to
    stop; the steps taken and the last loss."""
    from torch.nn.parallel import DistributedDataParallel

    torch_any.manual_seed(dist.get_rank())
    dtype = torch_any.bfloat16 if plan.device == "cuda" else torch_any.float32
    nn, width = torch_any.nn, plan.width
    model = nn.Sequential(
        nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, width),
    ).to(device=device, dtype=dtype)  # fmt: skip
    # DDP copies rank 0's parameters to every rank, then averages the gradients at each step
    ddp = DistributedDataParallel(model, device_ids=[device] if plan.device == "cuda" else None)
    optimizer = torch_any.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch_any.randn(width, width, device=device, dtype=dtype)
    y = torch_any.randn(width, width, device=device, dtype=dtype)
    stop = torch_any.zeros(1, device=device)
    steps = 0
    while True:
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimizer.step()
        steps += 1
        if steps % AGREE_EVERY == 0:
            stop.fill_(1.0 if time.time() >= plan.stop_at else 0.0)
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # one rank's clock decides for all
            if stop.item() > 0:
                return steps, loss


def _end_with(launcher: int) -> None:
    """A rank whose launcher is gone ends too, rather than train on a card that is no longer its
    job's until its stop time: a worker's child ends the processes below it anyway, but a
    launcher run elsewhere (in-process, a test) does not."""

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(WATCH_EVERY_S)  # polling the parent: no event says it has gone
        os._exit(1)

    threading.Thread(target=watch, name="end-with-launcher", daemon=True).start()
