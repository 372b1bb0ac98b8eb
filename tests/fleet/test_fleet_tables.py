"""`fairgpu queues` shows the fleet (app/client/admin_tables.py): by class where the catalog names
classes, every class with its memory and price; by host and class; each worker's class; all in
80 columns. Without a catalog, no class table and no class column."""

from __future__ import annotations

import io
import time

from rich.console import Console
from rich.table import Table

from app.admin_models import FleetClass, FleetHost, FleetView, QueuesView, WorkerView
from app.client.admin_tables import fleet_tables, workers_table

FLEET = FleetView(
    ttl_s=600,
    hosts=[
        FleetHost(host="gpu-node-1", gpu_class="big", memory_gb=80, workers=2, alive=2, busy=1),
        FleetHost(host="gpu-node-2", gpu_class="small", memory_gb=24, workers=4, alive=3, busy=0),
    ],
    classes=[
        FleetClass(gpu_class="big", memory_gb=80, price=2, hosts=1, workers=2, alive=2, busy=1),
        FleetClass(gpu_class="small", memory_gb=24, price=1, hosts=1, workers=4, alive=3, busy=0),
        FleetClass(gpu_class="tiny", memory_gb=16, price=0.5, hosts=0, workers=0, alive=0, busy=0),
    ],
)


def shown(table: Table, width: int = 80) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width
    return lines


def rows(lines: list[str], first: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in lines if line.split()[:1] != [first]}


def test_the_fleet_by_class_lists_every_class_with_memory_and_price() -> None:
    by_class, by_host = fleet_tables(FLEET, 80)
    lines = shown(by_class)
    assert lines[0].split() == ["class", "memory", "price", "hosts", "workers", "alive", "busy"]
    found = rows(lines[1:], "class")
    assert found["big"] == ["big", "80", "GB", "2", "1", "2", "2", "1"]
    assert found["tiny"] == ["tiny", "16", "GB", "0.5", "0", "0", "0", "0"]
    hosts = rows(shown(by_host)[1:], "host")
    assert hosts["gpu-node-2"] == ["gpu-node-2", "small", "4", "3", "0"]


def test_without_a_catalog_only_the_hosts_are_shown() -> None:
    single = FleetView(
        ttl_s=600,
        hosts=[FleetHost(host="box", gpu_class=None, memory_gb=None, workers=1, alive=1, busy=0)],
        classes=[
            FleetClass(gpu_class=None, memory_gb=None, price=1, hosts=1, workers=1, alive=1, busy=0)
        ],
    )
    [by_host] = fleet_tables(single, 80)
    assert rows(shown(by_host)[1:], "host")["box"] == ["box", "none", "1", "1", "0"]
    assert fleet_tables(FleetView(ttl_s=600, hosts=[], classes=single.classes), 80) == []


def test_each_worker_says_its_class_where_the_catalog_names_one() -> None:
    now = time.time()
    placed = WorkerView(name="gpu0@gpu-node-1", queues=["short"], last_seen=now, alive=True)
    workers = [
        placed.model_copy(update={"gpu_class": "big"}),
        WorkerView(name="gpu0@old", queues=["long"], last_seen=now, alive=True),
    ]
    lines = shown(workers_table(QueuesView(queues=[], workers=workers), 80))
    assert lines[0].split() == ["worker", "queues", "class", "state"]
    found = rows(lines[1:], "worker")
    assert found["gpu0@gpu-node-1"] == ["gpu0@gpu-node-1", "short", "big", "idle"]
    assert found["gpu0@old"] == ["gpu0@old", "long", "none", "idle"]
    unplaced = [w.model_copy(update={"gpu_class": None}) for w in workers]
    lines = shown(workers_table(QueuesView(queues=[], workers=unplaced), 80))
    assert lines[0].split() == ["worker", "queues", "state"]
