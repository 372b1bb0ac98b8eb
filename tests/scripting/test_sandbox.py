"""The script jobs' sandbox, with the real bubblewrap: what a script inside can reach, and what not.

Skipped, with the reason, where bubblewrap cannot run (CI installs it: .ci/run).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import app
from app.dev.redis_server import RedisServer
from app.scripting import sandbox
from app.scripting.sandbox import Limits, Sandbox

UNAVAILABLE = sandbox.available()
# integration: each test starts real sandboxed processes (bubblewrap), as the real-process tiers do
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        UNAVAILABLE is not None, reason=f"the sandbox cannot run here: {UNAVAILABLE}"
    ),
]

#: No run here should take more than milliseconds; this only bounds a broken one.
RUN_TIMEOUT_S = 30.0
#: The service's own checkout: a script must never see it.
CHECKOUT = Path(app.__file__).resolve().parents[1]
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "USER": "script", "FAIRGPU_JOB_ID": "j1"}


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder the sandbox's user can reach (pytest's own is root's alone): the run's folders,
    and a "service checkout" beside them with a secret any host user could read."""
    top = Path(tempfile.mkdtemp(prefix="fairgpu-sandbox-"))
    top.chmod(0o755)
    for name in ("env", "work", "artifacts", "checkpoint", "service"):
        (top / name).mkdir()
        (top / name).chmod(0o755)
    (top / "service" / "settings.env").write_text("API_SECRET=hunter2\n")
    (top / "service" / "settings.env").chmod(0o644)
    try:
        yield top
    finally:
        shutil.rmtree(top)


def box(base: Path, command: list[str], **changes: object) -> Sandbox:
    """A sandbox over `base`'s folders, handed over to its user as the worker does."""
    made = Sandbox(
        command=command,
        environment=ENVIRONMENT,
        env_dir=base / "env",
        work_dir=base / "work",
        artifacts_dir=base / "artifacts",
        checkpoint_dir=base / "checkpoint",
    )
    made = replace(made, **changes)  # type: ignore[arg-type]
    made.hand_over()
    return made


def run(made: Sandbox) -> subprocess.CompletedProcess[str]:
    process = made.start(subprocess.PIPE, subprocess.PIPE)
    out, err = process.communicate(timeout=RUN_TIMEOUT_S)
    return subprocess.CompletedProcess(process.args, process.returncode, out.decode(), err.decode())


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def test_script_cannot_see_the_services_files_nor_home_root_run(base: Path) -> None:
    secret = base / "service" / "settings.env"
    assert secret.read_text()  # readable on the host: only the sandbox keeps it out
    other_job = base / "other-job"  # another run's folder, beside this one's
    other_job.mkdir()
    places = [str(secret), str(other_job), str(CHECKOUT), "/root", "/home", "/run"]
    done = run(
        box(base, ["/bin/sh", "-c", 'for p; do test -e "$p" && echo "SEEN $p"; done', "-", *places])
    )
    assert done.stdout == ""
    assert "hunter2" not in done.stdout + done.stderr


def test_a_hidden_path_inside_a_bound_folder_is_empty(base: Path) -> None:
    (base / "env" / "private").mkdir()
    (base / "env" / "private" / "key").write_text("k")
    (base / "env" / "token").write_text("t")
    hidden = (base / "env" / "private", base / "env" / "token")
    done = run(box(base, sh(f"ls -A {hidden[0]}; cat {hidden[1]}; echo end"), hidden=hidden))
    assert done.stdout == "end\n"


