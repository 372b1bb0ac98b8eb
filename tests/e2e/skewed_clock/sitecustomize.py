"""Loaded by every Python process started with this folder on PYTHONPATH: its wall clock
(time.time, time.time_ns) runs FAIRGPU_TEST_CLOCK_SKEW_S seconds off, as on a host whose clock
is wrong. The monotonic clock, sleeps and timed waits are the host's, as they would be there.
(libfaketime did this from outside, but Debian 12's hangs or fails a Python's timed waits.)"""

import os
import time

_SKEW_S = float(os.environ.get("FAIRGPU_TEST_CLOCK_SKEW_S", "0"))
_time, _time_ns = time.time, time.time_ns


def _skewed_time() -> float:
    return _time() + _SKEW_S


def _skewed_time_ns() -> int:
    return _time_ns() + int(_SKEW_S * 1e9)


time.time = _skewed_time
time.time_ns = _skewed_time_ns
