"""The filtered network of scripts and builds (app/scripting/network.py): its command line and
the addresses it refuses, then, with the real pasta and bubblewrap, what a networked script can
and cannot reach (docs/security.md, "Script jobs' sandbox")."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.dev.redis_server import RedisServer
from app.scripting import network, sandbox
from app.scripting.network import Blocklist, pasta_prefix, resolve, service_hosts
from app.scripting.sandbox import Sandbox
from app.settings import Settings

RUN_TIMEOUT_S = 30.0
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "USER": "script"}
#: Sends a Redis PING to each host:port given and prints what answered, as JSON.
PINGER = """\
import json, socket, sys
seen = {}
for target in sys.argv[1:]:
    host, _, port = target.rpartition(":")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.settimeout(2)
    try:
        sock.connect((host, int(port)))
        sock.sendall(b"PING\\r\\n")
        seen[target] = "answered: " + sock.recv(100).decode(errors="replace")
    except OSError as error:
        seen[target] = type(error).__name__
    finally:
        sock.close()
print(json.dumps(seen))
"""
#: Sends one DNS query (for a random name) to the first nameserver of resolv.conf and says
#: whether an answer with the query's id came back: resolution works, whatever the name.
DNS_QUERY = """\
import os, socket, struct
server = next(line.split()[1] for line in open("/etc/resolv.conf")
              if line.split()[:1] == ["nameserver"])
