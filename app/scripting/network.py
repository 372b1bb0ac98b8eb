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
from collections.abc import Callable, Iterable, Sequence
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


def pasta_prefix(blocked: Iterable[Network], dns_forward: str | None = None) -> list[str]:
    """The command line that runs the rest of the argv in pasta's namespace, after a blackhole
    route for each of `blocked` is added there (`exec "$@"`: no shell stays behind). With
    `dns_forward`, pasta passes DNS queries sent there to the host's own resolver."""
    ip = _tool("ip")
    steps = [
        f"{ip} route add blackhole {net} || {{ echo '{ROUTE_FAILED.format(net)}' >&2; "
        f"exit {ROUTE_FAILED_CODE}; }}"
        for net in _distinct(blocked)
    ]
    script = "; ".join([*steps, 'exec "$@"'])
    pasta = [_tool("pasta"), "--config-net", "--no-map-gw", "-T", "none", "-U", "none"]
    pasta += ["--dns-forward", dns_forward] if dns_forward else []
    # -p: bash (where it is /bin/sh) then reads neither BASH_ENV nor ENV, variables of the
    # run's environment, in this shell that may still change the routes.
    return [*pasta, "-q", "-f", "--", "/bin/sh", "-p", "-c", script, "sh"]


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
            addresses = [ipaddress.ip_address(host.strip("[]"))]
        except ValueError:
            try:
                infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            except (OSError, UnicodeError) as error:
                warn(f"script network filter: {host!r} does not resolve ({error}): not refused")
                continue
            addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        for address in addresses:
            if not (address.is_loopback or address.is_unspecified):
                found.append(ipaddress.ip_network(address))
    return _distinct(found)


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


def _distinct(networks: Iterable[Network]) -> list[Network]:
    return list(dict.fromkeys(networks))


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed: a script's network needs it")
    return found
