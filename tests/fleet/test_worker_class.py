"""How a worker finds its class (asked, by its card's name, by its memory; a CPU worker) and its
host, and the one line that stops a worker whose card fits no class."""

from __future__ import annotations

import json
import socket

import pytest

from app.fleet.catalog import Catalog
from app.fleet.worker_class import FleetError, worker_class, worker_host
from app.settings import Settings

GB = 10**9
GIB = 2**30
CATALOG = Catalog.from_json(
    json.dumps(
        {
            "big": {"memory_gb": 80, "price": 2.0, "match": "A100"},
            "a100-40": {"memory_gb": 40, "price": 1.5, "match": "A100-SXM4-40GB"},
            "mid": {"memory_gb": 24, "price": 1.0},
            "small": {"memory_gb": 16, "price": 1.0, "match": "t4"},
        }
    )
)


def name_of(device: str | None, memory: int | None, asked: str | None = None) -> str | None:
    return worker_class(CATALOG, device, memory, asked).name


def test_the_match_is_a_substring_of_the_device_name_in_any_case() -> None:
    assert name_of("NVIDIA A100-SXM4-80GB", 80 * GIB) == "big"
    assert name_of("Tesla T4", 15 * GIB) == "small"  # 15 GiB < 16 GB: the match decides
    assert name_of("nvidia a100 80gb pcie", None) == "big"


def test_the_longest_match_wins() -> None:
    assert name_of("NVIDIA A100-SXM4-40GB", 40 * GIB) == "a100-40"


def test_two_equal_matches_are_an_error_naming_both() -> None:
    catalog = Catalog.from_json(
        json.dumps(
            {
                "x": {"memory_gb": 24, "price": 1.0, "match": "RTX"},
                "y": {"memory_gb": 48, "price": 1.0, "match": "rtx"},
            }
        )
    )
    with pytest.raises(FleetError, match=r"matches the classes 'x' and 'y' equally"):
        worker_class(catalog, "NVIDIA GeForce RTX 4090", 24 * GB, None)


def test_without_a_match_the_largest_class_the_card_holds() -> None:
    # A 24 GB card (RTX 4090: 23.99 GiB) holds mid's 24 GB and small's 16, not big's 80.
    assert name_of("NVIDIA GeForce RTX 4090", 25_757_220_864) == "mid"
    assert name_of("NVIDIA L4", 30 * GB) == "mid"
    # A class's match does not keep other cards from it: 48 GB holds a100-40's 40.
    assert name_of("NVIDIA L40S", 48 * GB) == "a100-40"
    assert name_of("NVIDIA H100 80GB HBM3", 85_000_000_000) == "big"
    # Catalog memory is 10^9 bytes: exactly 24 * 10^9 holds mid.
    assert name_of("Some card", 24 * GB) == "mid"
    assert name_of("Some card", 24 * GB - 1) == "small"


def test_equal_memory_goes_to_the_first_in_catalog_order() -> None:
    catalog = Catalog.from_json(
        json.dumps({"one": {"memory_gb": 24, "price": 1.0}, "two": {"memory_gb": 24, "price": 2.0}})
    )
    assert worker_class(catalog, "card", 30 * GB, None).name == "one"


def test_a_card_no_class_fits_is_one_clear_line() -> None:
    with pytest.raises(FleetError) as raised:
        name_of("NVIDIA GeForce GTX 1080", 8 * GB)
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith(
        "the GPU 'NVIDIA GeForce GTX 1080' (8.0 GB) fits no class of GPU_CLASSES"
    )
    assert "big (80 GB, match 'A100')" in line and "small (16 GB, match 't4')" in line
    assert line.endswith("set WORKER_GPU_CLASS or a class's match")


def test_a_card_of_unknown_memory_without_a_match_fits_nothing() -> None:
    with pytest.raises(FleetError, match=r"the GPU 'Mystery' fits no class .*memory unknown"):
        name_of("Mystery", None)


def test_worker_gpu_class_wins_over_the_card() -> None:
    assert name_of("NVIDIA A100-SXM4-80GB", 80 * GIB, asked="small") == "small"
    assert name_of(None, None, asked="mid") == "mid"


def test_an_unknown_worker_gpu_class_is_a_clear_error() -> None:
    with pytest.raises(
        FleetError, match=r"^WORKER_GPU_CLASS='huge' is no class of GPU_CLASSES: big"
    ):
        name_of("NVIDIA A100-SXM4-80GB", 80 * GIB, asked="huge")
    with pytest.raises(FleetError, match=r"WORKER_GPU_CLASS='big' but GPU_CLASSES is unset"):
        worker_class(Catalog.single(), None, None, "big")


def test_a_cpu_worker_takes_the_first_class() -> None:
    assert name_of(None, None) == "big"
    assert name_of(None, 8 * GB) == "big"


def test_without_a_catalog_every_worker_is_the_unnamed_class() -> None:
    single = Catalog.single()
    for device, memory in [(None, None), ("NVIDIA GeForce GTX 1080", 8 * GB), ("x", None)]:
        assert worker_class(single, device, memory, None) is single.first
    assert worker_class(single, None, None, "").name is None  # empty: unset


def test_the_host_is_worker_host_else_the_hostname() -> None:
    assert worker_host(Settings(worker_host="node-7")) == "node-7"
    assert worker_host(Settings()) == socket.gethostname()
    assert worker_host(Settings(worker_host="")) == socket.gethostname()
