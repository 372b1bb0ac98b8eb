"""A script job's sandbox through real processes (issue 40, docs/security.md "Script jobs'
sandbox"): a script sees only its allowlisted environment, none of the worker's secrets, no
other process's environment; it cannot read the service's files (accounts, ledger, Redis's
data, the checkout) nor another job's folders, cannot write outside its own folders, and cannot
reach the stack's Redis or API without SCRIPT_NETWORK.

With SCRIPT_NETWORK on, the script's network is pasta's filtered one (app/scripting/network.py):
the host's loopback, where the stack's Redis and API listen, stays out of its reach; the stack's
Redis also requires a password, as docs/security.md asks of such workers."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from app.dev.stack import Stack
from tests.e2e.conftest import (
    DEMO_KEY,
    ended,
    log_text,
    logged,
    new_password,
    run_script,
    script_stack,
    upload,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
CHECKOUT = Path(__file__).resolve().parents[2]
SECRET_NAME = "FAIRGPU_TEST_WORKER_SECRET"
SECRET = f"worker-secret-{secrets.token_hex(8)}"
#: What a script may see of its environment (docs/scripts.md), besides its input's env.
ALLOWED = {
    "FAIRGPU_JOB_ID",
    "FAIRGPU_ARTIFACTS_DIR",
    "FAIRGPU_CHECKPOINT_DIR",
    "FAIRGPU_OUTPUT",
    "FAIRGPU_PREEMPTIBLE",
    "CUDA_VISIBLE_DEVICES",
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "TMPDIR",
    "PWD",  # bubblewrap's --chdir sets it: the working folder, HOME already
}
#: Tries what probe.json asks (reads, writes, TCP connects to the loopback), reads every
#: process environment it can, and writes what happened to its output file.
PROBE = b"""\
import json, os, socket
with open("probe.json") as f:
    spec = json.load(f)
seen = {"environ": dict(os.environ), "uid": os.getuid(), "reads": {}, "writes": {},
        "connects": {}, "proc_environ": {}}
for path in spec.get("read", []):
    try:
        if os.path.isdir(path):
            os.listdir(path)
            seen["reads"][path] = "listed"
        else:
            with open(path, "rb") as f:
                f.read(1)
            seen["reads"][path] = "read"
    except OSError as error:
        seen["reads"][path] = type(error).__name__
for path in spec.get("write", []):
    try:
        with open(path, "w") as f:
            f.write("written by a script")
        seen["writes"][path] = "written"
    except OSError as error:
        seen["writes"][path] = type(error).__name__
for port in spec.get("connect", []):
    sock = socket.socket()
    sock.settimeout(3)
    try:
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"PING\\r\\n")
        seen["connects"][str(port)] = "answered: " + sock.recv(200).decode(errors="replace")
    except OSError as error:
        seen["connects"][str(port)] = type(error).__name__
    finally:
        sock.close()
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                seen["proc_environ"][entry] = f.read().decode(errors="replace")
        except OSError as error:
            seen["proc_environ"][entry] = type(error).__name__
with open(os.environ["FAIRGPU_OUTPUT"], "w") as f:
    json.dump(seen, f)
"""
#: Leaves a secret in each of its folders, logs where they are, and waits to be cancelled.
HOLDER = b"""\
import json, os, sys, time
places = {"work": os.getcwd(), "artifacts": os.environ["FAIRGPU_ARTIFACTS_DIR"],
          "checkpoint": os.environ["FAIRGPU_CHECKPOINT_DIR"]}
for folder in places.values():
    with open(os.path.join(folder, "secret.txt"), "w") as f:
        f.write(sys.argv[1])
print("places " + json.dumps(places), flush=True)
while True:
    time.sleep(0.1)
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Two workers (a job runs while another looks for its folders), each with a secret in its
    environment."""
    with script_stack(
        tmp_path_factory.mktemp("script-sandbox-logs"),
        workers=2,
        worker_env={SECRET_NAME: SECRET},
        min_billed_s=0.1,
    ) as started:
        yield started


def probe(stack: Stack, folder: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Run PROBE with this spec; what it saw."""
    files = {"probe.py": PROBE, "probe.json": json.dumps(spec).encode()}
    task_id = run_script(stack, upload(stack, folder, files), ["python", "probe.py"])
    done = ended(stack, task_id)
    assert done["status"] == "SUCCESS", (done["error"], log_text(stack, task_id))
    return dict(done["result"]["output"])


def secrets_of(stack: Stack) -> list[str]:
    """Values a script must never see: the worker's secret, the webhook key, Redis's URL."""
    found = [SECRET, stack.redis_url]
    if stack.generated_secret:
        found.append(stack.generated_secret)
    return found


def redis_port(stack: Stack) -> int:
    port = urlsplit(stack.redis_url).port
    assert port is not None
    return port


