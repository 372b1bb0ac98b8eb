"""A build's network allowlist (app/scripting/network.py, `BuildNetwork`; app/scripting/builds.py,
`BuildWrap`): which hosts a build may reach, how they are pinned, and, with the real pasta and
bubblewrap, that a build reaches its index and nothing else."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.scripting import network, sandbox
from app.scripting.builds import BuildWrap, build_wrap, network_folder
from app.scripting.env_rules import allowed_indexes
from app.scripting.envs import BuildPlaces, EnvBuildError
from app.scripting.network import (
    PYPI_FILES,
    Blocklist,
    BuildNetwork,
    BuildNetworkError,
    allowlist_routes,
    build_hosts,
    build_network,
    pin,
    proxy_hosts,
)
from app.scripting.sandbox import NOBODY, Sandbox
from app.settings import Settings

RUN_TIMEOUT_S = 60.0

# Which hosts (no process started).


def test_the_default_index_allows_pypi_and_its_file_host_only() -> None:
    assert build_hosts(allowed_indexes({}), {}, "") == ["pypi.org", PYPI_FILES]


def test_the_operators_indexes_replace_pypi_and_local_folders_add_no_host() -> None:
    environ = {
        "UV_DEFAULT_INDEX": "https://mirror.internal/simple",
        "UV_INDEX": "team=https://pkgs.example.internal:8443/simple",
        "UV_FIND_LINKS": "/srv/wheels,https://links.internal/wheels/",
    }
    hosts = build_hosts(allowed_indexes(environ), environ, "")
    assert sorted(hosts) == ["links.internal", "mirror.internal", "pkgs.example.internal"]


def test_the_proxy_and_the_operators_extra_hosts_are_allowed(tmp_path: Path) -> None:
    environ = {
        "UV_INDEX_URL": "https://mirror.internal/simple",
        "https_proxy": "http://user:pw@proxy.internal:3128",
        "HTTP_PROXY": "proxy2.internal:8080",
        "ALL_PROXY": "",
    }
    assert proxy_hosts(environ) == ["proxy.internal", "proxy2.internal"]
    settings = Settings(script_build_hosts=" files.mirror.internal , ,cdn.internal")
    hosts = build_hosts(allowed_indexes(environ), environ, settings.script_build_hosts)
    assert hosts == [
        "mirror.internal",
        "proxy.internal",
        "proxy2.internal",
        "files.mirror.internal",
        "cdn.internal",
    ]


def test_uvs_config_file_names_the_index_hosts(tmp_path: Path) -> None:
    config = tmp_path / "uv.toml"
    config.write_text('[[index]]\nurl = "https://cfg.internal/simple"\ndefault = true\n')
    assert build_hosts(allowed_indexes({}, [config]), {}, "") == ["cfg.internal"]


def test_a_name_that_does_not_resolve_fails_closed_and_is_named() -> None:
    with pytest.raises(BuildNetworkError, match=r"'no-such-index\.invalid' does not resolve"):
        pin(["192.0.2.10", "no-such-index.invalid"], [])
    # Behind a proxy an index's name is the proxy's to resolve.
    pins = pin(["192.0.2.10", "no-such-index.invalid"], [], optional=["no-such-index.invalid"])
    assert pins == {"192.0.2.10": [ipaddress.ip_network("192.0.2.10")]}


def test_an_allowed_host_on_a_refused_address_is_refused_deny_wins() -> None:
    refused = [ipaddress.ip_network("10.20.0.0/16")]
    with pytest.raises(BuildNetworkError, match=r"10\.20\.3\.4, which the network filter refuses"):
        pin(["10.20.3.4"], refused)
    assert pin(["10.21.3.4", "fd00::7"], refused) == {
        "10.21.3.4": [ipaddress.ip_network("10.21.3.4")],
        "fd00::7": [ipaddress.ip_network("fd00::7")],
    }


def test_the_hosts_file_pins_each_name_and_no_resolver_is_named(tmp_path: Path) -> None:
    made = build_network(["192.0.2.10", "localhost"], [], tmp_path / "net")
    assert made.allowed == (ipaddress.ip_network("192.0.2.10"),)  # loopback needs no route
    lines = made.hosts_file.read_text().splitlines()
    assert "192.0.2.10 192.0.2.10" in lines and "127.0.0.1 localhost" in lines
    resolv = made.hosts_file.with_name("resolv.conf").read_text()
    assert "nameserver" not in resolv
    assert made.hosts_file.stat().st_mode & 0o777 == 0o644


def test_the_gateways_are_read_from_the_kernels_tables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "route").write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n"
        "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\n"
        "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\n"
    )
    zeros = "0" * 32
    (tmp_path / "ipv6_route").write_text(
        f"{zeros} 00 {zeros} 00 {zeros} ffffffff 00000001 00000000 00200200 lo\n"
        f"{zeros} 00 {zeros} 00 fd000000000000000000000000000001 00000400 0 0 00000003 eth1\n"
    )
    monkeypatch.setattr(network, "ROUTES", {4: tmp_path / "route", 6: tmp_path / "ipv6_route"})
    assert network.gateways() == ((4, "192.0.2.1", "eth0"), (6, "fd00::1", "eth1"))


def test_the_routes_blackhole_everything_but_each_allowed_address(tmp_path: Path) -> None:
    allowed = (ipaddress.ip_network("203.0.113.9"), ipaddress.ip_network("2001:db8::9"))
    made = BuildNetwork(allowed, ((4, "192.0.2.1", "eth0"),), tmp_path / "hosts")
    routes = [route for route, _ in allowlist_routes(made)]
    assert "-4 route flush proto kernel" in routes
    assert {
        "-4 route replace blackhole 0.0.0.0/1",
        "-4 route replace blackhole 128.0.0.0/1",
    } <= set(routes)
    assert "-4 route add 203.0.113.9/32 via 192.0.2.1 dev eth0 onlink" in routes
    if network.ROUTES[6].exists():
        assert "-6 route replace blackhole 8000::/1" in routes
    assert not any("2001:db8::9" in route for route in routes)  # no IPv6 gateway: refused whole


def test_a_build_sandbox_gets_the_pinned_hosts_file_and_no_resolver(tmp_path: Path) -> None:
    made = build_network(["192.0.2.10"], [], tmp_path / "net")
    box = Sandbox(["true"], {}, Path("/e"), Path("/w"), Path("/a"), Path("/c"), network=True)
    forwarded = replace(box, dns_forward=("192.0.2.1", tmp_path / "fwd"))
    argv = replace(forwarded, build=made).argv()
    assert "--dns-forward" not in argv  # a build's names are never sent to a resolver
    assert ["--ro-bind", str(made.hosts_file), "/etc/hosts"] == argv[
        argv.index(str(made.hosts_file)) - 1 : argv.index(str(made.hosts_file)) + 2
    ]
    assert str(tmp_path / "net" / "resolv.conf") in argv and str(tmp_path / "fwd") not in argv
    assert "blackhole 0.0.0.0/1" in " ".join(argv)
    assert "blackhole 0.0.0.0/1" not in " ".join(forwarded.argv())  # scripts keep the deny-list


def test_a_build_whose_host_does_not_resolve_fails_as_an_environment_error(
    tmp_path: Path,
) -> None:
    if shutil.which("ip") is None:
        pytest.skip("iproute2 is not installed")
    settings = Settings(script_build_hosts="no-such-files.invalid")
    wrap = build_wrap(NOBODY, [], Blocklist(settings, warn=lambda _: None))
    places = BuildPlaces(tmp_path / "p", tmp_path / "ws", Path("/usr"), Path("/usr/bin/true"))
    with pytest.raises(EnvBuildError, match=r"no-such-files\.invalid") as raised:
        replace(wrap, environ={"UV_INDEX_URL": "https://192.0.2.10/simple"})(["true"], places)
    assert "does not resolve" in raised.value.output


# The real thing: a build's sandbox in pasta and bubblewrap, through BuildWrap.

UNAVAILABLE = sandbox.available() or sandbox.network_available()
#: Inside the build's sandbox: what the pinned index name resolves to, whether a TLS handshake
#: with it completes, whether a name off the list resolves, and what a TCP connect to an address
#: off the list and a DNS query to the host's resolver get.
PROBE = """\
import json, os, socket, ssl, struct, sys
index, other_name, other_address, resolver = sys.argv[1:5]
seen = {"index": sorted({i[4][0] for i in socket.getaddrinfo(index, 443)})}
try:
    with socket.create_connection((index, 443), timeout=10) as raw:
        with ssl.create_default_context().wrap_socket(raw, server_hostname=index) as tls:
            seen["tls"] = tls.version()
