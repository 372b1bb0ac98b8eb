"""digits-train: trains a small classifier on scikit-learn's bundled 8x8 digits (1,797 images,
no download) and reports its accuracy on a held-out fifth. An example of a job that checks for
its cancel between epochs, of a setup() that warms its device, and of a preemptible job that
resumes from a checkpoint. With torch (and a device) it trains an MLP with torch on the job's
device; without torch, scikit-learn's MLPClassifier, one pass per epoch.

After every epoch but the last it saves a checkpoint in ctx.checkpoint_dir (a temporary file
renamed over the last one, so a stop mid-write leaves the previous one whole), then yields if
it was asked to: a preemption loses no finished epoch. The checkpoint holds the input's epochs
and seed (a checkpoint of another input is ignored), the epochs done and their accuracies, and
the model: on scikit-learn the fitted MLPClassifier, pickled (it reseeds its shuffling at every
pass, so a resumed run trains exactly as an unpreempted one); on torch the model's and Adam's
state_dicts and the batch order's generator state (the same training, up to the GPU's
nondeterministic arithmetic). Each library has a file of its own: a run on a worker without
torch does not read a torch run's checkpoint, and starts over.

setup() runs once per child, before the first job's clock starts: it loads the images and, on
torch, runs one training step and one evaluation of a throwaway model, so that CUDA's context,
its lazily loaded kernels and cuBLAS are ready before any job is billed (on an H200 the first
run in a child took 8 s without it, the second 0.6 s).

sklearn and torch are imported inside the job: the API imports this module only to read its
schemas, and stays light."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field

from app.jobs.context import JobContext
from app.jobs.registry import job

HIDDEN = 64  # units of the one hidden layer
LEARNING_RATE = 0.01
BATCH = 32
SPLIT_SEED = 0  # the held-out images are the same whatever the input's seed
#: The largest seed: scikit-learn hands it to numpy, whose generators take 0 to 2**32 - 1.
MAX_SEED = 2**32 - 1
#: The checkpoint's file in ctx.checkpoint_dir, one per library (their models differ).
SKLEARN_CHECKPOINT = "digits-sklearn.pickle"
TORCH_CHECKPOINT = "digits-torch.pt"


class DigitsIn(BaseModel):
    """How long to train, and the seed of the model's initial weights and of the shuffling."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(10, ge=1, le=50, description="passes over the training images")
    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="seed of the initial weights and of the batches' order"
    )


class DigitsOut(BaseModel):
    """The accuracy on the held-out images after training."""

    accuracy: float = Field(description="fraction of the held-out images classified right")
    epochs: int


@dataclass(frozen=True)
class _Split:
    x_train: Any
    y_train: Any
    x_test: Any
    y_test: Any


@job(
    name="digits-train",
    queue="short",
    max_duration_s=60,
    description="Trains a small classifier on scikit-learn's digits; returns its accuracy.",
    preemptible=True,
)
class DigitsTrain:
    """Trains a small classifier on scikit-learn's digits; returns its accuracy."""

    def __init__(self) -> None:
        self._split: _Split | None = None

    def setup(self, ctx: JobContext) -> None:
        """Load the images, and warm the device with a throwaway model (not billed)."""
        self._split = _load()
        if ctx.device is not None:
            _warm_torch(ctx.device, self._split)

    def run(self, ctx: JobContext, inp: DigitsIn) -> DigitsOut:
        """Train and evaluate."""
        split = self._split or _load()
        ctx.log(f"{len(split.y_train)} training images, {len(split.y_test)} held out")
        train = _train_torch if ctx.device is not None else _train_sklearn
        history = train(ctx, inp, split)
        # the learning curve, as an artifact: one line per epoch
        lines = [f"{epoch},{accuracy:.4f}" for epoch, accuracy in enumerate(history, 1)]
        csv = "\n".join(["epoch,accuracy", *lines]) + "\n"
        (ctx.output_dir / "accuracy.csv").write_text(csv)
        return DigitsOut(accuracy=history[-1], epochs=inp.epochs)


def _epoch_done(ctx: JobContext, inp: DigitsIn, history: list[float], accuracy: float) -> None:
    """Note one epoch's held-out accuracy: in the log, the progress and the learning curve."""
    history.append(accuracy)
    epoch = len(history)
    ctx.log(f"epoch {epoch}: held-out accuracy {accuracy:.3f}")
    ctx.progress(epoch / inp.epochs, f"epoch {epoch} of {inp.epochs}")


def _load() -> _Split:
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]
    from sklearn.model_selection import train_test_split  # type: ignore[import-untyped]

    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")  # pixels are 0..16
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.2, random_state=SPLIT_SEED, stratify=digits.target
    )
    return _Split(x_train, y_train, x_test, y_test)


