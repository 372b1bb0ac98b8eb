"""`uv run python scripts/compose_gpus.py [--gpus N | --device-ids 0,2,3] [--class CARD=CLASS]`:
the Compose override that says which cards of this host the GPU container serves, and their
classes (docs/operations.md, "Jobs of several GPUs: one container or pod per host").

docker-compose.yml's `gpu` profile runs one GPU container per host, `worker-gpu`, which sees every
card and starts one worker per card inside (app/worker/host.py): a host needs no override to
serve all its cards. This writes docker-compose.gpus.yml (or --output) for the rest, to start with

    docker compose -f docker-compose.yml -f docker-compose.gpus.yml --profile gpu up --build

It sets two variables of `worker-gpu` (Compose merges an override's `environment` key by key):
FAIRGPU_GPUS, the cards to serve (--device-ids; --gpus N is 0..N-1; neither: the cards that
`nvidia-smi -L` lists), and FAIRGPU_CARD_CLASSES, the class of GPU_CLASSES of each card given
with --class (a card without one is found from its name, or takes FAIRGPU_GPU_CLASS).

It reads docker-compose.yml with PyYAML (a development dependency, which `uv run` installs) and
writes the override as JSON, which is valid YAML.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from app.fleet.catalog import NAME

ROOT = Path(__file__).resolve().parents[1]
BASE_FILE = "docker-compose.yml"
OVERRIDE_FILE = "docker-compose.gpus.yml"
#: The base file's GPU container and the profile that starts it.
SERVICE = "worker-gpu"
PROFILE = "gpu"
LAUNCHER = ["python", "-m", "app.worker.host"]
NVIDIA_SMI_TIMEOUT_S = 30
_LISTED_GPU = re.compile(r"GPU \d+:")


class ComposeError(ValueError):
    """The cards or classes asked for, or the base file, cannot make an override."""


def device_ids(text: str) -> list[int]:
    """`--device-ids 0,2,3`: the host's card indexes."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not card indexes: {text!r} (say 0,2,3)") from None


def card_class(text: str) -> tuple[int, str]:
    """`--class 1=small`: the host's card 1 is of the class `small`."""
    card, equals, name = text.partition("=")
    if not equals or not card.strip().isdigit() or not NAME.match(name):
        raise argparse.ArgumentTypeError(
            f"not CARD=CLASS: {text!r} (say 1=small; a class is named as in GPU_CLASSES)"
        )
    return int(card), name


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="compose_gpus.py",
        description="Write the Compose override that names the cards the GPU container serves.",
    )
    parser.add_argument(
        "--gpus", type=int, help="the host's number of cards (default: count them with nvidia-smi)"
    )
    parser.add_argument(
        "--device-ids",
        type=device_ids,
        help="the host's card indexes to serve, comma-separated (default: 0..N-1)",
    )
    parser.add_argument(
        "--class",
        dest="classes",
        type=card_class,
        action="append",
        default=[],
        metavar="CARD=CLASS",
        help="the class of GPU_CLASSES of one card, repeatable; a card without one is found "
        "from its name, or takes FAIRGPU_GPU_CLASS",
    )
    parser.add_argument("--base", type=Path, default=ROOT / BASE_FILE, help="the base compose file")
    parser.add_argument(
        "--output",
        type=Path,
        default=ROOT / OVERRIDE_FILE,
        help=f"where to write the override (default: {OVERRIDE_FILE} beside the base file)",
    )
    return parser.parse_args(argv)


def count_gpus(listing: str) -> int:
    """The cards in the output of `nvidia-smi -L` (`GPU 0: ...` lines; MIG lines not counted)."""
    return sum(1 for line in listing.splitlines() if _LISTED_GPU.match(line))


def host_gpus() -> int:
    """The cards `nvidia-smi -L` lists on this host."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "-L"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise ComposeError(
            "nvidia-smi not found, so the cards cannot be counted: install the NVIDIA driver, "
            "or say how many cards the host has with --gpus N"
        ) from None
    except subprocess.TimeoutExpired:
        raise ComposeError(
            f"nvidia-smi -L did not answer within {NVIDIA_SMI_TIMEOUT_S} s; pass --gpus N"
        ) from None
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip() or "no message"
        raise ComposeError(
            f"nvidia-smi -L failed (exit {done.returncode}): {reason}; pass --gpus N"
        )
    gpus = count_gpus(done.stdout)
    if gpus == 0:
        raise ComposeError("nvidia-smi -L lists no GPU; pass --gpus N")
    return gpus


def choose_cards(gpus: int | None, ids: Sequence[int] | None) -> list[int]:
    """The host's card indexes to serve: 0 .. gpus-1, or the explicit `ids` (sorted)."""
    if ids is None:
        if gpus is None or gpus < 1:
            raise ComposeError(f"a GPU host has at least one card, not {gpus}")
        return list(range(gpus))
    cards = sorted(ids)
    if not cards or len(set(cards)) != len(cards) or cards[0] < 0:
        raise ComposeError(f"name each card once, by its index on the host: {list(ids)}")
    if gpus is not None and gpus != len(cards):
        raise ComposeError(f"{gpus} GPUs but {len(cards)} device ids: {list(ids)}")
    return cards