except OSError as error:
    seen["tls"] = repr(error)
try:
    socket.getaddrinfo(other_name, 443)
    seen["other_name"] = "resolved"
except OSError as error:
    seen["other_name"] = type(error).__name__
try:
    socket.create_connection((other_address, 443), timeout=5).close()
    seen["other_address"] = "connected"
except OSError as error:
    seen["other_address"] = error.errno
name = b"\\x04pypi\\x03org\\x00"
query = struct.pack(">HHHHHH", 4242, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 1, 1)
dns = socket.socket(socket.AF_INET6 if ":" in resolver else socket.AF_INET, socket.SOCK_DGRAM)
dns.settimeout(3)
try:
    dns.sendto(query, (resolver, 53))
    seen["dns"] = "answered" if dns.recv(512)[:2] == (4242).to_bytes(2, "big") else "other"
except OSError as error:
    seen["dns"] = type(error).__name__
print(json.dumps(seen))
"""


def host_resolver() -> str | None:
    """The host's first nameserver, when it is not on the host's loopback."""
    try:
        lines = Path("/etc/resolv.conf").read_text().splitlines()
    except OSError:
        return None
    found = next((line.split()[1] for line in lines if line.split()[:1] == ["nameserver"]), None)
    return found if found and not ipaddress.ip_address(found).is_loopback else None


def outside(index: str, resolver: str) -> bool:
    """Whether, on the host, the index completes a TLS handshake and the resolver answers."""
    try:
        with socket.create_connection((index, 443), timeout=10) as raw:
            ssl.create_default_context().wrap_socket(raw, server_hostname=index).close()
        done = subprocess.run(
            ["/usr/bin/python3", "-c", PROBE, index, index, "192.0.2.1", resolver],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        return bool(json.loads(done.stdout)["dns"] == "answered")
    except (OSError, ValueError, subprocess.SubprocessError):
        return False


@pytest.fixture
def places() -> Iterator[BuildPlaces]:
    """A project and a workspace the sandbox's user can reach."""
    top = Path(tempfile.mkdtemp(prefix="fairgpu-build-net-"))
    top.chmod(0o755)
    for name in ("project", "workspace"):
        (top / name).mkdir(mode=0o755)
    try:
        yield BuildPlaces(top / "project", top / "workspace", Path("/usr"), Path("/usr/bin/true"))
    finally:
        shutil.rmtree(top)


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no filtered network here: {UNAVAILABLE}")
def test_a_build_reaches_its_index_and_nothing_else(places: BuildPlaces) -> None:
    index, resolver = "pypi.org", host_resolver()
    if resolver is None or not outside(index, resolver):
        pytest.skip("the index or this host's resolver does not answer here")
    # An address the host reaches (on this machine an egress proxy answers most of them).
    other_address = "198.18.0.7"
    other_name = os.uname().nodename  # in the host's own hosts file, not in the build's
    try:
        socket.getaddrinfo(other_name, 443)
    except OSError:
        pytest.skip(f"this host's own name {other_name!r} does not resolve")
    wrap: BuildWrap = build_wrap(NOBODY, [], Blocklist(Settings(), warn=lambda _: None))
    wrap = replace(wrap, environ={})  # uv's default index
    argv = wrap(
        ["/usr/bin/python3", "-c", PROBE, index, other_name, other_address, resolver], places
    )
    done = subprocess.run(
        argv,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    pinned = {str(net.network_address) for net in network.pin([index], [])[index]}
    assert set(seen["index"]) <= pinned | {f"::ffff:{a}" for a in pinned}
    assert str(seen["tls"]).startswith("TLS"), seen  # a real exchange with the index
    assert seen["other_name"] == "gaierror", seen
    assert seen["other_address"] == 22, seen  # EINVAL: the blackhole, not a timeout or a proxy
    assert seen["dns"] != "answered", seen
    assert (network_folder(places) / "hosts").is_file()
