"""The filtered network of a script run with SCRIPT_NETWORK on, and of every environment build.

bubblewrap cannot filter traffic, so a networked sandbox runs inside `pasta` (Debian's `passt`):
a network namespace of its own, joined to the outside by pasta's user-space TCP and UDP, in
which bubblewrap's `--share-net` then keeps the script. `--no-map-gw` keeps the gateway's
address from leading to the host's loopback, and `-T none -U none` keeps the namespace's own
loopback ports from being forwarded to the host's: 127.0.0.1 inside is the namespace's own.
Before bubblewrap starts, a blackhole route is added in the namespace for each refused address:
the host's own interface addresses, the service's own hosts (Redis, the Sentinels, the broker,
the SQL database, the S3 endpoint), the link-local range (a cloud's metadata address) and the
operator's SCRIPT_NETWORK_DENY. bubblewrap's own user namespace and dropped capabilities keep
the script from changing those routes. A route that cannot be added stops the run before it
starts. docs/security.md, "Script jobs' sandbox", says what this leaves open.

A build's network is an allowlist on top (`BuildNetwork`): the hosts of the operator's indexes,
PyPI's file host with PyPI, the proxy's and SCRIPT_BUILD_HOSTS, resolved at each build. Its
namespace loses its on-link routes, gets blackholes more specific than the default route for the
rest of IPv4 and IPv6, and a route through the gateway for each allowed address alone; a hosts
file pins the names to those addresses, and no resolver is reachable.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from app.settings import Settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

log = logging.getLogger(__name__)

#: Always refused: IPv4 link-local (a cloud's metadata address, 169.254.169.254, and the node
#: credentials it hands out) and the IPv6 metadata address some clouds use.
ALWAYS_DENIED = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fd00:ec2::254"))
#: The device pasta makes its namespace's interface with.
TUN = Path("/dev/net/tun")
#: The host's resolver settings.
RESOLV_CONF = Path("/etc/resolv.conf")
#: How long resolved addresses are used before the names are resolved again.
REFRESH_S = 60.0
#: How long the check of `available` may take: pasta starts in milliseconds.
PROBE_TIMEOUT_S = 10.0
#: A documentation address (TEST-NET-2) the probe refuses, to show routes can be added.
PROBE_ADDRESS = ipaddress.ip_network("198.51.100.1")
#: Said (on stderr, so in the job's log) when a route cannot be added; the run then never starts.
ROUTE_FAILED = "fairgpu: the script network filter could not refuse {}: the run is not started"
#: Exit code of the filter's shell when a route failed.
ROUTE_FAILED_CODE = 125
#: uv's default index, and the host PyPI serves its files from.
PYPI, PYPI_FILES = "pypi.org", "files.pythonhosted.org"
#: The proxy variables uv reads, each also in lower case.
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
#: Blackholes that cover each family whole and are more specific than its default route.
HALVES = {4: ("0.0.0.0/1", "128.0.0.0/1"), 6: ("::/1", "8000::/1")}
#: The kernel's routing tables, where the host's default gateways are read.
ROUTES = {4: Path("/proc/net/route"), 6: Path("/proc/net/ipv6_route")}


class BuildNetworkError(RuntimeError):
    """A build's allowlist cannot be made: a name that does not resolve, or a refused address."""


@dataclass(frozen=True)
class BuildNetwork:
    """A build's allowlist: the only addresses routed out of its namespace, each through its
    family's default gateway, and the hosts file pinning its names to them."""

    allowed: tuple[Network, ...]
    gateways: tuple[tuple[int, str, str], ...]  # (family, gateway, interface)
    hosts_file: Path


