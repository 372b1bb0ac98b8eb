"""A worker's place in the fleet (app/fleet/place.py): its host, its class, the class's catalog
memory and price; without a catalog no class, no memory and price 1.0; and the worker's start
(app/worker/main.py find_place), which reads its card only where the catalog names the class and
stops with one line where the card fits no class."""

from __future__ import annotations

import json
import socket

import pytest

from app.fleet.place import FleetError, WorkerPlace, place_of
from app.settings import Settings
from app.worker import gpu
from app.worker.main import find_place

GB = 10**9
GIB = 2**30
CATALOG = json.dumps(
    {
        "big": {"memory_gb": 80, "price": 2.0, "match": "A100"},
        "small": {"memory_gb": 24, "price": 1.0},
    }
)


def settings(**fields: object) -> Settings:
    return Settings.model_validate({"gpu_classes": CATALOG, "worker_host": "node-1", **fields})


def test_a_card_takes_its_class_with_the_catalogs_memory_not_its_own() -> None:
    assert place_of(settings(), "NVIDIA A100-SXM4-80GB", 79 * GIB) == WorkerPlace(
        "node-1", "big", 80.0, 2.0
    )
    assert place_of(settings(), "NVIDIA GeForce RTX 4090", 25_757_220_864) == WorkerPlace(
        "node-1", "small", 24.0, 1.0
    )


def test_a_cpu_worker_takes_the_catalogs_first_class() -> None:
    assert place_of(settings(), None, None) == WorkerPlace("node-1", "big", 80.0, 2.0)


def test_worker_gpu_class_names_the_class_whatever_the_card() -> None:
    asked = settings(worker_gpu_class="small")
    assert place_of(asked, "NVIDIA A100-SXM4-80GB", 80 * GB).gpu_class == "small"


def test_without_a_catalog_no_class_no_memory_and_price_one() -> None:
    unset = Settings(worker_host="node-2")
    for device, memory in [(None, None), ("NVIDIA GeForce GTX 1080", 8 * GB)]:
        assert place_of(unset, device, memory) == WorkerPlace("node-2", None, None, 1.0)


def test_the_host_defaults_to_the_hostname() -> None:
    assert place_of(Settings(), None, None).host == socket.gethostname()


def test_a_card_no_class_fits_is_a_fleet_error() -> None:
    with pytest.raises(FleetError, match=r"'NVIDIA GeForce GTX 1080' .* fits no class"):
        place_of(settings(), "NVIDIA GeForce GTX 1080", 8 * GB)


def test_the_place_says_itself_in_a_few_words() -> None:
    assert place_of(settings(), None, None).describe() == "host node-1, class big (80 GB, price 2)"
    assert "no GPU class" in place_of(Settings(worker_host="n"), None, None).describe()


# -- the worker's start ---------------------------------------------------------------------------
class Card:
    """A card as the worker would read it, and whether it was read."""

    def __init__(self, name: str, memory: int) -> None:
        self.name, self.memory, self.read = name, memory, 0

    def __call__(self, device: gpu.Device) -> tuple[str | None, int | None]:
        self.read += 1
        return self.name, self.memory


def test_a_gpu_worker_reads_its_card_to_find_its_class() -> None:
    card = Card("NVIDIA A100-SXM4-80GB", 80 * GIB)
    assert find_place(settings(), gpu.Device(0), card).gpu_class == "big"
    assert card.read == 1


def test_the_card_is_not_read_where_the_catalog_does_not_name_the_class() -> None:
    card = Card("NVIDIA A100-SXM4-80GB", 80 * GIB)
    assert find_place(Settings(worker_host="n"), gpu.Device(0), card).gpu_class is None
    assert find_place(settings(worker_gpu_class="small"), gpu.Device(0), card).gpu_class == "small"
    assert card.read == 0


def test_a_card_no_class_fits_stops_the_worker_with_one_line() -> None:
    with pytest.raises(SystemExit) as stopped:
        find_place(settings(), gpu.Device(0), Card("NVIDIA GeForce GTX 1080", 8 * GB))
    line = str(stopped.value.code)
    assert "\n" not in line
    assert line.startswith("fairgpu worker refuses to start: the GPU 'NVIDIA GeForce GTX 1080'")
    assert "fits no class of GPU_CLASSES" in line


def test_a_card_that_cannot_be_read_stops_the_worker_with_one_line() -> None:
    def broken(device: gpu.Device) -> tuple[str | None, int | None]:
        raise RuntimeError("CUDA driver version is insufficient")

    with pytest.raises(SystemExit) as stopped:
        find_place(settings(), gpu.Device(0), broken)
    assert stopped.value.code == (
        "fairgpu worker refuses to start: its GPU cannot be read: "
        "CUDA driver version is insufficient"
    )


def test_an_unknown_worker_gpu_class_stops_the_worker_with_one_line() -> None:
    with pytest.raises(SystemExit) as stopped:
        find_place(settings(worker_gpu_class="huge"), gpu.CPU)
    assert str(stopped.value.code).startswith(
        "fairgpu worker refuses to start: WORKER_GPU_CLASS='huge' is no class of GPU_CLASSES"
    )
