"""The decision after each job: does the warm child serve the next one (app/worker/hygiene.py)."""

from __future__ import annotations

import pytest

from app.settings import Settings
from app.worker.calls import After
from app.worker.hygiene import MB, ChildLimits, leaked, verdict

DEFAULTS = ChildLimits()


def test_a_healthy_child_that_holds_its_baseline_stays() -> None:
    after = After(None, gpu_held=300 * MB, gpu_baseline=300 * MB, rss_bytes=900 * MB)
    assert verdict(after, jobs_run=1000, limits=DEFAULTS) is None


def test_a_sticky_device_error_goes_first_whatever_else_holds() -> None:
    after = After("CUDA error: device-side assert triggered", None, None, 10**12)
    judged = verdict(after, 1, ChildLimits(max_rss_mb=1, max_jobs=1, per_job=True))
    assert judged is not None
    assert judged.reason == "cuda_error"
    assert "device-side assert triggered" in judged.detail


@pytest.mark.parametrize(
    ("held_mb", "baseline_mb", "replaced"),
    [(256, 0, False), (257, 0, True), (556, 300, False), (557, 300, True), (1000, None, True)],
)
def test_gpu_memory_held_beyond_the_post_setup_baseline_is_a_leak_past_the_limit(
    held_mb: int, baseline_mb: int | None, replaced: bool
) -> None:
    baseline = None if baseline_mb is None else baseline_mb * MB
    judged = verdict(After(None, held_mb * MB, baseline), 1, DEFAULTS)
    assert (judged is not None and judged.reason == "gpu_leak") is replaced
    if judged is not None:
        assert "CHILD_MAX_GPU_LEAK_MB" in judged.detail


def test_no_leak_limit_means_no_leak_replacement() -> None:
    after = After(None, 10**12, 0)
    assert verdict(after, 1, ChildLimits(max_gpu_leak_mb=None)) is None
    assert leaked(after) == 10**12
    assert leaked(After()) == 0  # no device in use


def test_rss_over_the_limit_replaces_and_unknown_rss_does_not() -> None:
    limits = ChildLimits(max_rss_mb=512)
    judged = verdict(After(rss_bytes=513 * MB), 1, limits)
    assert judged is not None and judged.reason == "rss"
    assert verdict(After(rss_bytes=512 * MB), 1, limits) is None
    assert verdict(After(rss_bytes=None), 1, limits) is None


def test_max_jobs_counts_the_jobs_this_child_ran() -> None:
    limits = ChildLimits(max_jobs=3)
    assert [verdict(After(), n, limits) is not None for n in (1, 2, 3)] == [False, False, True]
    judged = verdict(After(), 3, limits)
    assert judged is not None and judged.reason == "max_jobs"


def test_per_job_replaces_after_every_job() -> None:
    judged = verdict(After(), 1, ChildLimits(per_job=True))
    assert judged is not None and judged.reason == "per_job"


def test_the_limits_come_from_the_settings() -> None:
    settings = Settings(
        child_max_gpu_leak_mb=64, child_max_rss_mb=2048, child_max_jobs=50, child_per_job=True
    )
    assert ChildLimits.of(settings) == ChildLimits(64, 2048, 50, per_job=True)
    assert ChildLimits.of(settings).leak_bytes == 64 * MB
    assert ChildLimits.of(Settings()) == ChildLimits(256, None, None, per_job=False)