def pasta_prefix(
    blocked: Iterable[Network], dns_forward: str | None = None, build: BuildNetwork | None = None
) -> list[str]:
    """The command line that runs the rest of the argv in pasta's namespace, after a blackhole
    route for each of `blocked` is added there (`exec "$@"`: no shell stays behind). With
    `dns_forward`, pasta passes DNS queries sent there to the host's own resolver. With
    `build`, only its allowed addresses are routed out (`allowlist_routes`)."""
    ip = _tool("ip")
    routes = [(f"route add blackhole {net}", str(net)) for net in _distinct(blocked)]
    routes += allowlist_routes(build) if build is not None else []
    steps = [
        f"{ip} {route} || {{ echo '{ROUTE_FAILED.format(what)}' >&2; exit {ROUTE_FAILED_CODE}; }}"
        for route, what in routes
    ]
    script = "; ".join([*steps, 'exec "$@"'])
    pasta = [_tool("pasta"), "--config-net", "--no-map-gw", "-T", "none", "-U", "none"]
    pasta += ["--dns-forward", dns_forward] if dns_forward else []
    # -p: bash (where it is /bin/sh) then reads neither BASH_ENV nor ENV, variables of the
    # run's environment, in this shell that may still change the routes.
    return [*pasta, "-q", "-f", "--", "/bin/sh", "-p", "-c", script, "sh"]


def allowlist_routes(build: BuildNetwork) -> list[tuple[str, str]]:
    """The `ip` arguments that leave a namespace only `build.allowed`, each with what it
    refuses: the on-link routes go (the local network would stay reachable), each family gets
    two blackholes more specific than its default route, and each allowed address a route of
    its own through the gateway. A family without a gateway (IPv6 on a host without it) is
    blackholed whole."""
    routes: list[tuple[str, str]] = []
    for family in (4, 6):
        if family == 6 and not ROUTES[6].exists():
            continue  # no IPv6 in this kernel: nothing to refuse
        routes.append((f"-{family} route flush proto kernel", f"the on-link IPv{family} routes"))
        routes += [(f"-{family} route replace blackhole {half}", half) for half in HALVES[family]]
        gateway = next(((g, i) for f, g, i in build.gateways if f == family), None)
        for net in build.allowed:
            if net.version == family and gateway is not None:
                step = f"-{family} route add {net} via {gateway[0]} dev {gateway[1]} onlink"
                routes.append((step, f"all but {net}"))
    return routes


def build_hosts(indexes: Iterable[str], environ: Mapping[str, str], extra: str) -> list[str]:
    """The hosts a build may reach: those of `indexes` (URLs; local folders have none), PyPI's
    file host when PyPI is among them, the proxies' hosts and `extra` (SCRIPT_BUILD_HOSTS,
    comma-separated)."""
    hosts = [_url_host(index) for index in indexes]
    if PYPI in hosts:
        hosts.append(PYPI_FILES)
    hosts += proxy_hosts(environ)
    hosts += [name.strip() for name in extra.split(",")]
    return list(dict.fromkeys(host for host in hosts if host))


def proxy_hosts(environ: Mapping[str, str]) -> list[str]:
    """The hosts of the proxy variables that are set."""
    found = []
    for variable in (name for upper in PROXY_VARIABLES for name in (upper, upper.lower())):
        value = environ.get(variable, "").strip()
        found.append(_url_host(value if "://" in value else f"http://{value}") if value else "")
    return [host for host in found if host]


def pin(
    hosts: Sequence[str], refused: Sequence[Network], optional: Iterable[str] = ()
) -> dict[str, list[Network]]:
    """Each host's addresses now (a literal address as it is). A name that does not resolve
    fails the build (`BuildNetworkError`, naming it) unless `optional` (an index reached
    through a proxy, which resolves it); so does an address within `refused`: deny wins."""
    pins: dict[str, list[Network]] = {}
    for host in hosts:
        try:
            addresses = _addresses(host)
        except (OSError, UnicodeError) as error:
            if host in optional:
                continue
            raise BuildNetworkError(
                f"the build network's host {host!r} does not resolve on this worker "
                f"({error}): no build can run until it does"
            ) from None
        found = _distinct(ipaddress.ip_network(a) for a in addresses if not a.is_loopback)
        for net in found:
            if any(net.version == r.version and net.subnet_of(r) for r in refused):  # type: ignore[arg-type]
                raise BuildNetworkError(
                    f"the build network's host {host!r} resolves to {net.network_address}, "
                    "which the network filter refuses (deny wins): no build can reach it"
                )
        pins[host] = found
    return pins