def _train_sklearn(ctx: JobContext, inp: DigitsIn, split: _Split) -> list[float]:
    from sklearn.neural_network import MLPClassifier  # type: ignore[import-untyped]

    path = ctx.checkpoint_dir / SKLEARN_CHECKPOINT
    saved = _resumed(ctx, inp, path, _unpickle)
    model = (
        saved["model"]
        if saved
        else MLPClassifier(
            hidden_layer_sizes=(HIDDEN,),
            learning_rate_init=LEARNING_RATE,
            batch_size=BATCH,
            random_state=inp.seed,
        )
    )
    history: list[float] = list(saved["history"]) if saved else []
    for _ in range(len(history), inp.epochs):
        ctx.check_cancelled()
        model.partial_fit(split.x_train, split.y_train, classes=list(range(10)))
        _epoch_done(ctx, inp, history, float(model.score(split.x_test, split.y_test)))
        if len(history) < inp.epochs:  # after the last epoch the job is done: nothing to save
            _checkpoint(ctx, path, pickle.dump, {**_head(inp, history), "model": model})
    return history


def _unpickle(path: Path) -> Any:
    with path.open("rb") as saved:
        # this job's own earlier run wrote it; the checkpoint store is the service's own, as
        # trusted as the job types' code
        return pickle.load(saved)  # noqa: S301


def _head(inp: DigitsIn, history: list[float]) -> dict[str, Any]:
    """What a checkpoint holds besides the model: whose it is (the input's epochs and seed),
    the epochs done and their accuracies (the learning curve goes on from them)."""
    return {"epochs": inp.epochs, "seed": inp.seed, "epoch": len(history), "history": history}


def _resumed(
    ctx: JobContext, inp: DigitsIn, path: Path, load: Callable[[Path], Any]
) -> dict[str, Any] | None:
    """The checkpoint at path if it is this input's, or None: training starts from epoch 0."""
    if not path.exists():
        return None
    try:
        state = load(path)
    except Exception as exc:  # another library version's file, say: start over, not fail
        ctx.log(f"checkpoint unreadable ({type(exc).__name__}: {exc}); starting over")
        return None
    ours = (inp.epochs, inp.seed)
    if not isinstance(state, dict) or (state.get("epochs"), state.get("seed")) != ours:
        ctx.log("checkpoint of another input ignored; starting over")
        return None
    ctx.log(
        f"resumed from the checkpoint of epoch {state['epoch']} "
        f"({ctx.preemptions} earlier run(s) preempted)"
    )
    return state


def _checkpoint(
    ctx: JobContext,
    path: Path,
    dump: Callable[[dict[str, Any], IO[bytes]], None],
    state: dict[str, Any],
) -> None:
    """Between epochs: save the checkpoint, then yield if asked (what is saved is whole, so the
    yield loses no finished epoch)."""
    partial = path.with_name(path.name + ".tmp")
    with partial.open("wb") as out:
        dump(state, out)
    os.replace(partial, path)  # a rename: a stop at any instant leaves one whole checkpoint
    ctx.check_preempted()


def _model(device: Any, seed: int) -> Any:
    """The MLP, its initial weights drawn from the seed (not from the process's generator)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.nn.Sequential(
            torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10)
        ).to(device)


def _warm_torch(device: Any, split: _Split) -> None:
    """One batch's training step and one evaluation on a throwaway model: every kernel and
    library a job uses is loaded once it has run."""
    import torch

    model = _model(device, 0)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    x = torch.as_tensor(split.x_train[:BATCH], device=device)
    y = torch.as_tensor(split.y_train[:BATCH], device=device)
    rows = torch.randperm(BATCH, generator=torch.Generator().manual_seed(0)).to(device)
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
    optimizer.step()
    with torch.no_grad():
        model(torch.as_tensor(split.x_test, device=device)).argmax(dim=1).cpu()


def _train_torch(ctx: JobContext, inp: DigitsIn, split: _Split) -> list[float]:
    import torch

    device = ctx.device
    x_train = torch.as_tensor(split.x_train, device=device)
    y_train = torch.as_tensor(split.y_train, device=device)
    model = _model(device, inp.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    order = torch.Generator().manual_seed(inp.seed)
    path = ctx.checkpoint_dir / TORCH_CHECKPOINT
    # onto the CPU, where the generator's state must be; the model and Adam copy theirs over
    # to the device. weights_only: tensors and plain values, nothing that runs code
    saved = _resumed(ctx, inp, path, lambda p: torch.load(p, map_location="cpu", weights_only=True))
    if saved:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        order.set_state(saved["order"])
    x_test = torch.as_tensor(split.x_test, device=device)
    history: list[float] = list(saved["history"]) if saved else []
    for _ in range(len(history), inp.epochs):
        ctx.check_cancelled()
        for rows in torch.randperm(len(x_train), generator=order).split(BATCH):
            batch = rows.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            guesses = model(x_test).argmax(dim=1).cpu()
        _epoch_done(ctx, inp, history, float((guesses.numpy() == split.y_test).mean()))
        if len(history) < inp.epochs:
            state = {
                **_head(inp, history),
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "order": order.get_state(),
            }
            _checkpoint(ctx, path, torch.save, state)
    return history