ident = int.from_bytes(os.urandom(2), "big")
name = b"".join(bytes([len(p)]) + p for p in [os.urandom(6).hex().encode(), b"invalid"]) + b"\\0"
query = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 1, 1)
sock = socket.socket(socket.AF_INET6 if ":" in server else socket.AF_INET, socket.SOCK_DGRAM)
sock.settimeout(5)
sock.sendto(query, (server, 53))
print("ANSWERED" if sock.recv(512)[:2] == ident.to_bytes(2, "big") else "OTHER")
"""


# The command line and the addresses (no process started).


def test_pasta_keeps_the_hosts_loopback_out_and_adds_a_route_per_refused_address() -> None:
    refused = [ipaddress.ip_network("10.1.2.3"), ipaddress.ip_network("fd00::/8")]
    argv = pasta_prefix([*refused, refused[0]])
    assert argv[0].endswith("pasta")
    for option in ("--config-net", "--no-map-gw", "-f"):
        assert option in argv
    assert argv[argv.index("-T") + 1] == "none" and argv[argv.index("-U") + 1] == "none"
    assert argv[-5:-2] == ["/bin/sh", "-p", "-c"] and argv[-1] == "sh"
    script = argv[-2]
    assert script.count("route add blackhole 10.1.2.3/32 ") == 1  # each once
    assert "route add blackhole fd00::/8 " in script
    assert script.endswith('exec "$@"')
    assert f"exit {network.ROUTE_FAILED_CODE}" in script
    assert "--dns-forward" not in argv
    assert "--dns-forward" in pasta_prefix([], "192.0.2.1")


def test_a_networked_sandbox_runs_bubblewrap_inside_pasta() -> None:
    made = Sandbox(["true"], {}, Path("/e"), Path("/w"), Path("/a"), Path("/c"))
    assert not any(part.endswith("pasta") for part in made.argv())
    blocked = [ipaddress.ip_network("10.9.9.9")]
    argv = replace(made, network=True, blocked=blocked).argv()
    pasta = next(i for i, part in enumerate(argv) if part.endswith("pasta"))
    bwrap = next(i for i, part in enumerate(argv) if part.endswith("bwrap"))
    assert pasta < bwrap and "--share-net" in argv[bwrap:]
    assert "blackhole 10.9.9.9/32" in " ".join(argv[pasta:bwrap])


def test_resolve_keeps_addresses_and_names_but_never_loopback() -> None:
    warned: list[str] = []
    found = resolve(
        ["10.0.0.7", "127.0.0.1", "::1", "0.0.0.0", "[fd00::2]", "localhost", "no-such.invalid"],
        warned.append,
    )
    assert found == [ipaddress.ip_network("10.0.0.7"), ipaddress.ip_network("fd00::2")]
    assert len(warned) == 1 and "no-such.invalid" in warned[0]


def test_resolve_turns_a_name_into_its_addresses() -> None:
    hostname = os.uname().nodename
    try:
        expected = {
            ipaddress.ip_network(info[4][0])
            for info in socket.getaddrinfo(hostname, None)
            if not ipaddress.ip_address(info[4][0]).is_loopback
        }
    except OSError:
        pytest.skip(f"this host's own name {hostname!r} does not resolve")
    assert set(resolve([hostname])) == expected


def test_the_service_hosts_come_from_every_url_the_worker_has() -> None:
    settings = Settings(
        redis_url="redis://:pw@redis.internal:6379/0",
        redis_sentinels="s1.internal:26379,10.0.0.9:26379",
        celery_broker_url="amqp://u:p@rabbit-a:5672//;amqp://u:p@rabbit-b:5672//",
        database_url="postgresql://u:p@db.internal:5432/fairgpu",
        artifacts_endpoint_url="http://minio:9000",
        host="0.0.0.0",
    )
    assert set(service_hosts(settings)) == {
        "redis.internal",
        "s1.internal",
        "10.0.0.9",
        "rabbit-a",
        "rabbit-b",
        "db.internal",
        "minio",
        "0.0.0.0",
    }


def test_the_blocklist_holds_the_deny_list_the_link_local_range_and_the_hosts_addresses() -> None:
    if shutil.which("ip") is None:
        pytest.skip("iproute2 is not installed")
    settings = Settings(script_network_deny="10.20.0.0/16, 192.0.2.77")
    found = Blocklist(settings, warn=lambda _: None).networks()
    assert ipaddress.ip_network("10.20.0.0/16") in found
    assert ipaddress.ip_network("192.0.2.77") in found
    assert ipaddress.ip_network("169.254.0.0/16") in found
    assert set(network.host_addresses()) <= set(found)
    assert not any(net.is_loopback for net in found)


def test_a_loopback_resolver_is_reached_through_pastas_forward(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.11\nsearch example.internal\noptions ndots:0\n")
    assert network.loopback_resolver(resolv)
    assert not network.loopback_resolver(tmp_path / "missing")
    (tmp_path / "plain").write_text("nameserver 10.0.0.53\n")
    assert not network.loopback_resolver(tmp_path / "plain")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 is not installed")
    try:
        gateway, written = network.forwarded_resolv_conf(tmp_path, resolv)
    except RuntimeError as error:
        pytest.skip(str(error))
    assert written.read_text().splitlines() == [
        f"nameserver {gateway}",
        "search example.internal",
        "options ndots:0",
    ]


# The real thing: pasta and bubblewrap.

UNAVAILABLE = sandbox.available() or sandbox.network_available()


@pytest.fixture
def base() -> Iterator[Path]:
    """Folders the sandbox's user can reach, with the two probes in the working folder."""
    top = Path(tempfile.mkdtemp(prefix="fairgpu-network-"))
    top.chmod(0o755)
    for name in ("env", "work", "artifacts", "checkpoint"):
        (top / name).mkdir()
        (top / name).chmod(0o755)
    (top / "work" / "ping.py").write_text(PINGER)
    (top / "work" / "dns.py").write_text(DNS_QUERY)
    try:
        yield top
    finally:
        shutil.rmtree(top)


def networked(base: Path, command: list[str], blocked: list[network.Network]) -> Sandbox:
    made = Sandbox(
        command=command,
        environment=ENVIRONMENT,
        env_dir=base / "env",
        work_dir=base / "work",
        artifacts_dir=base / "artifacts",
        checkpoint_dir=base / "checkpoint",
        network=True,
        blocked=blocked,
    )
    made.hand_over()
    return made


def run(made: Sandbox) -> subprocess.CompletedProcess[str]:
    process = made.start(subprocess.PIPE, subprocess.PIPE)
    out, err = process.communicate(timeout=RUN_TIMEOUT_S)
    return subprocess.CompletedProcess(process.args, process.returncode, out.decode(), err.decode())