def choose_classes(cards: Sequence[int], classes: Sequence[tuple[int, str]]) -> dict[int, str]:
    """Each card's class given with --class, checked against the served cards."""
    given: dict[int, str] = {}
    for card, name in classes:
        if card not in cards:
            served = ", ".join(map(str, cards))
            raise ComposeError(f"--class {card}={name}: no card {card} ({served})")
        if given.setdefault(card, name) != name:
            raise ComposeError(f"card {card} is given two classes")
    return dict(sorted(given.items()))


def load_base(path: Path) -> dict[str, Any]:
    """The base compose file, its anchors and `<<:` merge keys resolved."""
    try:
        import yaml  # a development dependency: imported only where it is needed
    except ImportError:
        raise ComposeError(
            "PyYAML is missing: run this with `uv run` (it is a development dependency)"
        ) from None
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ComposeError(f"cannot read {path}: {error}") from None
    if not isinstance(document, dict):
        raise ComposeError(f"{path} is not a compose file")
    return document


def check_base(base: Mapping[str, Any]) -> None:
    """The base file's `worker-gpu`: in the gpu profile, running the launcher, and reserving every
    card (so that the container numbers the cards as the host does, as FAIRGPU_GPUS does)."""
    service = (base.get("services") or {}).get(SERVICE)
    if not isinstance(service, Mapping):
        raise ComposeError(f"{BASE_FILE} defines no service {SERVICE}")
    try:
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        environment = service["environment"]
    except (KeyError, TypeError, ValueError):
        raise ComposeError(f"{BASE_FILE}'s {SERVICE} reserves other than one device") from None
    if (
        PROFILE not in service.get("profiles", [])
        or service.get("command") != LAUNCHER
        or device.get("count") != "all"
        or "device_ids" in device
        or not {"FAIRGPU_GPUS", "FAIRGPU_CARD_CLASSES"} <= set(environment)
    ):
        raise ComposeError(
            f"{BASE_FILE}'s {SERVICE} is not the host's GPU container of profile {PROFILE} "
            f"(`{' '.join(LAUNCHER)}` on every card: count all)"
        )


def override(cards: Sequence[int], classes: Mapping[int, str]) -> dict[str, Any]:
    """The override document: worker-gpu's FAIRGPU_GPUS and FAIRGPU_CARD_CLASSES."""
    environment = {
        "FAIRGPU_GPUS": ",".join(map(str, cards)),
        "FAIRGPU_CARD_CLASSES": ",".join(f"{card}={name}" for card, name in classes.items()),
    }
    return {"services": {SERVICE: {"environment": environment}}}


def render(document: Mapping[str, Any]) -> str:
    """The override's text: a comment, then the document as JSON (valid YAML, and free of the
    quoting questions that YAML 1.1 and 1.2 answer differently)."""
    environment = document["services"][SERVICE]["environment"]
    cards = environment["FAIRGPU_GPUS"].split(",")
    classes = environment["FAIRGPU_CARD_CLASSES"].replace(",", ", ") or "none given"
    header = (
        f"# Generated by scripts/compose_gpus.py: {SERVICE} runs a worker on each of "
        f"{len(cards)} cards ({', '.join(cards)}).\n"
        f"# Classes by card: {classes}.\n"
        f"# Do not edit: regenerate it after changing the host's cards.\n"
        f"#   docker compose -f {BASE_FILE} -f {OVERRIDE_FILE} --profile {PROFILE} up --build\n"
    )
    return header + json.dumps(document, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        check_base(load_base(args.base))
        gpus = args.gpus
        if gpus is None and args.device_ids is None:
            gpus = host_gpus()
        cards = choose_cards(gpus, args.device_ids)
        document = override(cards, choose_classes(cards, args.classes))
        args.output.write_text(render(document))
    except (ComposeError, OSError) as error:
        print(f"compose_gpus: {error}", file=sys.stderr)
        return 2
    served = ", ".join(map(str, cards))
    print(f"wrote {args.output}: {SERVICE} runs a worker on each of {len(cards)} cards ({served})")
    files = (args.base, args.output)
    if args.output.resolve().parent == args.base.resolve().parent:
        files = (Path(args.base.name), Path(args.output.name))  # run from that folder
    start = f"docker compose -f {files[0]} -f {files[1]} --profile {PROFILE} up --build"
    print(f"start them with: {start}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
