"""The host launcher (app/worker/host.py): which workers it starts, with what environment, and how
it keeps them running. The supervision tests run the real launcher over stand-in workers (small
Python processes that record what they saw), so no GPU and no Redis are needed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.dev.processes import wait_until
from app.worker import gpu
from app.worker.host import DROPPED, HostError, served_cards, worker_envs

ROOT = Path(__file__).resolve().parents[2]
LISTING = """\
GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)
GPU 1: NVIDIA H200 (UUID: GPU-11111111-1111-1111-1111-111111111111)
  MIG 3g.71gb     Device  0: (UUID: MIG-22222222-2222-2222-2222-222222222222)
GPU 2: NVIDIA H200 (UUID: GPU-33333333-3333-3333-3333-333333333333)
"""
#: How long a stand-in worker may take to start, stop or start again (1 s of backoff included).
DEADLINE_S = 30.0


def listing() -> str:
    return LISTING


def no_listing() -> str:
    raise AssertionError("nvidia-smi asked although FAIRGPU_GPUS names the cards")


# --- which workers, with what environment ----------------------------------------------------


def test_every_card_nvidia_smi_lists_gets_a_worker_but_mig_devices_do_not() -> None:
    assert sorted(worker_envs({}, listing)) == [0, 1, 2]


def test_fairgpu_gpus_names_the_cards_without_asking_nvidia_smi() -> None:
    assert served_cards({"FAIRGPU_GPUS": "3, 0,2"}, no_listing) == [0, 2, 3]


@pytest.mark.parametrize("value", ["x", "0,0", "1,-1", "0;1", "1.0"])
def test_a_malformed_card_list_is_refused(value: str) -> None:
    with pytest.raises(HostError, match="FAIRGPU_GPUS"):
        served_cards({"FAIRGPU_GPUS": value}, no_listing)


def test_a_container_without_a_card_is_refused() -> None:
    with pytest.raises(HostError, match="lists no GPU"):
        served_cards({}, lambda: "No devices were found\n")


def test_each_worker_drives_its_own_card_as_nvidia_smi_numbers_it() -> None:
    envs = worker_envs({"FAIRGPU_GPUS": "0,2"}, no_listing)
    for card, env in envs.items():
        assert env["CUDA_VISIBLE_DEVICES"] == str(card)
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        # the worker's own device choice takes it, with the container's number of the card
        assert gpu.choose_device(env, lambda: 1) == gpu.Device(gpu_id=card)


def test_the_workers_share_the_host_and_have_names_of_their_own() -> None:
    env = {"WORKER_HOST": "node-7", "WORKER_NAME": "gpu{card}@node-7", "REDIS_URL": "redis://r"}
    envs = worker_envs(env, listing)
    assert [e["WORKER_NAME"] for e in envs.values()] == [
        "gpu0@node-7",
        "gpu1@node-7",
        "gpu2@node-7",
    ]
    assert {e["WORKER_HOST"] for e in envs.values()} == {"node-7"}
    assert {e["REDIS_URL"] for e in envs.values()} == {"redis://r"}
    # by default the worker's own default name, with the card's number: gpuN@<hostname>
    assert worker_envs({}, listing)[1]["WORKER_NAME"] == "gpu1@%h"


def test_a_worker_name_without_the_card_is_refused() -> None:
    with pytest.raises(HostError, match=r"\{card\}"):
        worker_envs({"WORKER_NAME": "gpu@pod-1"}, listing)


def test_no_worker_gets_the_one_card_containers_host_gpu_id() -> None:
    # it would make every worker report that one card's number
    envs = worker_envs({"HOST_GPU_ID": "3"}, listing)
    assert not any("HOST_GPU_ID" in env for env in envs.values())


def test_classes_are_set_card_by_card_and_the_others_keep_the_hosts() -> None:
    env = {"FAIRGPU_CARD_CLASSES": "0=big, 2=small", "WORKER_GPU_CLASS": "mid"}
    envs = worker_envs(env, listing)
    assert [e["WORKER_GPU_CLASS"] for e in envs.values()] == ["big", "mid", "small"]
    assert not set(DROPPED) & {key for e in envs.values() for key in e}


@pytest.mark.parametrize("classes", ["5=big", "0=Big!", "big", "=big", "1=a,1=b"])
def test_a_class_for_no_served_card_or_a_bad_name_is_refused(classes: str) -> None:
    with pytest.raises(HostError, match="CARD=CLASS once per served card"):
        worker_envs({"FAIRGPU_CARD_CLASSES": classes}, listing)


# --- supervision, with real processes ---------------------------------------------------------

#: A stand-in worker: it records its environment in <folder>/<name>.<pid>.json, then
#: - exits 1 at its first start where FAIL_ONCE names its card, and 0 where EXIT names it;
#: - otherwise waits for SIGTERM or SIGINT, records it in <folder>/<name>.<pid>.stopped, and exits
#:   with STOP_CODE.
FAKE_WORKER = """
import json, os, signal, sys
folder, card = sys.argv[1], os.environ["CUDA_VISIBLE_DEVICES"]
me = os.path.join(folder, f"{os.environ['WORKER_NAME']}.{os.getpid()}")
keys = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "WORKER_NAME", "WORKER_HOST", "FAIRGPU_GPUS")
def stopped(signo, frame):
    with open(me + ".part", "w") as out:
        out.write(signal.Signals(signo).name)
    os.rename(me + ".part", me + ".stopped")
    sys.exit(int(os.environ.get("STOP_CODE", "0")))