def test_script_sees_no_environment_but_its_own(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIRGPU_WORKER_SECRET", "s3cret")
    # Every process it can see, bubblewrap's own PID 1 included: its whole PID namespace.
    done = run(box(base, sh("cat /proc/[0-9]*/environ | tr '\\0' '\\n'; ls -d /proc/[0-9]*")))
    lines = done.stdout.split()
    environ = {line for line in lines if "=" in line}
    pids = [line for line in lines if line.startswith("/proc/")]
    assert environ <= {f"{k}={v}" for k, v in ENVIRONMENT.items()} | {f"PWD={base / 'work'}"}
    assert "s3cret" not in done.stdout
    assert len(pids) <= 4  # bubblewrap, sh, cat, ls: none of the host's processes
    assert str(os.getpid()) not in {pid.removeprefix("/proc/") for pid in pids}


def test_script_environment_is_exactly_what_was_passed(base: Path) -> None:
    done = run(box(base, ["/usr/bin/env"]))
    assert dict(line.split("=", 1) for line in done.stdout.splitlines()) == {
        **ENVIRONMENT,
        "PWD": str(base / "work"),  # bubblewrap's --chdir
    }


def test_script_writes_only_in_its_folders(base: Path) -> None:
    writable = [base / "work", base / "artifacts", base / "checkpoint", Path("/tmp")]
    refused = [base / "env", Path("/"), Path("/usr"), Path("/etc"), base / "service"]
    script = 'for d; do if touch "$d/f" 2>/dev/null; then echo "W $d"; fi; done'
    done = run(box(base, ["/bin/sh", "-c", script, "-", *map(str, writable + refused)]))
    assert done.stdout.split("\n")[:-1] == [f"W {path}" for path in writable]
    assert (base / "artifacts" / "f").exists()
    assert not (base / "env" / "f").exists()
    assert not (base / "service" / "f").exists()
    # The folders above the binds are made in the sandbox's own /tmp: nothing lands on the host.
    assert not (base / "f").exists()


def test_script_cannot_reach_redis_on_the_hosts_loopback(
    base: Path, redis_server: RedisServer
) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed: the check connects with its /dev/tcp")
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{redis_server.port} && echo CONNECTED"
    outside = subprocess.run([bash, "-c", connect], capture_output=True, text=True, check=False)
    assert outside.stdout == "CONNECTED\n"  # the server does answer on the host
    done = run(box(base, [bash, "-c", connect]))
    assert "CONNECTED" not in done.stdout
    assert done.returncode != 0


def test_script_runs_unprivileged(base: Path) -> None:
    done = run(box(base, sh("id -u; grep CapEff /proc/self/status")))
    uid, caps = done.stdout.splitlines()
    expected = sandbox.NOBODY.uid if os.geteuid() == 0 else os.geteuid()
    assert int(uid) == expected
    assert caps.split() == ["CapEff:", "0000000000000000"]
    if os.geteuid() == 0:
        assert (base / "work").stat().st_uid == sandbox.NOBODY.uid  # handed over to it


def test_hand_over_changes_links_never_what_they_point_at(base: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root worker hands its folders over")
    target = base / "service" / "settings.env"
    (base / "work" / "link").symlink_to(target)
    box(base, ["/bin/true"])  # hands the folders over
    assert (base / "work" / "link").lstat().st_uid == sandbox.NOBODY.uid
    assert target.stat().st_uid == 0


def test_limits_bound_file_size_and_tmp(base: Path) -> None:
    limits = Limits(processes=64, memory_bytes=2**31, file_bytes=2**20, tmp_bytes=2**20)
    script = (
        "head -c 2000000 /dev/zero > big 2>/dev/null || echo file-refused;"
        "head -c 900000 /dev/zero > /tmp/a; head -c 900000 /dev/zero > /tmp/b 2>/dev/null"
        " || echo tmp-full;"
        "grep -E '^Max (processes|data size)' /proc/self/limits"
    )
    done = run(box(base, sh(script), limits=limits))
    lines = done.stdout.splitlines()
    assert lines[:2] == ["file-refused", "tmp-full"]
    assert lines[2].split()[3:5] == [str(2**31), str(2**31)]
    assert lines[3].split()[2:4] == ["64", "64"]


def test_an_interpreter_runs_with_tls_roots(base: Path) -> None:
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no system python3 to run inside the sandbox")
    code = "import ssl; print(len(ssl.create_default_context().get_ca_certs()) > 0)"
    done = run(box(base, ["/usr/bin/python3", "-c", code]))
    assert (done.stdout, done.returncode) == ("True\n", 0), done.stderr


def test_its_processes_die_with_it(base: Path) -> None:
    made = box(base, sh("sleep 300 & (setsid sleep 300 &); echo up; wait"))
    process = made.start(subprocess.PIPE, subprocess.DEVNULL)
    assert process.stdout is not None
    assert process.stdout.readline() == b"up\n"
    inside = _members(process.pid, 4)  # bubblewrap's PID 1, sh and both sleeps
    namespace = os.readlink(f"/proc/{inside[0]}/ns/pid")
    os.killpg(process.pid, signal.SIGKILL)  # the worker's last resort: bubblewrap itself
    process.wait(timeout=RUN_TIMEOUT_S)
    process.stdout.close()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while any(_in(pid, namespace) for pid in inside):
        assert time.monotonic() < deadline, "a sandboxed process outlived its sandbox"
        time.sleep(0.01)


def test_a_stop_reaches_the_whole_tree_and_the_script_may_checkpoint(base: Path) -> None:
    checkpoint = base / "checkpoint"
    script = f"trap 'echo saved > {checkpoint}/state; exit 7' TERM; echo up; sleep 300 & wait"
    process = box(base, sh(script)).start(subprocess.PIPE, subprocess.DEVNULL)
    assert process.stdout is not None
    assert process.stdout.readline() == b"up\n"
    assert len(_members(process.pid, 3)) >= 3  # PID 1, sh, sleep
    assert sandbox.signal_all(process.pid, signal.SIGTERM) >= 3
    assert process.wait(timeout=RUN_TIMEOUT_S) == 7  # the script's own exit code
    process.stdout.close()
    assert (checkpoint / "state").read_text() == "saved\n"


def _members(pid: int, count: int) -> list[int]:
    """The sandbox's processes once there are `count` of them (a script's `&` returns before
    its child exists)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while len(found := sandbox.members(pid)) < count:
        assert time.monotonic() < deadline, f"only {found} in the sandbox"
        time.sleep(0.01)
    return found


def _in(pid: int, namespace: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") == namespace
    except OSError:
        return False


@pytest.mark.parametrize("path", ["/root/project", "/home/a", "/run/secrets", "/", "relative"])
def test_forbidden_folders_are_never_bound(path: str) -> None:
    made = Sandbox(["true"], {}, Path(path), Path("/w"), Path("/a"), Path("/c"))
    with pytest.raises(ValueError, match=r"bound|binds"):
        made.argv()


def test_refuses_root_and_loader_variables() -> None:
    made = Sandbox(["true"], {}, Path("/e"), Path("/w"), Path("/a"), Path("/c"))
    with pytest.raises(ValueError, match="root"):
        replace(made, user=sandbox.User(0, 0)).argv()
    with pytest.raises(ValueError, match="LD_"):
        replace(made, environment={"LD_PRELOAD": "/x.so"}).argv()


def test_network_is_shared_only_when_asked() -> None:
    made = Sandbox(["true"], {}, Path("/e"), Path("/w"), Path("/a"), Path("/c"))
    assert "--share-net" not in made.argv()
    assert "/etc/resolv.conf" not in made.argv()
    assert "--share-net" in replace(made, network=True).argv()
    assert "/etc/resolv.conf" in replace(made, network=True).argv()