def gateways() -> tuple[tuple[int, str, str], ...]:
    """This host's default gateways, (family, address, interface): pasta's namespace copies
    them. Read from the kernel's tables (the IPv4 one in little-endian hex)."""
    found: list[tuple[int, str, str]] = []
    for line in _lines(ROUTES[4])[1:]:
        words = line.split()
        if len(words) > 7 and words[1] == words[7] == "00000000" and int(words[3], 16) & 2:
            gateway = ipaddress.IPv4Address(int.from_bytes(bytes.fromhex(words[2]), "little"))
            found.append((4, str(gateway), words[0]))
            break
    for line in _lines(ROUTES[6]):
        words = line.split()
        if len(words) == 10 and words[1] == "00" and words[0] == "0" * 32 and words[9] != "lo":
            gateway6 = ipaddress.IPv6Address(bytes.fromhex(words[4]))
            if not gateway6.is_unspecified:
                found.append((6, str(gateway6), words[9]))
                break
    return tuple(found)


def build_network(
    hosts: Sequence[str], refused: Sequence[Network], folder: Path, optional: Iterable[str] = ()
) -> BuildNetwork:
    """A build's allowlist for `hosts`, resolved now, its hosts file written as `folder`/hosts
    beside an empty resolv.conf (readable by all: the sandbox's user binds them)."""
    pins = pin(hosts, refused, optional)
    lines = ["127.0.0.1 localhost", "::1 localhost"]
    lines += [f"{net.network_address} {name}" for name, nets in pins.items() for net in nets]
    folder.mkdir(parents=True, exist_ok=True)
    hosts_file = folder / "hosts"
    hosts_file.write_text("\n".join([*lines, ""]))
    # No nameserver: glibc then asks the namespace's own loopback, where nothing answers.
    (folder / "resolv.conf").write_text("# a build's names are pinned in /etc/hosts\n")
    for written in (hosts_file, folder / "resolv.conf"):
        written.chmod(0o644)
    allowed = _distinct(net for nets in pins.values() for net in nets)
    return BuildNetwork(tuple(allowed), gateways(), hosts_file)


def service_hosts(settings: Settings) -> list[str]:
    """The hosts of every service the worker's settings name: Redis (and the Sentinels), the
    broker, the SQL database, the S3 endpoint and the API's own listening address."""
    urls = [settings.redis_url, settings.database_url, settings.artifacts_endpoint_url]
    # A Celery broker may be several URLs, `;`-separated (failover).
    urls += (settings.celery_broker_url or "").split(";")
    hosts = [host for host, _ in settings.sentinels]
    for url in urls:
        if url and "://" in url:
            try:
                found = urlsplit(url.strip()).hostname
            except ValueError:
                continue
            if found:
                hosts.append(found)
    hosts.append(settings.host)
    return list(dict.fromkeys(hosts))


def resolve(hosts: Iterable[str], warn: Callable[[str], None] = log.warning) -> list[Network]:
    """The addresses of `hosts`, each alone (/32 or /128): literal addresses as they are, names
    as they resolve now. Loopback and wildcard addresses are left out (the namespace has its
    own loopback); a name that does not resolve is left out with a warning."""
    found: list[Network] = []
    for host in hosts:
        try:
            addresses = _addresses(host)
        except (OSError, UnicodeError) as error:
            warn(f"script network filter: {host!r} does not resolve ({error}): not refused")
            continue
        for address in addresses:
            if not (address.is_loopback or address.is_unspecified):
                found.append(ipaddress.ip_network(address))
    return _distinct(found)