signal.signal(signal.SIGTERM, stopped)
signal.signal(signal.SIGINT, stopped)
with open(me + ".part", "w") as out:  # renamed once whole: a reader never sees half of it
    json.dump({key: os.environ.get(key) for key in keys}, out)
os.rename(me + ".part", me + ".json")
failed = os.path.join(folder, f"failed-{card}")
if card in os.environ.get("FAIL_ONCE", "").split(",") and not os.path.exists(failed):
    open(failed, "w").close()
    sys.exit(1)
if card in os.environ.get("EXIT", "").split(","):
    sys.exit(0)
while True:
    signal.pause()
"""


class Launched:
    """The launcher over stand-in workers, in a folder where they record themselves."""

    def __init__(self, folder: Path, **env: str) -> None:
        self.folder = folder
        command = [sys.executable, "-m", "app.worker.host", "--"]
        command += [sys.executable, "-c", FAKE_WORKER, str(folder)]
        environ = {k: v for k, v in os.environ.items() if k not in ("WORKER_NAME", "HOST_GPU_ID")}
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**environ, "WORKER_HOST": "node-7", **env},
            text=True,
            stderr=subprocess.PIPE,
        )

    def starts(self, name: str) -> list[dict[str, str]]:
        """What each start of worker `name` saw, in no particular order."""
        return [json.loads(path.read_text()) for path in self.folder.glob(f"{name}.*.json")]

    def stops(self) -> list[str]:
        """The signal each stopped worker got."""
        return [path.read_text() for path in self.folder.glob("*.stopped")]

    def wait_for_starts(self, name: str, count: int) -> None:
        wait_until(lambda: len(self.starts(name)) >= count, DEADLINE_S, f"{count} starts of {name}")

    def stop(self, signo: signal.Signals = signal.SIGTERM) -> tuple[int, str]:
        self.process.send_signal(signo)
        _, err = self.process.communicate(timeout=DEADLINE_S)
        return self.process.returncode, err


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[list[Launched]]:
    started: list[Launched] = []
    yield started
    for one in started:
        if one.process.poll() is None:
            one.process.kill()
        one.process.communicate()  # reaps it and closes its stderr


def launch(started: list[Launched], folder: Path, **env: str) -> Launched:
    started.append(Launched(folder, **env))
    return started[-1]


@pytest.mark.integration  # real launcher and worker processes
def test_one_worker_per_card_each_on_its_card_and_all_stopped_by_one_sigterm(
    launched: list[Launched], tmp_path: Path
) -> None:
    host = launch(launched, tmp_path, FAIRGPU_GPUS="0,1,3")
    for card in (0, 1, 3):
        host.wait_for_starts(f"gpu{card}@%h", 1)
        (seen,) = host.starts(f"gpu{card}@%h")
        assert seen == {
            "CUDA_VISIBLE_DEVICES": str(card),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "WORKER_NAME": f"gpu{card}@%h",
            "WORKER_HOST": "node-7",
            "FAIRGPU_GPUS": None,
        }
    code, _ = host.stop()
    assert code == 0
    assert sorted(host.stops()) == ["SIGTERM"] * 3


@pytest.mark.integration  # real launcher and worker processes
def test_a_terminals_interrupt_reaches_every_worker_once(
    launched: list[Launched], tmp_path: Path
) -> None:
    host = launch(launched, tmp_path, FAIRGPU_GPUS="0,1")
    host.wait_for_starts("gpu1@%h", 1)
    host.wait_for_starts("gpu0@%h", 1)
    code, _ = host.stop(signal.SIGINT)
    assert code == 0
    assert sorted(host.stops()) == ["SIGINT", "SIGINT"]


@pytest.mark.integration  # real launcher and worker processes
def test_a_worker_that_fails_is_started_again_and_the_others_run_on(
    launched: list[Launched], tmp_path: Path
) -> None:
    host = launch(launched, tmp_path, FAIRGPU_GPUS="0,1", FAIL_ONCE="1")
    host.wait_for_starts("gpu1@%h", 2)  # the failed start, then its restart
    assert len(host.starts("gpu0@%h")) == 1
    code, err = host.stop()
    assert code == 0
    assert "the worker of card 1 stopped (exit code 1); starting it again in 1 s" in err
    assert len(host.stops()) == 2  # the restarted worker and card 0's


@pytest.mark.integration  # real launcher and worker processes
def test_a_worker_that_exits_cleanly_stays_stopped_and_the_launcher_ends_with_the_last(
    launched: list[Launched], tmp_path: Path
) -> None:
    host = launch(launched, tmp_path, FAIRGPU_GPUS="0,1", EXIT="0,1")
    assert host.process.wait(timeout=DEADLINE_S) == 0
    assert len(host.starts("gpu0@%h")) == len(host.starts("gpu1@%h")) == 1


@pytest.mark.integration  # real launcher and worker processes
def test_a_worker_that_fails_to_stop_cleanly_makes_the_launcher_fail(
    launched: list[Launched], tmp_path: Path
) -> None:
    host = launch(launched, tmp_path, FAIRGPU_GPUS="0", STOP_CODE="3")
    host.wait_for_starts("gpu0@%h", 1)
    code, err = host.stop()
    assert code == 1
    assert "the worker of card 0 stopped (exit code 3)" in err
    assert not host.starts("gpu0@%h")[1:]  # and it is not started again


@pytest.mark.integration  # real launcher and worker processes
def test_a_launcher_that_cannot_tell_the_cards_says_why_and_starts_nothing(
    launched: list[Launched], tmp_path: Path
) -> None:
    host = launch(launched, tmp_path, FAIRGPU_GPUS="zero")
    _, err = host.process.communicate(timeout=DEADLINE_S)
    assert host.process.returncode == 2
    assert err.strip().startswith("fairgpu host refuses to start: FAIRGPU_GPUS='zero'")
    assert not list(tmp_path.iterdir())


@pytest.mark.integration  # real launcher and worker processes
def test_a_launcher_without_nvidia_smi_asks_for_fairgpu_gpus(
    launched: list[Launched], tmp_path: Path
) -> None:
    host = launch(launched, tmp_path, PATH=str(tmp_path), FAIRGPU_GPUS="")  # no nvidia-smi on it
    _, err = host.process.communicate(timeout=DEADLINE_S)
    assert host.process.returncode == 2
    assert "nvidia-smi" in err and "set FAIRGPU_GPUS=0,1,..." in err
