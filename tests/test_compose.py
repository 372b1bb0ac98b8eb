"""The deployment files, checked by reading them: docker-compose.yml and the Dockerfile.

Nothing here runs Docker. The compose file is parsed with PyYAML (anchors and `<<:` merge keys
resolve as Compose resolves them); the Dockerfile is split into its instructions. Where the
meaning of a value depends on our own code (which device a worker picks), the test asks that
code rather than restating it. A GPU host runs one GPU container that sees every card, in which
app/worker/host.py starts one worker per card: its workers' environments are the launcher's own
answer for the file's container, alone and merged with the override that scripts/compose_gpus.py
writes, for several N.
"""

from __future__ import annotations

import copy
import errno
import fnmatch
import importlib.util
import json
import re
import shlex
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from pydantic import SecretStr

from app.models import RECLAIM_QUEUE
from app.settings import Settings
from app.webhooks.signing import signer
from app.worker import gpu
from app.worker.host import worker_envs
from scripts import compose_gpus

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_FILE = ROOT / "deploy" / "prometheus.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SECCOMP_FILE = ROOT / "deploy" / "seccomp" / "script-sandbox.json"

PROFILES = {
    "cpu": {"redis", "postgres", "api", "worker-cpu", "beat", "webhooks"},
    "gpu": {"redis", "postgres", "api", "worker-gpu", "beat", "webhooks"},
    "monitoring": {"redis", "flower", "prometheus"},
    "ha": {"redis", "redis-replica-1", "redis-replica-2", "sentinel-1", "sentinel-2", "sentinel-3"},
}
SENTINELS = ("sentinel-1", "sentinel-2", "sentinel-3")
#: The host's one GPU container, whose launcher runs a worker per card.
GPU_SERVICE = compose_gpus.SERVICE
GPU_WORKERS = (GPU_SERVICE,)
#: The host sizes whose merged base file and override are checked.
HOST_GPUS = (1, 2, 4, 8)
APP_SERVICES = ("api", "worker-cpu", *GPU_WORKERS, "beat", "webhooks", "flower")
#: The services that open the SQL database of accounts and bills.
DATABASE_SERVICES = ("api", "worker-cpu", *GPU_WORKERS)

# Paths inside the containers, which the files may name.
IMAGE_PATHS = (
    "/app",
    "/tmp",
    "/data",
    "/home/fairgpu",
    "/home",
    "/etc/prometheus",
    "/prometheus",
    "/opt/script-base",
    "/var/cache/fairgpu/envs",
)

# A host name of the public internet: what a package index or an image registry would show as.
# (A pattern, so that this file names no registry either.)
PUBLIC_HOST = re.compile(r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:org|io|com|net|dev|sh|aws|ai|cloud)\b")
INDEX_SETTINGS = ("index-url", "index_url", "UV_INDEX", "PIP_INDEX", "--find-links", "trusted-host")


# --- helpers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def profile_services(services: dict[str, dict[str, Any]], profile: str) -> set[str]:
    return {name for name, svc in services.items() if profile in svc.get("profiles", [])}


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):  # the `- KEY=value` form
        env = dict(item.split("=", 1) for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def command(service: dict[str, Any]) -> list[str]:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else [str(arg) for arg in cmd]


def reserved_devices(service: dict[str, Any]) -> list[dict[str, Any]]:
    return service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])


def parse_volume(spec: str) -> tuple[str, str, str]:
    """(source, target, mode) of a short-syntax volume; the source may hold `${VAR:-default}`."""
    match = re.fullmatch(r"(.+):(/[^:]*)(?::([a-z,]+))?", spec)
    assert match, spec
    return match.group(1), match.group(2), match.group(3) or "rw"


def build_extras(service: dict[str, Any]) -> list[str]:
    args = service.get("build", {}).get("args", {}) or {}
    return str(args.get("EXTRAS", "") or "").split()