def pings(base: Path, targets: list[str], blocked: list[network.Network]) -> dict[str, str]:
    done = run(networked(base, ["/usr/bin/python3", "ping.py", *targets], blocked))
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def reached(answer: str) -> bool:
    """Whether a Redis answered (PONG, or its refusal of a client it does not trust)."""
    return answer.startswith("answered: ") and any(
        word in answer for word in ("PONG", "DENIED", "NOAUTH")
    )


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no filtered network here: {UNAVAILABLE}")
class TestFilteredNetwork:
    """A networked script in the real pasta and bubblewrap."""

    def test_a_script_cannot_ping_redis_on_the_hosts_loopback(
        self, base: Path, redis_server: RedisServer
    ) -> None:
        target = f"127.0.0.1:{redis_server.port}"
        outside = subprocess.run(
            ["/usr/bin/python3", str(base / "work" / "ping.py"), target],
            capture_output=True,
            text=True,
            check=True,
        )
        assert reached(json.loads(outside.stdout)[target])  # it answers on the host
        seen = pings(base, [target], [])
        assert not reached(seen[target]), seen

    def test_a_script_cannot_ping_redis_on_the_hosts_own_addresses(
        self, base: Path, tmp_path: Path
    ) -> None:
        addresses = [net.network_address for net in network.host_addresses()]
        if not addresses:
            pytest.skip("this host has no address but its loopback")
        server = RedisServer(
            tmp_path / "redis", extra=("--bind", "0.0.0.0", "--protected-mode", "no")
        )
        server.start()
        try:
            targets = [f"{address}:{server.port}" for address in addresses]
            seen = pings(base, targets, [])
            assert not any(reached(answer) for answer in seen.values()), seen
        finally:
            server.stop()

    def test_refused_addresses_get_a_blackhole_route_the_script_cannot_remove(
        self, base: Path
    ) -> None:
        ip = shutil.which("ip")
        assert ip is not None
        blocked = [ipaddress.ip_network("10.213.7.9"), ipaddress.ip_network("10.214.0.0/16")]
        script = f"{ip} route; {ip} route del blackhole 10.213.7.9/32 && echo REMOVED"
        done = run(networked(base, ["/bin/sh", "-c", script], blocked))
        assert "blackhole 10.213.7.9" in done.stdout and "blackhole 10.214.0.0/16" in done.stdout
        assert "REMOVED" not in done.stdout
        seen = pings(base, ["10.213.7.9:6379", "10.214.3.4:6379"], blocked)
        assert set(seen.values()) == {"OSError"}, seen  # refused by the route, not a timeout

    def test_a_route_that_cannot_be_added_stops_the_run_before_it_starts(self, base: Path) -> None:
        marker = f"STARTED-{secrets.token_hex(4)}"
        # The default route exists already: adding a blackhole one fails.
        done = run(networked(base, ["/bin/echo", marker], [ipaddress.ip_network("0.0.0.0/0")]))
        assert marker not in done.stdout
        assert done.returncode == network.ROUTE_FAILED_CODE
        assert "could not refuse 0.0.0.0/0" in done.stderr

    def test_dns_still_works_inside(self, base: Path) -> None:
        outside = subprocess.run(
            ["/usr/bin/python3", str(base / "work" / "dns.py")], capture_output=True, text=True
        )
        if outside.stdout.strip() != "ANSWERED":
            pytest.skip(f"this host's own resolver does not answer: {outside.stderr.strip()}")
        made = networked(base, ["/usr/bin/python3", "dns.py"], list(network.ALWAYS_DENIED))
        if network.loopback_resolver():
            made = replace(made, dns_forward=network.forwarded_resolv_conf(base / "env"))
        done = run(made)
        assert done.stdout.strip() == "ANSWERED", done.stderr

    def test_a_stop_reaches_a_networked_script_and_nothing_outlives_its_worker(
        self, base: Path
    ) -> None:
        # SIGTERM reaches the script below pasta and bubblewrap (sandbox.signal_all).
        process = networked(base, ["/bin/sleep", "300"], []).start(
            subprocess.DEVNULL, subprocess.DEVNULL
        )
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(sandbox.members(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sandbox.signal_all(process.pid, signal.SIGTERM) >= 2
        process.wait(timeout=RUN_TIMEOUT_S)
        # A starter that dies (a job child killed at a stop's grace) takes the sandbox with it.
        marker = f"{300 + secrets.randbelow(10_000)}"
        starter = subprocess.Popen(
            [sys.executable, "-c", STARTER, str(base), marker], stdout=subprocess.PIPE, text=True
        )
        assert starter.stdout is not None
        assert starter.stdout.readline().strip() == "started"
        starter.kill()
        starter.wait()
        starter.stdout.close()
        while sleeping(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not sleeping(marker)


#: Starts a networked sandbox that sleeps, says so, and waits to be killed.
STARTER = """\
import sys, time
from pathlib import Path
from app.scripting.sandbox import Sandbox
top, seconds = Path(sys.argv[1]), sys.argv[2]
Sandbox(["/bin/sleep", seconds], {"PATH": "/usr/bin:/bin"}, top / "env", top / "work",
        top / "artifacts", top / "checkpoint", network=True).start(None, None)
print("started", flush=True)
time.sleep(300)
"""


def sleeping(seconds: str) -> bool:
    """Whether a `sleep <seconds>` process is still on this host."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == (
                b"/bin/sleep\0" + seconds.encode() + b"\0"
            ):
                return True
        except OSError:
            continue
    return False


def test_without_a_tun_device_the_network_is_unavailable_and_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if shutil.which("pasta") is None or shutil.which("ip") is None:
        pytest.skip("pasta or ip is not installed")
    monkeypatch.setattr(network, "TUN", tmp_path / "tun")
    assert "is missing" in str(sandbox.network_available())
    (tmp_path / "tun").write_text("")
    assert "not a character device" in str(sandbox.network_available())


@pytest.mark.integration
@pytest.mark.skipif(sandbox.available() is not None, reason="bubblewrap cannot run here")
def test_a_worker_that_cannot_make_the_filtered_network_refuses_script_jobs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from app.scripting.run import ScriptRunner

    monkeypatch.setattr(network, "TUN", tmp_path / "tun")
    settings = Settings(script_work_dir=tmp_path / "work", script_env_cache_dir=tmp_path / "envs")
    with pytest.raises(RuntimeError, match="cannot make their filtered network"):
        ScriptRunner(settings, lambda code, path: None)


#: In a mount namespace of its own whose /etc/resolv.conf names a loopback resolver, runs
#: dns.py in a networked sandbox that reaches it through pasta's DNS forward.
LOOPBACK_DNS = """\
import sys
from pathlib import Path
from app.scripting import network
from app.scripting.sandbox import Sandbox
top = Path(sys.argv[1])
made = Sandbox(["/usr/bin/python3", "dns.py"], {"PATH": "/usr/bin:/bin"}, top / "env",
               top / "work", top / "artifacts", top / "checkpoint", network=True,
               dns_forward=network.forwarded_resolv_conf(top / "env"))
print(made.start(None, None).wait())
"""


@pytest.mark.integration
@pytest.mark.timeout(60)
@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no filtered network here: {UNAVAILABLE}")
def test_a_resolver_on_the_hosts_loopback_is_reached_through_the_forward(base: Path) -> None:
    """As in a Docker container (127.0.0.11): the host's resolver on its loopback."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a mount namespace with its own resolv.conf)")
    upstream = next(
        line.split()[1]
        for line in Path("/etc/resolv.conf").read_text().splitlines()
        if line.split()[:1] == ["nameserver"]
    )
    relay_address = f"127.{secrets.randbelow(200) + 20}.{secrets.randbelow(250)}.53"
    relayed: list[bytes] = []
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind((relay_address, 53))
    listener.settimeout(0.2)
    stop = threading.Event()

    def relay() -> None:
        while not stop.is_set():
            try:
                query, peer = listener.recvfrom(4096)
            except OSError:
                continue
            relayed.append(query)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
                out.settimeout(5)
                out.sendto(query, (upstream, 53))
                with contextlib.suppress(OSError):
                    listener.sendto(out.recv(4096), peer)

    thread = threading.Thread(target=relay, daemon=True)
    thread.start()
    resolv = base / "host-resolv.conf"
    resolv.write_text(f"nameserver {relay_address}\n")
    mount = f'mount --bind {resolv} /etc/resolv.conf && exec "$@"'
    try:
        done = subprocess.run(
            [
                "unshare",
                "-m",
                "/bin/sh",
                "-c",
                mount,
                "sh",
                sys.executable,
                "-c",
                LOOPBACK_DNS,
                str(base),
            ],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            cwd=Path(__file__).resolve().parents[2],
        )
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert relayed, done.stderr  # the query went through the host's loopback resolver
    assert done.stdout.split()[-2:] == ["ANSWERED", "0"], (done.stdout, done.stderr)
