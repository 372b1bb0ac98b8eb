"""`uv run python scripts/compose_gpus.py [--gpus N]`: the Compose override for a host with N
GPUs, one worker per card (scripts/compose_override.py, docs/operations.md).

Without --gpus (or --device-ids) it counts the host's cards with `nvidia-smi -L`. It writes
docker-compose.gpus.yml next to docker-compose.yml (or --output), to start with

    docker compose -f docker-compose.yml -f docker-compose.gpus.yml --profile gpu up --build

A mixed fleet (GPU_CLASSES) names each card's class where the card's name does not tell it:
`--class 0=big --class 1=small` sets WORKER_GPU_CLASS card by card (card 0's is merged into the
base file's worker-gpu0: Compose merges an override's `environment` key by key). A card without
--class keeps the base file's `${FAIRGPU_GPU_CLASS:-}`: one class for the host, or found from the
card.

It reads docker-compose.yml with PyYAML (a development dependency, which `uv run` installs) and
writes the override as JSON, which is valid YAML.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from app.fleet.catalog import NAME
from scripts import compose_override as deploy_compose

ROOT = Path(__file__).resolve().parents[1]
NVIDIA_SMI_TIMEOUT_S = 30


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
        description="Write the Compose override that runs one GPU worker per card.",
    )
    parser.add_argument(
        "--gpus", type=int, help="the host's number of cards (default: count them with nvidia-smi)"
    )
    parser.add_argument(
        "--device-ids",
        type=device_ids,
        help="the host's card indexes to serve, comma-separated; must include 0 (default: 0..N-1)",
    )
    parser.add_argument(
        "--class",
        dest="classes",
        type=card_class,
        action="append",
        default=[],
        metavar="CARD=CLASS",
        help="the class of GPU_CLASSES of one card (WORKER_GPU_CLASS), repeatable; a card "
        "without one is found from its name, or takes FAIRGPU_GPU_CLASS",
    )
    parser.add_argument(
        "--base", type=Path, default=ROOT / deploy_compose.BASE_FILE, help="the base compose file"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=ROOT / deploy_compose.OVERRIDE_FILE,
        help=f"where to write the override (default: {deploy_compose.OVERRIDE_FILE} beside the "
        "base file)",
    )
    return parser.parse_args(argv)


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
        raise deploy_compose.ComposeError(
            "nvidia-smi not found, so the cards cannot be counted: install the NVIDIA driver, "
            "or say how many cards the host has with --gpus N"
        ) from None
    except subprocess.TimeoutExpired:
        raise deploy_compose.ComposeError(
            f"nvidia-smi -L did not answer within {NVIDIA_SMI_TIMEOUT_S} s; pass --gpus N"
        ) from None
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip() or "no message"
        raise deploy_compose.ComposeError(
            f"nvidia-smi -L failed (exit {done.returncode}): {reason}; pass --gpus N"
        )
    gpus = deploy_compose.count_gpus(done.stdout)
    if gpus == 0:
        raise deploy_compose.ComposeError("nvidia-smi -L lists no GPU; pass --gpus N")
    return gpus


def load_base(path: Path) -> dict[str, Any]:
    """The base compose file, its anchors and `<<:` merge keys resolved."""
    try:
        import yaml  # a development dependency: imported only where it is needed
    except ImportError:
        raise deploy_compose.ComposeError(
            "PyYAML is missing: run this with `uv run` (it is a development dependency)"
        ) from None
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise deploy_compose.ComposeError(f"cannot read {path}: {error}") from None
    if not isinstance(document, dict):
        raise deploy_compose.ComposeError(f"{path} is not a compose file")
    return document


def with_classes(override: dict[str, Any], classes: list[tuple[int, str]]) -> dict[str, Any]:
    """The override with WORKER_GPU_CLASS set card by card: in each added worker, and for card 0
    an `environment` entry that Compose merges into the base file's worker-gpu0."""
    added = override["services"]
    cards = [0, *(int(name.removeprefix("worker-gpu")) for name in added)]
    given: dict[int, str] = {}
    for card, name in classes:
        if card not in cards:
            served = ", ".join(map(str, sorted(cards)))
            raise deploy_compose.ComposeError(f"--class {card}={name}: no card {card} ({served})")
        if given.setdefault(card, name) != name:
            raise deploy_compose.ComposeError(f"card {card} is given two classes")
    services: dict[str, Any] = {}
    if 0 in given:
        services[deploy_compose.TEMPLATE] = {"environment": {"WORKER_GPU_CLASS": given[0]}}
    for service, worker in added.items():
        card = int(service.removeprefix("worker-gpu"))
        if card in given:
            worker["environment"]["WORKER_GPU_CLASS"] = given[card]
        services[service] = worker
    return {"services": services}


def render(override: dict[str, Any], classes: list[tuple[int, str]]) -> str:
    """The override's text: compose_override's for the added cards, with their classes."""
    if not classes:
        return deploy_compose.render(override)
    body = json.dumps(override, indent=2) + "\n"
    added = {n: s for n, s in override["services"].items() if n != deploy_compose.TEMPLATE}
    header = deploy_compose.render({"services": added}).removesuffix(
        json.dumps({"services": added}, indent=2) + "\n"
    )
    named = ", ".join(f"{card}={name}" for card, name in sorted(dict(classes).items()))
    return f"{header}# Classes (WORKER_GPU_CLASS) by card: {named}.\n{body}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        gpus = args.gpus
        if gpus is None and args.device_ids is None:
            gpus = host_gpus()
        override = deploy_compose.gpu_override(load_base(args.base), gpus, args.device_ids)
        override = with_classes(override, args.classes)
        args.output.write_text(render(override, args.classes))
    except (deploy_compose.ComposeError, OSError) as error:
        print(f"compose_gpus: {error}", file=sys.stderr)
        return 2
    workers = [deploy_compose.TEMPLATE]
    workers += [name for name in override["services"] if name != deploy_compose.TEMPLATE]
    print(f"wrote {args.output}: {len(workers)} GPU workers ({', '.join(workers)})")
    files = (args.base, args.output)
    if args.output.resolve().parent == args.base.resolve().parent:
        files = (Path(args.base.name), Path(args.output.name))  # run from that folder
    print(
        f"start them with: docker compose -f {files[0]} -f {files[1]} "
        f"--profile {deploy_compose.PROFILE} up --build"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
