"""digits-train as a preemptible job: a checkpoint after each epoch, a yield right after it,
and a resumed run that goes on from it. Run in-process on contexts built by hand, the worker's
ask to yield played by `_yield`."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

from app.jobs import JobContext, JobPreemptedError
from app.jobs.builtin.digits import SKLEARN_CHECKPOINT, DigitsIn, DigitsOut, DigitsTrain


class Run:
    """One run of digits-train on a context of its own over a given checkpoint folder: what it
    logged and the epochs it reported through ctx.progress. Asked to yield once it has reported
    yield_after epochs (never with None)."""

    def __init__(
        self, tmp_path: Path, *, yield_after: int | None = None, preemptions: int = 0
    ) -> None:
        self.said: list[str] = []
        self.epochs: list[str] = []  # the progress messages, "epoch N of M"
        output = tmp_path / f"output-{preemptions}"
        output.mkdir()
        checkpoints = tmp_path / "checkpoints"
        checkpoints.mkdir(exist_ok=True)
        self.ctx = JobContext(
            "t1", None, None, time.time() + 60, output_dir=output, _log=self.said.append,
            _progress=lambda fraction, message: self.epochs.append(message),
            checkpoint_dir=checkpoints, preemptions=preemptions,
            _yield=lambda: yield_after is not None and len(self.epochs) >= yield_after,
        )  # fmt: skip

    def run(self, inp: DigitsIn) -> DigitsOut:
        out = DigitsTrain.make().run(self.ctx, inp)
        assert isinstance(out, DigitsOut)
        return out

    def preempted(self, inp: DigitsIn) -> None:
        with pytest.raises(JobPreemptedError):
            self.run(inp)


def saved(tmp_path: Path) -> dict[str, object]:
    with (tmp_path / "checkpoints" / SKLEARN_CHECKPOINT).open("rb") as checkpoint:
        state: dict[str, object] = pickle.load(checkpoint)
    return state


def test_digits_train_is_preemptible() -> None:
    assert DigitsTrain.preemptible


# importing scikit-learn alone takes about 2 s: too slow for the unit tier
@pytest.mark.integration
def test_a_run_asked_to_yield_stops_after_the_epochs_checkpoint(tmp_path: Path) -> None:
    first = Run(tmp_path, yield_after=2)
    first.preempted(DigitsIn(epochs=4, seed=3))
    assert first.epochs == ["epoch 1 of 4", "epoch 2 of 4"]  # the ask came during epoch 2
    state = saved(tmp_path)
    assert (state["epochs"], state["seed"], state["epoch"]) == (4, 3, 2)
    history = state["history"]
    assert isinstance(history, list) and len(history) == 2  # the learning curve goes on from it
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == [SKLEARN_CHECKPOINT]


@pytest.mark.integration
def test_the_next_run_resumes_from_the_checkpoint_and_trains_as_an_unpreempted_run(
    tmp_path: Path,
) -> None:
    inp = DigitsIn(epochs=4, seed=3)
    Run(tmp_path, yield_after=2).preempted(inp)
    resumed = Run(tmp_path, preemptions=1)
    out = resumed.run(inp)
    assert "resumed from the checkpoint of epoch 2 (1 earlier run(s) preempted)" in resumed.said
    assert resumed.epochs == ["epoch 3 of 4", "epoch 4 of 4"]  # epochs 1 and 2 not trained again
    assert out.epochs == 4 and 0.0 <= out.accuracy <= 1.0
    curve = (resumed.ctx.output_dir / "accuracy.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in curve] == ["epoch", "1", "2", "3", "4"]
    # scikit-learn reseeds its shuffling at every pass: the same training as without the yield
    (tmp_path / "alone").mkdir()
    assert Run(tmp_path / "alone").run(inp) == out


@pytest.mark.integration
def test_a_checkpoint_of_another_input_is_ignored(tmp_path: Path) -> None:
    Run(tmp_path, yield_after=2).preempted(DigitsIn(epochs=4, seed=1))
    again = Run(tmp_path, preemptions=1)
    out = again.run(DigitsIn(epochs=3, seed=1))
    assert "checkpoint of another input ignored; starting over" in again.said
    assert again.epochs == ["epoch 1 of 3", "epoch 2 of 3", "epoch 3 of 3"]
    assert out.epochs == 3


@pytest.mark.integration
def test_an_unreadable_checkpoint_is_a_fresh_start(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / SKLEARN_CHECKPOINT).write_bytes(b"not a pickle")
    run = Run(tmp_path)
    assert run.run(DigitsIn(epochs=2)).epochs == 2
    assert any(line.startswith("checkpoint unreadable") for line in run.said)
    assert run.epochs == ["epoch 1 of 2", "epoch 2 of 2"]


@pytest.mark.integration
def test_an_ask_to_yield_after_the_last_epoch_finishes_the_job(tmp_path: Path) -> None:
    run = Run(tmp_path, yield_after=1)
    out = run.run(DigitsIn(epochs=1))
    assert out.epochs == 1 and 0.0 <= out.accuracy <= 1.0
    assert list((tmp_path / "checkpoints").iterdir()) == []  # nothing left to resume
