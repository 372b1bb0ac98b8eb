"""The Compose override for a GPU host with N cards: one worker per card (docs/operations.md).

docker-compose.yml's `gpu` profile defines a single GPU worker, `worker-gpu0`, on the host's
card 0, which every GPU host has. For a host with more cards, `gpu_override` returns an override
document that adds `worker-gpu1` ... `worker-gpu{N-1}`, each a copy of `worker-gpu0` in which
only the per-card fields differ (`PER_CARD`). The base file's service is the template, so its
image, command, environment and grace period are written in one place only:

    docker compose -f docker-compose.yml -f docker-compose.gpus.yml --profile gpu up --build

Why the base file holds one GPU worker and the override only adds services: Compose merges an
override into the base file but cannot take a service out of it, and it appends an override's
lists (a service's `profiles`, its device reservations) to the base file's instead of replacing
them. A base file with a worker for card 1 would leave a one-card host with a worker whose card
does not exist, which only the `!override` tag of recent Compose versions or zero replicas could
turn off. Adding services needs neither: the override never names a service of the base file,
and merging it changes nothing that is already there.

Pure functions on plain dicts: no file, no YAML parser (PyYAML is only a development
dependency, and the service imports this package). scripts/compose_gpus.py reads the base file
and writes the override; the override is written as JSON, which Compose reads as the YAML it is.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: The base file's GPU worker, the template of every other one.
TEMPLATE = "worker-gpu0"
#: The profile that starts the GPU workers.
PROFILE = "gpu"
BASE_FILE = "docker-compose.yml"
OVERRIDE_FILE = "docker-compose.gpus.yml"
#: What differs from one card's worker to the next; everything else is the template's.
PER_CARD = (
    "hostname",
    "environment.WORKER_NAME",
    "environment.HOST_GPU_ID",
    "deploy.resources.reservations.devices[0].device_ids",
)

_GPU_WORKER = re.compile(r"worker-gpu\d+")
_LISTED_GPU = re.compile(r"GPU \d+:")


class ComposeError(ValueError):
    """The cards asked for, or the base file's template, cannot make an override."""


def service_name(card: int) -> str:
    """`worker-gpu3` serves the host's card 3; it is also the container's hostname."""
    return f"worker-gpu{card}"


def worker_name(card: int) -> str:
    """The Celery name of card `card`'s worker: `gpu3@worker-gpu3`."""
    return f"gpu{card}@{service_name(card)}"


def is_gpu_worker(name: str) -> bool:
    return _GPU_WORKER.fullmatch(name) is not None


def choose_cards(gpus: int | None = None, device_ids: Sequence[int] | None = None) -> list[int]:
    """The host's card indexes to serve: 0 .. gpus-1, or the explicit `device_ids` (sorted).

    Card 0 is always among them: the base file's `worker-gpu0` serves it.
    """
    if device_ids is None:
        if gpus is None or gpus < 1:
            raise ComposeError(f"a GPU host has at least one card, not {gpus}")
        return list(range(gpus))
    cards = sorted(device_ids)
    if len(set(cards)) != len(cards):
        raise ComposeError(f"a card may be named only once: {list(device_ids)}")
    if not cards or cards[0] != 0:
        raise ComposeError(
            f"the device ids must include card 0, which {BASE_FILE}'s {TEMPLATE} serves: "
            f"{list(device_ids)}"
        )
    if gpus is not None and gpus != len(cards):
        raise ComposeError(f"{gpus} GPUs but {len(cards)} device ids: {list(device_ids)}")
    return cards


def _devices(service: Mapping[str, Any]) -> Any:
    return service["deploy"]["resources"]["reservations"]["devices"]


def _per_card(service: Mapping[str, Any]) -> tuple[Any, ...]:
    """The values of PER_CARD in `service`, in that order."""
    env = service["environment"]
    (device,) = _devices(service)
    return (service["hostname"], env["WORKER_NAME"], env["HOST_GPU_ID"], device["device_ids"])


def _card_values(card: int) -> tuple[Any, ...]:
    return (service_name(card), worker_name(card), str(card), [str(card)])


def gpu_worker(template: Mapping[str, Any], card: int) -> dict[str, Any]:
    """The template with its per-card fields set for the host's card `card`."""
    service = copy.deepcopy(dict(template))
    hostname, name, host_gpu_id, device_ids = _card_values(card)
    service["hostname"] = hostname
    service["environment"]["WORKER_NAME"] = name
    service["environment"]["HOST_GPU_ID"] = host_gpu_id
    (device,) = _devices(service)
    device["device_ids"] = device_ids
    return service


def gpu_template(base: Mapping[str, Any]) -> dict[str, Any]:
    """The base file's `worker-gpu0`, checked to be card 0's worker and the only GPU worker.

    `base` is the parsed base file with its anchors and `<<:` merge keys resolved (as
    `yaml.safe_load` returns it).
    """
    services = base.get("services")
    if not isinstance(services, Mapping) or not isinstance(services.get(TEMPLATE), Mapping):
        raise ComposeError(f"{BASE_FILE} defines no service {TEMPLATE} to copy")
    others = sorted(name for name in services if is_gpu_worker(name) and name != TEMPLATE)
    if others:
        raise ComposeError(
            f"{BASE_FILE} must define only {TEMPLATE}: the override adds the other cards, and "
            f"an override cannot remove {', '.join(others)}"
        )
    service = dict(services[TEMPLATE])
    try:
        found = _per_card(service)
    except (KeyError, TypeError, ValueError) as missing:
        raise ComposeError(
            f"{BASE_FILE}'s {TEMPLATE} lacks a per-card field ({', '.join(PER_CARD)}), "
            f"or reserves other than one device: {missing!r}"
        ) from missing
    if found != _card_values(0) or PROFILE not in service.get("profiles", []):
        raise ComposeError(f"{BASE_FILE}'s {TEMPLATE} is not card 0's worker in profile {PROFILE}")
    return service


def gpu_override(
    base: Mapping[str, Any], gpus: int | None = None, device_ids: Sequence[int] | None = None
) -> dict[str, Any]:
    """The override document that runs one worker per card of `choose_cards(gpus, device_ids)`.

    It adds a service for every card but 0 and names no service of `base`; for one card it
    adds nothing (`{"services": {}}`), and the base file alone is the same stack.
    """
    worker = gpu_template(base)
    cards = choose_cards(gpus, device_ids)
    return {"services": {service_name(c): gpu_worker(worker, c) for c in cards if c != 0}}


def render(override: Mapping[str, Any]) -> str:
    """The override file's text: a comment, then the document as JSON (valid YAML, and free of
    the quoting questions that YAML 1.1 and 1.2 answer differently)."""
    cards = [0, *sorted(int(name.removeprefix("worker-gpu")) for name in override["services"])]
    header = (
        f"# Generated by scripts/compose_gpus.py: one GPU worker per card ({len(cards)} cards: "
        f"{', '.join(map(str, cards))}).\n"
        f"# {TEMPLATE} (card 0) is in {BASE_FILE}; this file adds the others as copies of it.\n"
        f"# Do not edit: regenerate it after changing {TEMPLATE} or the host's cards.\n"
        f"#   docker compose -f {BASE_FILE} -f {OVERRIDE_FILE} --profile {PROFILE} up --build\n"
    )
    return header + json.dumps(override, indent=2) + "\n"


def count_gpus(listing: str) -> int:
    """The cards in the output of `nvidia-smi -L` (`GPU 0: ...` lines; MIG lines not counted)."""
    return sum(1 for line in listing.splitlines() if _LISTED_GPU.match(line))