def test_a_script_sees_only_its_own_environment_and_no_other_process(
    stack: Stack, tmp_path: Path
) -> None:
    worker_pid = stack.workers["cpu1"].pid
    seen = probe(stack, tmp_path, {"read": [f"/proc/{worker_pid}/environ"]})
    assert set(seen["environ"]) <= ALLOWED, set(seen["environ"]) - ALLOWED
    assert seen["uid"] != 0
    everything = json.dumps(seen)  # its environment, and every process environment it read
    for secret in secrets_of(stack):
        assert secret not in everything
    assert seen["reads"][f"/proc/{worker_pid}/environ"] != "read"
    # Its PID namespace holds bubblewrap and the script: a handful of processes, not the host's.
    assert len(seen["proc_environ"]) < 10, sorted(seen["proc_environ"])


def test_a_script_cannot_read_the_services_files_nor_another_jobs_folders(
    stack: Stack, tmp_path: Path
) -> None:
    holder_secret = secrets.token_hex(8)
    holder_code = upload(stack, tmp_path, {"holder.py": HOLDER})
    holder = run_script(stack, holder_code, ["python", "holder.py", holder_secret])
    line = next(
        line for line in logged(stack, holder, "places ").splitlines() if line.startswith("places ")
    )
    places = json.loads(line.removeprefix("places "))
    theirs = [str(Path(folder) / "secret.txt") for folder in places.values()]
    service = [
        str(stack.settings.users_file.resolve()),
        str(stack.workdir / "fairgpu.db"),  # the ledger
        str(stack.workdir),
        str(stack.workdir / "artifacts"),
        str(stack.log_dir),
        str(CHECKOUT / "pyproject.toml"),
        str(CHECKOUT),
        "/root",
        "/home",
        "/etc/shadow",
        "/etc/passwd",
    ]
    try:
        seen = probe(stack, tmp_path, {"read": [*theirs, *places.values(), *service]})
    finally:
        httpx.delete(f"{stack.url}/tasks/{holder}", headers={"X-API-Key": DEMO_KEY}, timeout=10)
    reached = {path: how for path, how in seen["reads"].items() if how in ("read", "listed")}
    assert reached == {}
    assert holder_secret not in json.dumps(seen)
    assert ended(stack, holder)["status"] == "REVOKED"


def test_a_script_writes_only_in_its_own_folders(stack: Stack, tmp_path: Path) -> None:
    name = f"fairgpu-sandbox-{secrets.token_hex(6)}"
    outside = [
        f"/{name}",
        f"/usr/{name}",
        f"/etc/{name}",
        str(CHECKOUT / name),
        str(stack.workdir / name),
    ]
    own = [name, f"/tmp/{name}"]  # its working folder, its own /tmp
    seen = probe(stack, tmp_path, {"write": [*outside, *own]})
    assert {
        path: seen["writes"][path] for path in outside if seen["writes"][path] == "written"
    } == {}
    assert [seen["writes"][path] for path in own] == ["written", "written"]
    assert not Path("/tmp", name).exists()  # its /tmp was its own, not the host's
    for path in outside:
        assert not Path(path).exists()


def test_without_network_a_script_cannot_reach_redis_nor_the_api(
    stack: Stack, tmp_path: Path
) -> None:
    ports = [redis_port(stack), stack.port]
    seen = probe(stack, tmp_path, {"connect": ports})
    for port in ports:
        assert not seen["connects"][str(port)].startswith("answered"), seen["connects"]


@pytest.fixture(scope="module")
def networked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose scripts have network (SCRIPT_NETWORK), on a Redis that requires a password,
    as docs/security.md asks of such workers; its tests come last, the other stack idle."""
    with script_stack(
        tmp_path_factory.mktemp("script-network-logs"),
        redis_password=new_password(),
        script_network=True,
        min_billed_s=0.1,
    ) as started:
        yield started


def test_with_network_redis_refuses_a_script_that_reaches_it(
    networked: Stack, tmp_path: Path
) -> None:
    seen = probe(networked, tmp_path, {"connect": [redis_port(networked)]})
    answer = seen["connects"][str(redis_port(networked))]
    print(f"with SCRIPT_NETWORK, a script's connect to Redis: {answer}")
    # Out of reach (the filter); were it reached, Redis would give nothing without its password.
    assert not answer.startswith("answered") or answer.startswith("answered: -NOAUTH"), answer
    password = urlsplit(networked.redis_url).password
    assert password and password not in json.dumps(seen)


def test_with_network_a_script_cannot_reach_the_hosts_loopback(
    networked: Stack, tmp_path: Path
) -> None:
    ports = [redis_port(networked), networked.port]
    seen = probe(networked, tmp_path, {"connect": ports})
    for port in ports:
        assert not seen["connects"][str(port)].startswith("answered"), seen["connects"]
