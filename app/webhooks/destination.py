"""Where a webhook may go: an http(s) URL whose host resolves to public addresses only, unless
WEBHOOK_ALLOW_PRIVATE. The API checks it at submit (a 422) and the sender again before each
delivery, which then connects to the very addresses it checked: a name that resolves elsewhere
by then cannot point a delivery inside the network.

    parse(url)                   the URL, or RefusedError (scheme, host, port, credentials)
    blocked(address)             why an address is not a public one, or None
    await check(url, private)    a Destination: the URL and its checked addresses
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Any

import httpx

MAX_URL_LENGTH = 2048
#: How long a name may take to resolve: getaddrinfo of an unreachable DNS can hang for minutes.
RESOLVE_TIMEOUT_S = 5.0
DEFAULT_PORTS = {"http": 80, "https": 443}
#: IPv6 prefixes that carry an IPv4 address a router passes on: NAT64's well-known prefix.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
HOSTNAME = re.compile(rf"(?=.{{1,253}}$){LABEL}(?:\.{LABEL})*\.?")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class RefusedError(ValueError):
    """A destination a webhook may not go to: `reason` says why, in a sentence; `kind` names the
    rule, as the `type` of a 422's error."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


@dataclass(frozen=True)
class Destination:
    """A checked webhook URL and the addresses its host resolved to."""

    url: httpx.URL
    addresses: tuple[IPAddress, ...]

    def pinned(self) -> tuple[httpx.URL, dict[str, str], dict[str, Any]]:
        """The URL with its host replaced by the first checked address, the Host header and the
        TLS server name of the original: the request goes where the check said, and the
        certificate is still verified against the name."""
        host = self.url.raw_host.decode("ascii")
        netloc = self.url.netloc.decode("ascii")
        url = self.url.copy_with(host=str(self.addresses[0]))
        return url, {"Host": netloc}, {"sni_hostname": host}


def parse(url: str) -> httpx.URL:
    """url as an absolute http(s) URL with a host name or address, a valid port and no
    credentials; RefusedError otherwise."""
    if len(url) > MAX_URL_LENGTH:
        raise _bad_url(f"a webhook URL is at most {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise _bad_url("a webhook URL has no spaces or control characters")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise _bad_url(f"not a URL: {exc}") from None
    if parsed.scheme not in DEFAULT_PORTS:
        raise _bad_url("a webhook URL starts with http:// or https://")
    if parsed.userinfo:
        raise _bad_url("a webhook URL carries no credentials: the signature says who sent it")
    if not _valid_host(parsed.raw_host.decode("ascii")):
        raise _bad_url("a webhook URL names a host: a DNS name or an IP address")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise _bad_url("a webhook URL's port is 1 to 65535")
    return parsed


def _valid_host(host: str) -> bool:
    if "%" in host:  # an IPv6 zone index: an interface of this machine, no public address
        return False
    return _literal(host) is not None or HOSTNAME.fullmatch(host.lower()) is not None


def _bad_url(reason: str) -> RefusedError:
    return RefusedError(reason, "webhook_url")


def _literal(host: str) -> IPAddress | None:
    """host as an IP address, if it is one."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def blocked(address: IPAddress) -> str | None:
    """Why address is no public one ('loopback', 'private', ...), or None if it is. An IPv6
    address that carries an IPv4 one (mapped, 6to4, NAT64) is judged by that IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = _carried(address)
        if inner is not None:
            return blocked(inner)
    flags = (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (address.is_private, "private"),
        (address.is_reserved, "reserved"),
        (not address.is_global, "non-public"),
    )
    return next((name for flag, name in flags if flag), None)


def _carried(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


async def resolve(host: str, port: int) -> tuple[IPAddress, ...]:
    """The addresses host resolves to (getaddrinfo, in a thread: it blocks); RefusedError when it
    resolves to none, or not within RESOLVE_TIMEOUT_S."""
    literal = _literal(host)
    if literal is not None:
        return (literal,)
    loop = asyncio.get_running_loop()
    lookup = loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    try:
        found = await asyncio.wait_for(lookup, RESOLVE_TIMEOUT_S)
    except (OSError, TimeoutError, UnicodeError):
        raise RefusedError(f"the webhook's host {host} does not resolve", "webhook_host") from None
    addresses = [_literal(str(info[4][0])) for info in found]
    unique = tuple(dict.fromkeys(a for a in addresses if a is not None))
    if not unique:
        raise RefusedError(f"the webhook's host {host} does not resolve", "webhook_host")
    return unique


async def check(url: str, allow_private: bool) -> Destination:
    """The destination of a webhook URL, every address of its host public unless allow_private;
    RefusedError otherwise."""
    parsed = parse(url)
    host = parsed.raw_host.decode("ascii")
    addresses = await resolve(host, parsed.port or DEFAULT_PORTS[parsed.scheme])
    if not allow_private:
        for address in addresses:
            why = blocked(address)
            if why is not None:
                raise RefusedError(
                    f"the webhook's host {host} is at {address}, a {why} address: webhooks go "
                    "to public addresses only",
                    "webhook_address",
                )
    return Destination(parsed, addresses)