def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """A literal address as it is, a name as it resolves now (OSError when it does not)."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def host_addresses() -> list[Network]:
    """This host's own interface addresses, loopback left out: pasta reaches the host through
    them (one of them is copied into the namespace, where it is the namespace's own)."""
    try:
        done = subprocess.run(
            [_tool("ip"), "-j", "addr", "show"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={},
        )
        interfaces = json.loads(done.stdout or "[]")
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        raise RuntimeError(f"cannot list this host's addresses: {error}") from error
    found: list[Network] = []
    for interface in interfaces:
        for entry in interface.get("addr_info", []):
            address = ipaddress.ip_address(str(entry.get("local", "")).split("%")[0])
            if not address.is_loopback and not address.is_link_local:
                found.append(ipaddress.ip_network(address))
    return found


class Blocklist:
    """What a worker's filtered network refuses: resolved again every REFRESH_S, so that a
    service that moves is still refused. Thread-safe; one per runner."""

    def __init__(self, settings: Settings, warn: Callable[[str], None] = log.warning) -> None:
        self.settings, self.warn = settings, warn
        self._lock = threading.Lock()
        self._found: tuple[Network, ...] = ()
        self._at = -REFRESH_S

    def networks(self) -> tuple[Network, ...]:
        """Every refused network, now."""
        with self._lock:
            if time.monotonic() - self._at >= REFRESH_S:
                named = resolve(service_hosts(self.settings), self.warn)
                denied = [*ALWAYS_DENIED, *self.settings.script_network_deny]
                self._found = tuple(_distinct([*denied, *host_addresses(), *named]))
                self._at = time.monotonic()
            return self._found


def loopback_resolver(resolv_conf: Path = RESOLV_CONF) -> bool:
    """Whether the host's resolver is on its loopback (Docker's 127.0.0.11, systemd-resolved's
    127.0.0.53): out of the namespace's reach, so DNS must go through pasta's forward."""
    try:
        lines = resolv_conf.read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                if ipaddress.ip_address(words[1].split("%")[0]).is_loopback:
                    return True
            except ValueError:
                continue
    return False


def forwarded_resolv_conf(folder: Path, resolv_conf: Path = RESOLV_CONF) -> tuple[str, Path]:
    """Where a namespace sends DNS when the host's resolver is on its loopback: the default
    gateway's address (pasta catches queries to it, --dns-forward), and a resolv.conf in
    `folder` naming it, with the host's search and options lines."""
    done = subprocess.run(
        [_tool("ip"), "-j", "-4", "route", "show", "default"],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        env={},
    )
    routes = json.loads(done.stdout or "[]")
    gateway = next((str(r["gateway"]) for r in routes if r.get("gateway")), None)
    if gateway is None:
        raise RuntimeError("no IPv4 default route: scripts' DNS cannot be forwarded")
    kept = [
        line
        for line in resolv_conf.read_text().splitlines()
        if line.split()[:1] in (["search"], ["domain"], ["options"])
    ]
    written = folder / "resolv.conf"
    written.write_text("\n".join([f"nameserver {gateway}", *kept, ""]))
    written.chmod(0o644)
    return gateway, written


def available(drop: Sequence[str]) -> str | None:
    """None when a filtered network can be made here by the user that `drop` (the sandbox's
    own prefix: setpriv to its user, or nothing) runs as; otherwise why not, in words."""
    for name in ("pasta", "ip"):
        if shutil.which(name) is None:
            package = "passt" if name == "pasta" else "iproute2"
            return f"{name} is not installed (Debian's package {package})"
    try:
        mode = os.stat(TUN).st_mode
    except OSError:
        return f"{TUN} is missing (a container needs the device: docs/security.md)"
    if not stat.S_ISCHR(mode):
        return f"{TUN} is not a character device"
    if drop and mode & 0o006 != 0o006:
        return f"{TUN} is not usable by the sandbox's user: make it mode 0666"
    probe = [*drop, *pasta_prefix([PROBE_ADDRESS]), "/bin/true"]
    try:
        done = subprocess.run(
            probe, env={}, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"pasta did not start: {error}"
    if done.returncode != 0:
        reason = done.stderr.strip() or f"exit code {done.returncode}"
        return f"pasta cannot make a filtered network here: {reason}"
    return None


def _url_host(url: str) -> str:
    """A URL's host name, "" for none (a local folder) or a malformed URL."""
    try:
        return urlsplit(url.strip()).hostname or ""
    except ValueError:
        return ""


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def _distinct(networks: Iterable[Network]) -> list[Network]:
    return list(dict.fromkeys(networks))


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed: a script's network needs it")
    return found