def dockerfile_instructions() -> list[tuple[int, str, str]]:
    """(stage index, INSTRUCTION, arguments) for each instruction, continuations joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result: list[tuple[int, str, str]] = []
    stage = -1
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        result.append((stage, keyword, " ".join(args.split())))
    return result


def stage_of(instructions: list[tuple[int, str, str]], name: str) -> int:
    for stage, keyword, args in instructions:
        if keyword == "FROM" and args.lower().endswith(f" as {name}"):
            return stage
    raise AssertionError(f"no stage {name!r} in the Dockerfile")


def compose_merge(base: Any, override: Any, path: tuple[str, ...] = ()) -> Any:
    """`override` merged into `base` by Compose's rules: mappings merge key by key, sequences
    are appended to (but `command`, `entrypoint` and `healthcheck.test` are replaced), and any
    other value is replaced. (Compose also merges `ports` and `volumes` entries by their target,
    which no override here needs: it sets two variables of the GPU container.)"""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = compose_merge(base[key], value, (*path, key)) if key in base else value
        return copy.deepcopy(merged)
    replaced = path[-1:] in (("command",), ("entrypoint",)) or path[-2:] == ("healthcheck", "test")
    if isinstance(base, list) and isinstance(override, list) and not replaced:
        return [*base, *override]
    return copy.deepcopy(override)


def nvidia_smi_listing(cards: int) -> str:
    """What `nvidia-smi -L` says in a container that sees `cards` cards."""
    return "".join(f"GPU {n}: NVIDIA H100 (UUID: GPU-{n:08d})\n" for n in range(cards))


def gpu_workers(
    service: dict[str, Any], host_env: dict[str, str] | None = None, host_cards: int = 8
) -> dict[int, dict[str, str]]:
    """The workers the launcher starts in the GPU container, by card: their environments, as the
    container gets them from the file (read with `host_env`) on a host of `host_cards` cards."""
    env = {k: interpolated(v, host_env or {}) for k, v in environment(service).items()}
    return worker_envs(env, lambda: nvidia_smi_listing(host_cards))


def write_override(tmp_path: Path, *args: str) -> dict[str, Any]:
    """The override that scripts/compose_gpus.py writes with these arguments, read as YAML."""
    output = tmp_path / compose_gpus.OVERRIDE_FILE
    assert run_cli(*args, "--output", str(output)) == 0
    return yaml.safe_load(output.read_text())


@pytest.fixture(scope="module", params=(None, *HOST_GPUS), ids=lambda n: f"{n or 'all'}-gpus")
def gpu_host(request, compose, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """The services of a host: the base file alone (every card), or merged with the override
    that the generator writes for `request.param` GPUs, read back as Compose would read it."""
    if request.param is None:
        return compose["services"]
    override = write_override(tmp_path_factory.mktemp("override"), "--gpus", str(request.param))
    return compose_merge(compose, override)["services"]


# --- profiles --------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_each_profile_starts_exactly_its_services(services, profile):
    assert profile_services(services, profile) == PROFILES[profile]


def test_no_service_starts_without_a_profile(services):
    assert all(svc.get("profiles") for svc in services.values())


#: A command in the docs: an inline code span (which may wrap over lines) or a code block's line.
DOC_CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`]+)`", re.S)


def compose_commands_in_docs() -> list[tuple[str, str]]:
    """Every `docker compose` command in README.md and docs/*.md: (file, command)."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block, span in DOC_CODE.findall(doc.read_text()):
            lines = block.splitlines() if block else [" ".join(span.split())]
            for line in lines:
                at = line.find("docker compose")
                if at >= 0:
                    found.append((doc.name, line[at:].split("#")[0].strip()))
    return found


def test_every_compose_command_in_the_docs_names_a_profile(services):
    # every service is in a profile (above): a command without one acts on none of them
    commands = compose_commands_in_docs()
    assert len(commands) > 10
    profiles = {p for svc in services.values() for p in svc["profiles"]}
    for doc, command in commands:
        named = re.findall(r"--profile (\S+)", command)
        assert named, f"{doc}: {command}"
        assert set(named) <= profiles | {"..."}, f"{doc}: {command}"


def test_every_dependency_is_enabled_by_the_profiles_of_its_dependant(services):
    for name, svc in services.items():
        for dependency in svc.get("depends_on", {}):
            missing = set(svc["profiles"]) - set(services[dependency]["profiles"])
            assert not missing, f"{name} needs {dependency} in profiles {missing}"


def test_every_service_restarts_unless_stopped(services):
    assert {name: svc.get("restart") for name, svc in services.items()} == dict.fromkeys(
        services, "unless-stopped"
    )


# --- redis -----------------------------------------------------------------------------------


def test_redis_publishes_no_port(services):
    assert "ports" not in services["redis"]
    assert "network_mode" not in services["redis"]


def test_redis_keeps_an_append_only_file_flushed_every_second_on_a_named_volume(compose, services):
    redis_svc = services["redis"]
    args = command(redis_svc)
    assert args[0] == "redis-server"
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--appendfsync") + 1] == "everysec"
    volume, target, _ = parse_volume(redis_svc["volumes"][0])
    assert target == "/data"
    assert volume in compose["volumes"]
    assert redis_svc["image"].split(":")[0] == "redis"
    assert redis_svc["image"].split(":")[1].split(".")[0] == "7"


def test_redis_is_healthy_when_it_answers_ping(services):
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_every_app_service_waits_for_a_healthy_redis(services):
    for name in APP_SERVICES:
        assert services[name]["depends_on"]["redis"] == {"condition": "service_healthy"}, name


# --- ha: replicas and Sentinels --------------------------------------------------------------


def test_each_replica_replicates_the_primary_with_its_own_append_only_file(services):
    for name in ("redis-replica-1", "redis-replica-2"):
        args = command(services[name])
        assert args[args.index("--replicaof") + 1 : args.index("--replicaof") + 3] == [
            "redis",
            "6379",
        ]
        assert args[args.index("--appendonly") + 1] == "yes"
        assert args[args.index("--replica-announce-ip") + 1] == name
        assert "ports" not in services[name]


def test_three_sentinels_watch_the_primary_and_two_must_agree(services):
    for name in SENTINELS:
        sentinel = services[name]
        assert sentinel["hostname"] == name and "ports" not in sentinel
        script = " ".join(command(sentinel))
        assert "'sentinel monitor fairgpu redis 6379 2'" in script  # quorum 2 of the 3
        assert script.rstrip().endswith("exec redis-server /tmp/sentinel.conf --sentinel")
        assert "'port 26379'" in script


def test_the_app_services_find_the_sentinels_the_header_names(compose, services):
    header = COMPOSE_FILE.read_text().split("services:", 1)[0]
    named = re.search(r"FAIRGPU_SENTINELS=(\S+)", header)
    assert named is not None
    assert named.group(1).split(",") == [f"{name}:26379" for name in SENTINELS]
    for name in APP_SERVICES:
        assert environment(services[name])["REDIS_SENTINELS"] == "${FAIRGPU_SENTINELS:-}", name


# --- postgres --------------------------------------------------------------------------------


def test_the_services_that_open_the_database_wait_for_a_healthy_postgres(services):
    for name in APP_SERVICES:
        waits = services[name]["depends_on"].get("postgres")
        expected = {"condition": "service_healthy"} if name in DATABASE_SERVICES else None
        assert waits == expected, name
    assert services["postgres"]["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]


def test_the_database_services_point_database_url_at_postgres(services):
    for name in DATABASE_SERVICES:
        url = urlparse(environment(services[name])["DATABASE_URL"])
        assert (url.scheme, url.hostname, url.port, url.path) == (
            "postgresql+psycopg",
            "postgres",
            5432,
            "/fairgpu",
        ), name
        assert url.password == "${POSTGRES_PASSWORD:-fairgpu}", "the password is the environment's"


def test_postgres_publishes_no_port_and_keeps_its_data_on_a_named_volume(compose, services):
    postgres = services["postgres"]
    assert "ports" not in postgres
    volume, target, _ = parse_volume(postgres["volumes"][0])
    assert (volume in compose["volumes"], target) == (True, "/var/lib/postgresql/data")
    assert environment(postgres)["POSTGRES_PASSWORD"] == "${POSTGRES_PASSWORD:-fairgpu}"


def test_every_service_points_redis_url_at_the_redis_service(services):
    for name in APP_SERVICES:
        url = urlparse(environment(services[name])["REDIS_URL"])
        assert (url.scheme, url.hostname, url.port) == ("redis", "redis", 6379), name


# --- api -------------------------------------------------------------------------------------


def test_api_listens_on_all_interfaces_and_publishes_port_8000(services):
    api = services["api"]
    env = environment(api)
    assert (env["HOST"], env["PORT"]) == ("0.0.0.0", "8000")
    assert api["ports"] == ["8000:8000"]
    assert command(api) == ["python", "main.py"]


def test_api_is_healthy_when_its_health_endpoint_answers(services):
    test = services["api"]["healthcheck"]["test"]
    assert test[0] == "CMD"
    assert any("http://127.0.0.1:8000/health" in part for part in test)


# --- workers ---------------------------------------------------------------------------------


def test_the_gpu_profile_runs_one_gpu_container_that_sees_every_card(services):
    gpu_services = [n for n in profile_services(services, "gpu") if reserved_devices(services[n])]
    assert gpu_services == [GPU_SERVICE]
    svc = services[GPU_SERVICE]
    # every card, so that a job of several cards sees them all in one process
    assert reserved_devices(svc) == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert command(svc) == compose_gpus.LAUNCHER
    # one container per host: a second would number the same host's cards 0.. again
    assert "scale" not in svc and "replicas" not in svc.get("deploy", {})
    assert "container_name" not in svc


def test_the_container_lets_the_launcher_pick_each_workers_card(services):
    env = environment(services[GPU_SERVICE])
    # CUDA_VISIBLE_DEVICES is the launcher's to set, worker by worker; HOST_GPU_ID is for a
    # container of one card, which numbers it 0 (the launcher drops it)
    assert not {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HOST_GPU_ID"} & set(env)
    assert env["FAIRGPU_GPUS"] == "${FAIRGPU_GPUS:-}"


@pytest.mark.parametrize("cards", [1, 2, 8])
def test_the_launcher_starts_a_worker_on_every_card_of_the_host(services, cards):
    workers = gpu_workers(services[GPU_SERVICE], host_cards=cards)
    assert sorted(workers) == list(range(cards))
    for card, env in workers.items():
        assert env["CUDA_VISIBLE_DEVICES"] == str(card)
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # CUDA numbers them as nvidia-smi does
        # the worker's own choice: that one card, reported by the host's number
        assert gpu.choose_device(env, lambda: 1) == gpu.Device(gpu_id=card)


def test_fairgpu_gpus_on_the_host_picks_the_cards_without_an_override(services):
    workers = gpu_workers(services[GPU_SERVICE], {"FAIRGPU_GPUS": "0,2"}, host_cards=4)
    assert sorted(workers) == [0, 2]


def test_a_host_with_the_override_runs_a_worker_on_each_of_its_cards(gpu_host, request):
    n = request.node.callspec.params["gpu_host"]
    workers = gpu_workers(gpu_host[GPU_SERVICE], host_cards=8)
    assert sorted(workers) == list(range(n or 8))
    # and the rest of the profile as the base file has it
    assert profile_services(gpu_host, "gpu") == PROFILES["gpu"]


def test_each_worker_of_a_host_has_a_name_of_its_own_in_the_fleet(services):
    svc = services[GPU_SERVICE]
    names = {
        host: [env["WORKER_NAME"] for env in gpu_workers(svc, {"FAIRGPU_HOST": host}).values()]
        for host in ("node-1", "node-2")
    }
    assert names["node-1"][:2] == ["gpu0@node-1", "gpu1@node-1"]
    everywhere = names["node-1"] + names["node-2"]
    assert len(set(everywhere)) == len(everywhere)


def test_gpu_workers_get_torch_and_the_cpu_services_do_not(services, gpu_host):
    assert "torch" in build_extras(gpu_host[GPU_SERVICE])
    for name in set(APP_SERVICES) - set(GPU_WORKERS):
        assert "torch" not in build_extras(services[name]), name


def test_services_that_need_no_gpu_hide_every_gpu(services):
    for name in ("worker-cpu", "beat", "webhooks", "flower"):
        env = environment(services[name])
        assert gpu.choose_device(env, lambda: 2) == gpu.CPU, name
        assert not reserved_devices(services[name]), name


def test_workers_take_jobs_from_both_queues_one_at_a_time(gpu_host):
    assert command(gpu_host["worker-cpu"]) == ["python", "worker.py"]
    assert environment(gpu_host["worker-cpu"])["WORKER_QUEUES"] == "short,long"
    for env in gpu_workers(gpu_host[GPU_SERVICE]).values():
        assert env["WORKER_QUEUES"] == "short,long"


def test_no_two_workers_share_a_celery_name(gpu_host):
    beat = command(gpu_host["beat"])
    names = [env["WORKER_NAME"] for env in gpu_workers(gpu_host[GPU_SERVICE]).values()]
    names.append(beat[beat.index("-n") + 1].replace("%h", gpu_host["beat"]["hostname"]))
    assert len(names) == len(set(names))


def test_cpu_workers_can_be_scaled_without_sharing_a_name(services):
    # Without a fixed hostname or WORKER_NAME each replica is named cpu@<its container id>.
    worker = services["worker-cpu"]
    assert "hostname" not in worker
    assert "container_name" not in worker
    assert "WORKER_NAME" not in environment(worker)


# --- a mixed fleet: the host and the class of each worker --------------------------------------

FIXTURES_USERS = ROOT / "fixtures" / "users.json"
MIXED_CATALOG = '{"big": {"memory_gb": 80, "price": 2.0}, "small": {"memory_gb": 24, "price": 1}}'


def interpolated(value: str, host_env: dict[str, str]) -> str:
    """A value as Compose reads it: each ${NAME:-default} from the host's environment."""

    def one(match: re.Match[str]) -> str:
        return host_env.get(match.group(1)) or match.group(2)

    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*):-([^}]*)\}", one, value)


def worker_settings(service: dict[str, Any], host_env: dict[str, str]) -> Settings:
    env = {k: interpolated(v, host_env) for k, v in environment(service).items()}
    return Settings(
        users_file=FIXTURES_USERS,
        gpu_classes=env["GPU_CLASSES"] or None,
        worker_host=env["WORKER_HOST"] or None,
        worker_gpu_class=env.get("WORKER_GPU_CLASS") or None,
    )


def card_settings(env: dict[str, str]) -> Settings:
    """The settings a worker of the GPU container reads from its environment."""
    return Settings(
        users_file=FIXTURES_USERS,
        gpu_classes=env["GPU_CLASSES"] or None,
        worker_host=env["WORKER_HOST"] or None,
        worker_gpu_class=env.get("WORKER_GPU_CLASS") or None,
    )


def test_every_worker_of_a_host_is_on_that_one_host_that_fairgpu_host_names(gpu_host):
    from app.fleet.worker_class import worker_host

    for host_env, expected in (({"FAIRGPU_HOST": "node-7"}, "node-7"), ({}, "compose-host")):
        hosts = {worker_host(worker_settings(gpu_host["worker-cpu"], host_env))}
        for env in gpu_workers(gpu_host[GPU_SERVICE], host_env).values():
            hosts.add(worker_host(card_settings(env)))
        # one host for all the cards: never a container's own hostname
        assert hosts == {expected}, host_env


def test_every_app_service_reads_the_one_catalog_from_the_environment(services):
    for name in APP_SERVICES:
        assert environment(services[name])["GPU_CLASSES"] == "${GPU_CLASSES:-}", name


def test_a_gpu_workers_class_is_found_from_its_card_unless_the_host_names_one(gpu_host):
    from app.fleet.catalog import Catalog
    from app.fleet.worker_class import worker_class

    catalog = Catalog.from_json(MIXED_CATALOG)
    small_card = ("NVIDIA L4", 24_000_000_000)
    svc = gpu_host[GPU_SERVICE]
    for env in gpu_workers(svc, {"GPU_CLASSES": MIXED_CATALOG}).values():
        found = card_settings(env)
        assert worker_class(catalog, *small_card, found.worker_gpu_class).name == "small"
    host_env = {"GPU_CLASSES": MIXED_CATALOG, "FAIRGPU_GPU_CLASS": "big"}
    for env in gpu_workers(svc, host_env).values():
        named = card_settings(env)
        assert worker_class(catalog, *small_card, named.worker_gpu_class).name == "big"


def test_the_command_sets_each_cards_class_and_leaves_the_others_to_the_host(compose, tmp_path):
    output = tmp_path / "out.yml"
    assert (
        run_cli("--gpus", "3", "--class", "0=big", "--class", "2=small", "--output", str(output))
        == 0
    )
    text = output.read_text()
    assert "runs a worker on each of 3 cards (0, 1, 2)" in text
    assert "# Classes by card: 0=big, 2=small." in text
    merged = compose_merge(compose, yaml.safe_load(text))["services"]
    host_env = {"FAIRGPU_GPU_CLASS": "mid"}
    workers = gpu_workers(merged[GPU_SERVICE], host_env)
    assert [env["WORKER_GPU_CLASS"] for env in workers.values()] == ["big", "mid", "small"]
    # and the cards are the same workers as without classes
    plain = compose_merge(compose, write_override(tmp_path, "--gpus", "3"))["services"]
    for card, env in gpu_workers(plain[GPU_SERVICE], host_env).items():
        assert {**workers[card], "WORKER_GPU_CLASS": "mid"} == env


@pytest.mark.parametrize(
    ("classes", "said"),
    [
        (["3=big"], "--class 3=big: no card 3 (0, 1)"),
        (["1=big", "1=small"], "card 1 is given two classes"),
    ],
)
def test_a_class_for_a_card_the_host_lacks_is_refused(tmp_path, capsys, classes, said):
    args = [arg for c in classes for arg in ("--class", c)]
    assert run_cli("--gpus", "2", *args, "--output", str(tmp_path / "out.yml")) == 2
    assert capsys.readouterr().err.strip() == f"compose_gpus: {said}"
    assert not (tmp_path / "out.yml").exists()


@pytest.mark.parametrize("value", ["big", "x=big", "1=", "1=Big!", "1.5=big"])
def test_a_malformed_class_is_a_usage_error(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as refused:
        run_cli("--gpus", "2", "--class", value, "--output", str(tmp_path / "out.yml"))
    assert refused.value.code == 2
    assert "not CARD=CLASS" in capsys.readouterr().err


def test_beat_runs_the_reclaims_in_one_process_that_takes_nothing_else(services):
    args = command(services["beat"])
    assert args[:4] == ["celery", "-A", "worker", "worker"]
    assert "-B" in args
    assert args[args.index("-Q") + 1] == RECLAIM_QUEUE
    assert args[args.index("-c") + 1] == "1"
    assert args[args.index("--pool") + 1] == "solo"
    assert args[args.index("-n") + 1].startswith("beat@")
    # The schedule file must be writable by the image's non-root user.
    assert args[args.index("--schedule") + 1].startswith("/tmp/")


def test_accounts_are_mounted_read_only_where_users_file_points(services):
    for name in APP_SERVICES:
        svc = services[name]
        users_file = environment(svc)["USERS_FILE"]
        mounts = [parse_volume(v) for v in svc["volumes"]]
        matching = [m for m in mounts if users_file.startswith(m[1].rstrip("/") + "/")]
        assert len(matching) == 1, name
        source, _, mode = matching[0]
        assert mode == "ro", name
        default_source = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", source)
        assert (ROOT / default_source / Path(users_file).name).is_file(), name


# --- script jobs: the sandbox, the environment cache and the base ----------------------------

#: What bubblewrap calls to make its sandbox: the workers' profile must refuse none of it.
BWRAP_SYSCALLS = (
    "unshare",
    "clone",
    "clone3",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "sethostname",
    "prctl",
    "capset",
)
#: Kernel surfaces that no worker and no script needs, which the profile refuses.
REFUSED_SYSCALLS = (
    "init_module",
    "finit_module",
    "kexec_load",
    "bpf",
    "keyctl",
    "userfaultfd",
    "open_by_handle_at",
    "io_uring_setup",
    "fsconfig",
    "perf_event_open",
)
#: The image's folder of the scripts' base environment (the Dockerfile's SCRIPT_BASE).
SCRIPT_BASE_DIR = "/opt/script-base"


def script_workers(services: dict[str, dict[str, Any]]) -> list[str]:
    """Every worker service of the file: each may be handed a script job."""
    return ["worker-cpu", GPU_SERVICE]


def security_options(service: dict[str, Any]) -> dict[str, str]:
    """`security_opt`, as {option: value} (Compose takes `name=value` and `name:value`)."""
    options = {}
    for item in service.get("security_opt", []):
        name, _, value = re.split(r"([=:])", item, maxsplit=1)
        options[name] = value
    return options


def runtime_env() -> dict[str, str]:
    """The ENV of the Dockerfile's final stage: what every container starts with."""
    instructions = dockerfile_instructions()
    final = instructions[-1][0]
    env: dict[str, str] = {}
    for stage, keyword, args in instructions:
        if stage == final and keyword == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(args))
    return env


@pytest.fixture(scope="module")
def seccomp() -> dict[str, Any]:
    return json.loads(SECCOMP_FILE.read_text())


def refused_calls(profile: dict[str, Any]) -> set[str]:
    return {
        n
        for rule in profile["syscalls"]
        if rule["action"] != "SCMP_ACT_ALLOW"
        for n in rule["names"]
    }


def test_every_worker_gets_the_least_that_bubblewrap_needs(gpu_host):
    for name in script_workers(gpu_host):
        svc = gpu_host[name]
        assert security_options(svc) == {
            "no-new-privileges": "true",
            "seccomp": "./deploy/seccomp/script-sandbox.json",
            "apparmor": "unconfined",
            "systempaths": "unconfined",
        }, name
        assert svc["cap_drop"] == ["ALL"], name
        assert "cap_add" not in svc and not svc.get("privileged", False), name
        assert (ROOT / security_options(svc)["seccomp"]).is_file(), name


def test_every_worker_gets_the_tun_device_its_filtered_network_needs(gpu_host):
    # pasta makes the filtered network of builds and networked scripts with /dev/net/tun.
    for name in script_workers(gpu_host):
        assert gpu_host[name]["devices"] == ["/dev/net/tun"], name


def test_services_that_run_no_script_keep_dockers_defaults(services):
    for name, svc in services.items():
        assert not svc.get("privileged", False), name
        assert "cap_add" not in svc, name
        if name not in script_workers(services):
            assert "security_opt" not in svc, name


def test_the_seccomp_profile_allows_what_bubblewrap_does_and_refuses_the_rest(seccomp):
    assert seccomp["defaultAction"] == "SCMP_ACT_ALLOW"
    refused = refused_calls(seccomp)
    assert not set(BWRAP_SYSCALLS) & refused
    assert set(REFUSED_SYSCALLS) <= refused
    for rule in seccomp["syscalls"]:
        # refused outright, whatever the arguments, with an error a program can report
        assert set(rule) == {"names", "action", "errnoRet"}, rule
        assert (rule["action"], rule["errnoRet"]) == ("SCMP_ACT_ERRNO", errno.EPERM)
    # a 32-bit call (int 0x80, x32) is filtered as the 64-bit one is
    arches = {a["architecture"]: set(a["subArchitectures"]) for a in seccomp["archMap"]}
    assert arches["SCMP_ARCH_X86_64"] == {"SCMP_ARCH_X86", "SCMP_ARCH_X32"}


def test_every_worker_keeps_environments_on_the_hosts_shared_volume(compose, gpu_host):
    image_cache = runtime_env()["SCRIPT_ENV_CACHE_DIR"]
    for name in script_workers(gpu_host):
        svc = gpu_host[name]
        env = environment(svc)
        assert env["SCRIPT_ENV_CACHE_DIR"] == image_cache, name
        mounts = [parse_volume(v) for v in svc["volumes"]]
        (cache,) = [(source, mode) for source, target, mode in mounts if target == image_cache]
        # one named volume for every worker of the host: a build is shared, and its lock too
        assert cache == ("script-envs", "rw"), name
        budget = re.fullmatch(r"\$\{SCRIPT_ENV_CACHE_BYTES:-(\d+)\}", env["SCRIPT_ENV_CACHE_BYTES"])
        assert budget and int(budget.group(1)) > 0, name
    assert "script-envs" in compose["volumes"]
    assert {"script_env_cache_dir", "script_env_cache_bytes", "script_base_env"} <= set(
        Settings.model_fields
    )


def test_the_api_and_every_worker_share_one_store_of_artifacts_and_code(compose, gpu_host):
    # A worker runs the code the API stored (POST /code) and leaves files the API serves.
    sharing = ("api", "beat", *script_workers(gpu_host))
    folders = {environment(gpu_host[name])["ARTIFACTS_DIR"] for name in sharing}
    assert len(folders) == 1
    (folder,) = folders
    for name in sharing:
        mounts = [parse_volume(v) for v in gpu_host[name]["volumes"]]
        assert ("artifacts", folder, "rw") in mounts, name
    assert "artifacts" in compose["volumes"]
    instructions = dockerfile_instructions()
    final = instructions[-1][0]
    runs = " ".join(a for s, kw, a in instructions if s == final and kw == "RUN")
    assert re.search(rf"mkdir -p [^&]*{re.escape(folder)}", runs)
    assert re.search(rf"chown fairgpu:fairgpu [^&]*{re.escape(folder)}", runs)


def test_the_image_makes_the_cache_folder_the_service_users():
    cache = runtime_env()["SCRIPT_ENV_CACHE_DIR"]
    instructions = dockerfile_instructions()
    final = instructions[-1][0]
    runs = " ".join(a for s, kw, a in instructions if s == final and kw == "RUN")
    assert re.search(rf"mkdir -p [^&]*{re.escape(cache)}", runs)
    assert re.search(rf"chown fairgpu:fairgpu [^&]*{re.escape(cache)}", runs)


def test_the_cache_and_the_base_lie_where_the_sandbox_may_bind_them():
    from app.scripting.sandbox import FORBIDDEN

    for folder in (Path(runtime_env()["SCRIPT_ENV_CACHE_DIR"]), Path(SCRIPT_BASE_DIR)):
        # never inside the service's own folder, nor where the sandbox refuses to bind
        assert not folder.is_relative_to("/app"), folder
        assert not any(folder.is_relative_to(forbidden) for forbidden in FORBIDDEN), folder


def test_the_runtime_image_has_uv_bubblewrap_setpriv_and_prlimit():
    instructions = dockerfile_instructions()
    final = instructions[-1][0]
    in_runtime = [(kw, args) for stage, kw, args in instructions if stage == final]
    installs = [a for kw, a in in_runtime if kw == "RUN" and "apt-get install" in a]
    assert len(installs) == 1
    packages = installs[0].split("apt-get install", 1)[1].split("&&")[0].split()
    # bubblewrap's bwrap; util-linux's setpriv (the drop from root) and prlimit (the limits)
    assert {"bubblewrap", "util-linux"} <= set(packages)
    assert "rm -rf /var/lib/apt/lists/*" in installs[0]
    assert ("COPY", "--from=builder /usr/local/bin/uv /usr/local/bin/uv") in in_runtime
    # environments are built on the image's interpreter, never one uv would download
    assert runtime_env()["UV_PYTHON_DOWNLOADS"] == "never"


def test_the_gpu_workers_base_is_the_images_with_torch_and_the_cpu_workers_have_none(
    gpu_host, services
):
    instructions = dockerfile_instructions()
    final = instructions[-1][0]
    assert (final, "COPY", f"--from=builder {SCRIPT_BASE_DIR} {SCRIPT_BASE_DIR}") in instructions
    svc = gpu_host[GPU_SERVICE]
    assert environment(svc)["SCRIPT_BASE_ENV"] == SCRIPT_BASE_DIR
    assert "torch" in str(svc["build"]["args"]["SCRIPT_BASE"]).split()
    for name in set(APP_SERVICES) - set(GPU_WORKERS):
        assert "SCRIPT_BASE_ENV" not in environment(services[name]), name
        assert not (services[name].get("build", {}).get("args", {}) or {}).get("SCRIPT_BASE")


FAKE_UV = """#!/bin/sh
printf '%s\\n' "$*" >> "$UV_CALLS"
if [ "$1" = export ]; then echo 'torch==2.9.0'; echo 'filelock==3.20.0'; fi
"""


@pytest.mark.parametrize("base", ["", "torch"])
def test_the_base_is_installed_at_the_versions_the_lock_pins(tmp_path, base):
    instructions = dockerfile_instructions()
    builder = stage_of(instructions, "builder")
    (script,) = [
        a for s, kw, a in instructions if s == builder and kw == "RUN" and SCRIPT_BASE_DIR in a
    ]
    fake = tmp_path / "uv"
    fake.write_text(FAKE_UV)
    fake.chmod(0o755)
    locked = tmp_path / "locked.txt"
    env = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "UV_CALLS": str(tmp_path / "calls"),
        "EXTRAS": "torch",
        "SCRIPT_BASE": base,
    }
    body = script.replace("/tmp/locked.txt", str(locked))
    subprocess.run(["sh", "-c", body], env=env, check=True)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0] == f"venv {SCRIPT_BASE_DIR} --python /usr/local/bin/python3"
    if not base:
        assert calls == calls[:1]  # an empty environment, nothing installed
        return
    export, install = calls[1:]
    assert export.split()[:2] == ["export", "--frozen"]
    assert "--no-emit-project" in export and "--extra torch" in export
    assert install == f"pip install --python {SCRIPT_BASE_DIR} --constraint {locked} torch"
    assert "torch==2.9.0" in locked.read_text()


# --- webhooks --------------------------------------------------------------------------------


def test_the_webhook_sender_runs_its_module_from_the_api_image(services):
    sender = services["webhooks"]
    assert command(sender) == ["python", "-m", "app.webhooks"]
    assert importlib.util.find_spec("app.webhooks.__main__") is not None
    api = services["api"]
    assert (sender["image"], sender["build"]) == (api["image"], api["build"])


def test_webhook_senders_can_be_scaled(services):
    # Replicas share the deliveries through Redis: nothing may tie the service to one container.
    sender = services["webhooks"]
    assert "hostname" not in sender
    assert "container_name" not in sender
    assert "ports" not in sender


def test_the_api_and_the_sender_read_one_webhook_secret_from_the_environment(services):
    secrets = {environment(services[name])["WEBHOOK_SECRET"] for name in ("api", "webhooks")}
    assert secrets == {"${WEBHOOK_SECRET:-}"}  # never a secret written in the file
    # unset, Compose passes it empty: the API refuses webhooks and the sender sends none
    assert signer(Settings(webhook_secret=SecretStr(""))) is None


# --- flower ----------------------------------------------------------------------------------


def test_flower_publishes_port_5555(services):
    assert services["flower"]["ports"] == ["5555:5555"]


def test_flower_credentials_come_from_the_environment_never_from_the_file(services):
    value = environment(services["flower"])["FLOWER_BASIC_AUTH"]
    assert re.fullmatch(r"\$\{FLOWER_BASIC_AUTH(:?-)?\}", value), value
    assert "basic-auth=" not in " ".join(command(services["flower"]))


def run_flower_command(services, tmp_path: Path, basic_auth: str | None):
    """Run flower's command with a stand-in `celery` that records its arguments."""
    fake = tmp_path / "celery"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$0.args"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    script = command(services["flower"])
    assert script[:2] == ["sh", "-c"]
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    if basic_auth is not None:
        env["FLOWER_BASIC_AUTH"] = basic_auth
    body = script[2].replace("$$", "$")  # Compose's escape for a literal dollar sign
    done = subprocess.run(["sh", "-c", body], env=env, capture_output=True, text=True, check=False)
    args = tmp_path / "celery.args"
    return done, args.read_text().split() if args.exists() else None


@pytest.mark.parametrize("basic_auth", [None, "", "admin", ":secret", "admin:"])
def test_flower_refuses_to_start_without_user_and_password(services, tmp_path, basic_auth):
    done, celery_args = run_flower_command(services, tmp_path, basic_auth)
    assert done.returncode != 0
    assert "FLOWER_BASIC_AUTH" in done.stderr
    assert celery_args is None


def test_flower_starts_on_port_5555_with_credentials(services, tmp_path):
    done, celery_args = run_flower_command(services, tmp_path, "admin:s3cret")
    assert done.returncode == 0, done.stderr
    assert celery_args == ["-A", "worker", "flower", "--port=5555"]


# --- images ----------------------------------------------------------------------------------


def test_compose_asks_only_for_extras_the_project_defines(services):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    defined = set(project.get("optional-dependencies", {}))
    wanted = {extra: name for name, svc in services.items() for extra in build_extras(svc)}
    missing = {extra: name for extra, name in wanted.items() if extra not in defined}
    assert not missing, f"pyproject.toml has no optional extra for {missing}"


def test_services_sharing_an_image_tag_build_it_the_same_way(services):
    builds: dict[str, Any] = {}
    for name, svc in services.items():
        if "build" in svc:
            assert builds.setdefault(svc["image"], svc["build"]) == svc["build"], name


def test_dockerfile_final_stage_runs_as_a_non_root_user():
    instructions = dockerfile_instructions()
    final = instructions[-1][0]
    users = [args for stage, keyword, args in instructions if stage == final and keyword == "USER"]
    assert users, "the final stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")


def test_dockerfile_installs_the_locked_dependencies_before_copying_the_source():
    instructions = dockerfile_instructions()
    builder = stage_of(instructions, "builder")
    steps = [(kw, args) for stage, kw, args in instructions if stage == builder]
    copy_lock = steps.index(("COPY", "pyproject.toml uv.lock ./"))
    syncs = [i for i, (kw, args) in enumerate(steps) if kw == "RUN" and "uv sync" in args]
    copy_source = next(i for i, (kw, args) in enumerate(steps) if kw == "COPY" and "app" in args)
    assert len(syncs) == 2
    assert copy_lock < syncs[0] < copy_source < syncs[1]
    first, second = (steps[i][1] for i in syncs)
    for flag in ("--frozen", "--no-dev", "${extras}"):
        assert flag in first and flag in second
    assert "--no-install-project" in first
    assert "--no-install-project" not in second


@pytest.mark.parametrize(
    ("extras", "flags"),
    [
        ("", ""),
        ("torch", " --extra torch"),
        ("torch monitoring", " --extra torch --extra monitoring"),
    ],
)
def test_dockerfile_turns_each_extra_into_an_extra_flag(extras, flags):
    instructions = dockerfile_instructions()
    assert ("ARG", 'EXTRAS=""') in [(kw, args) for _, kw, args in instructions]
    run = next(args for _, kw, args in instructions if kw == "RUN" and "uv sync" in args)
    assignment = re.search(r'extras="\$\(.*?\)"', run)
    assert assignment, run
    script = f'{assignment.group(0)}; printf "%s" "$extras"'
    done = subprocess.run(
        ["sh", "-c", script], env={"EXTRAS": extras}, capture_output=True, text=True, check=True
    )
    assert done.stdout == flags


def test_dockerfile_runtime_is_slim_python_311_serving_the_api():
    instructions = dockerfile_instructions()
    runtime = instructions[-1][0]
    in_runtime = [(kw, args) for stage, kw, args in instructions if stage == runtime]
    assert ("ARG", "PYTHON_IMAGE=python:3.11-slim") in [(kw, a) for _, kw, a in instructions]
    assert in_runtime[0] == ("FROM", "${PYTHON_IMAGE} AS runtime")
    env = " ".join(args for kw, args in in_runtime if kw == "ENV")
    assert 'PATH="/app/.venv/bin:${PATH}"' in env
    assert "HOST=0.0.0.0" in env
    assert ("CMD", '["python", "main.py"]') in in_runtime
    assert ("COPY", "--from=builder /app/.venv /app/.venv") in in_runtime


def test_everything_the_dockerfile_copies_is_in_the_build_context():
    ignored = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for _, keyword, args in dockerfile_instructions():
        if keyword != "COPY" or args.startswith("--from"):
            continue
        for source in args.split()[:-1]:
            assert (ROOT / source).exists(), source
            prefixes = [
                "/".join(Path(source).parts[: i + 1]) for i in range(len(Path(source).parts))
            ]
            hits = [p for p in ignored for s in prefixes if fnmatch.fnmatch(s, p.strip("/"))]
            assert not hits, f"{source} is excluded by .dockerignore {hits}"


def test_dockerignore_keeps_secrets_and_local_state_out_of_the_image():
    ignored = set(DOCKERIGNORE.read_text().split())
    assert {".git", ".venv", ".env", "*.rdb", "*.aof"} <= ignored


# --- prometheus ------------------------------------------------------------------------------


def test_prometheus_scrapes_metrics_of_every_api_replica(services):
    config = yaml.safe_load(PROMETHEUS_FILE.read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    (discovery,) = job["dns_sd_configs"]
    port = int(services["api"]["environment"]["PORT"])
    # DNS of the service name answers every replica's address, so each API process is scraped.
    assert discovery == {"names": ["api"], "type": "A", "port": port}


def test_the_api_serves_the_path_prometheus_scrapes():
    from app.api.factory import create_app
    from app.settings import Settings

    config = yaml.safe_load(PROMETHEUS_FILE.read_text())
    paths = create_app(Settings()).openapi()["paths"]
    assert "get" in paths[config["scrape_configs"][0]["metrics_path"]]


def test_prometheus_reads_its_config_read_only_and_keeps_data_on_a_named_volume(compose, services):
    prometheus = services["prometheus"]
    assert "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    data = [v.split(":")[0] for v in prometheus["volumes"] if v.endswith(":/prometheus")]
    assert data and data[0] in compose["volumes"]


def test_prometheus_publishes_port_9090(services):
    assert services["prometheus"]["ports"] == ["9090:9090"]


# --- what the files must not contain ---------------------------------------------------------


DEPLOYMENT_FILES = [COMPOSE_FILE, DOCKERFILE, DOCKERIGNORE, PROMETHEUS_FILE, SECCOMP_FILE]


@pytest.mark.parametrize("path", DEPLOYMENT_FILES, ids=lambda p: p.name)
def test_deployment_files_name_no_registry_or_package_index(path):
    text = path.read_text().lower()
    assert not PUBLIC_HOST.search(text), f"{path.name} names a host: {PUBLIC_HOST.findall(text)}"
    for setting in INDEX_SETTINGS:
        assert setting.lower() not in text, f"{path.name} sets {setting}"
    assert not re.search(r"https?://(?!127\.0\.0\.1[:/])", text), f"{path.name} has a URL"


def test_images_are_named_without_a_registry_host(services):
    refs = [svc["image"] for svc in services.values()]
    refs += [
        a.split("=", 1)[1] for _, kw, a in dockerfile_instructions() if kw == "ARG" and "IMAGE" in a
    ]
    for ref in refs:
        first = ref.split("/")[0]
        assert "/" not in ref or not ("." in first or ":" in first or first == "localhost"), ref


@pytest.mark.parametrize("path", DEPLOYMENT_FILES, ids=lambda p: p.name)
def test_deployment_files_hold_no_absolute_path_of_this_machine(path):
    text = path.read_text()
    # Paths inside the image are fine, even where a checkout happens to live at one of them.
    local = {str(ROOT), str(ROOT.parent), str(Path.home())} - {"/", *IMAGE_PATHS}
    for prefix in local:
        assert not re.search(re.escape(prefix) + r"(/|\b)", text), f"{path.name} names {prefix}"


# --- a host with N GPUs: the generated override ----------------------------------------------


@pytest.mark.parametrize("n", HOST_GPUS)
def test_the_override_only_sets_the_gpu_containers_cards_and_classes(compose, tmp_path, n):
    # Compose merges `environment` key by key: the override replaces two values of the base file
    override = write_override(tmp_path, "--gpus", str(n))
    assert override == {
        "services": {
            GPU_SERVICE: {
                "environment": {
                    "FAIRGPU_GPUS": ",".join(map(str, range(n))),
                    "FAIRGPU_CARD_CLASSES": "",
                }
            }
        }
    }
    assert set(override["services"][GPU_SERVICE]["environment"]) <= set(
        environment(compose["services"][GPU_SERVICE])
    )


def test_the_merged_file_keeps_the_base_files_rules(gpu_host):
    for name, svc in gpu_host.items():
        assert svc.get("restart") == "unless-stopped", name
        assert svc.get("profiles"), name
        for dependency in svc.get("depends_on", {}):
            assert not set(svc["profiles"]) - set(gpu_host[dependency]["profiles"]), name
    builds: dict[str, Any] = {}
    for name, svc in gpu_host.items():
        if "build" in svc:
            assert builds.setdefault(svc["image"], svc["build"]) == svc["build"], name


def test_explicit_device_ids_give_each_named_card_its_worker(compose, tmp_path):
    # any of the host's cards: card 0 may be kept for something else
    override = write_override(tmp_path, "--device-ids", "5,2,3")
    merged = compose_merge(compose, override)["services"]
    workers = gpu_workers(merged[GPU_SERVICE], host_cards=8)
    assert sorted(workers) == [2, 3, 5]
    assert [env["CUDA_VISIBLE_DEVICES"] for env in workers.values()] == ["2", "3", "5"]


@pytest.mark.parametrize(
    ("gpus", "device_ids"),
    [(0, None), (-1, None), (None, None), (None, []), (None, [0, 0]), (None, [-1]), (3, [0, 1])],
)
def test_impossible_cards_are_refused(gpus, device_ids):
    with pytest.raises(compose_gpus.ComposeError):
        compose_gpus.choose_cards(gpus, device_ids)


def test_the_base_must_run_the_launcher_on_every_card(compose):
    def altered(change) -> dict[str, Any]:
        base = copy.deepcopy(compose)
        change(base["services"])
        return base

    def devices(services):
        return reserved_devices(services[GPU_SERVICE])

    listed = altered(lambda s: devices(s)[0].update({"device_ids": ["0", "1"]}))
    counted = altered(lambda s: devices(s)[0].update({"count": 2}))
    two = altered(lambda s: devices(s).append({"driver": "nvidia", "count": "all"}))
    one_worker = altered(lambda s: s[GPU_SERVICE].update({"command": ["python", "worker.py"]}))
    missing = altered(lambda s: s.pop(GPU_SERVICE))
    compose_gpus.check_base(compose)
    for base in (listed, counted, two, one_worker, missing):
        with pytest.raises(compose_gpus.ComposeError):
            compose_gpus.check_base(base)


def test_the_generator_module_does_not_import_yaml():
    # PyYAML is a development dependency: the generator must import without it.
    probe = "import sys, scripts.compose_gpus; assert 'yaml' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


NVIDIA_SMI_LIST = """\
GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)
GPU 1: NVIDIA H200 (UUID: GPU-11111111-1111-1111-1111-111111111111)
  MIG 3g.71gb     Device  0: (UUID: MIG-22222222-2222-2222-2222-222222222222)
GPU 2: NVIDIA H200 (UUID: GPU-33333333-3333-3333-3333-333333333333)
"""


def test_nvidia_smi_cards_are_counted_without_their_mig_devices():
    assert compose_gpus.count_gpus(NVIDIA_SMI_LIST) == 3
    assert compose_gpus.count_gpus("") == 0
    # as the launcher counts them in the container
    assert sorted(worker_envs({}, lambda: NVIDIA_SMI_LIST)) == [0, 1, 2]


def fake_nvidia_smi(folder: Path, stdout: str, code: int = 0, stderr: str = "") -> Path:
    """A stand-in `nvidia-smi` in `folder` that prints `stdout` (and `stderr`) and exits `code`."""
    (folder / "listing").write_text(stdout)
    fake = folder / "nvidia-smi"
    fake.write_text(
        f'#!/bin/sh\n[ "$1" = -L ] || exit 64\n'
        f'while IFS= read -r line; do printf "%s\\n" "$line"; done < "{folder}/listing"\n'
        f"printf '%s' {shlex.quote(stderr)} >&2\nexit {code}\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return folder


def run_cli(*args: str) -> int:
    return compose_gpus.main(["--base", str(COMPOSE_FILE), *args])


@pytest.mark.parametrize("n", HOST_GPUS)
def test_the_command_writes_an_override_that_parses(compose, tmp_path, capsys, n):
    output = tmp_path / compose_gpus.OVERRIDE_FILE
    assert run_cli("--gpus", str(n), "--output", str(output)) == 0
    text = output.read_text()
    assert text.startswith("#")
    override = yaml.safe_load(text)
    assert override == compose_gpus.override(list(range(n)), {})
    # below its comment the file is JSON, which reads the same in any YAML parser
    body = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    assert json.loads(body) == override
    merged = compose_merge(compose, override)["services"]
    assert len(gpu_workers(merged[GPU_SERVICE])) == n
    assert "--profile gpu up" in capsys.readouterr().out


def test_without_gpus_the_command_counts_the_cards_with_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, NVIDIA_SMI_LIST)))
    output = tmp_path / "out.yml"
    assert run_cli("--output", str(output)) == 0
    assert yaml.safe_load(output.read_text()) == compose_gpus.override([0, 1, 2], {})


def test_explicit_device_ids_need_no_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    output = tmp_path / "out.yml"
    assert run_cli("--device-ids", "0,3", "--output", str(output)) == 0
    assert yaml.safe_load(output.read_text()) == compose_gpus.override([0, 3], {})


def test_without_nvidia_smi_the_command_says_to_pass_gpus(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on it
    output = tmp_path / "out.yml"
    assert run_cli("--output", str(output)) != 0
    message = capsys.readouterr().err
    assert "nvidia-smi not found" in message
    assert "--gpus N" in message
    assert not output.exists()


@pytest.mark.parametrize(
    ("stdout", "code", "stderr", "said"),
    [
        ("", 9, "NVIDIA-SMI has failed because it couldn't communicate with the driver", "driver"),
        ("No devices were found\n", 0, "", "lists no GPU"),
    ],
)
def test_a_failing_nvidia_smi_is_reported(
    tmp_path, monkeypatch, capsys, stdout, code, stderr, said
):
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, stdout, code, stderr)))
    output = tmp_path / "out.yml"
    assert run_cli("--output", str(output)) != 0
    message = capsys.readouterr().err
    assert said in message
    assert "--gpus N" in message
    assert not output.exists()


def test_the_generated_override_names_no_host_url_or_path_of_this_machine():
    text = compose_gpus.render(compose_gpus.override(range(8), {0: "big"})).lower()
    assert not PUBLIC_HOST.search(text), PUBLIC_HOST.findall(text)
    assert not re.search(r"https?://", text)
    local = {str(ROOT), str(ROOT.parent), str(Path.home())} - {"/", *IMAGE_PATHS}
    assert not any(prefix.lower() in text for prefix in local)
