"""Where a webhook may go: an http(s) URL whose host resolves to public addresses only, unless
WEBHOOK_ALLOW_PRIVATE. The API checks what it can without DNS at submit (a 422): the URL's form,
and a host given as an address or a localhost name. The sender resolves the name before each
delivery, checks every address, and connects to the very addresses it checked: a name that
resolves elsewhere by then cannot point a delivery inside the network.

Names are resolved at delivery only, never at submit: otherwise the API would be a DNS client of
whatever names a client (or a fuzzer) makes up, held up to RESOLVE_TIMEOUT_S by each, and its
422s ("does not resolve", "a private address") an oracle of the internal DNS.

    parse(url)                   the URL, or RefusedError (scheme, host, port, credentials)
    blocked(address)             why an address is not a public one, or None
    at_submit(url, private)      the URL, or RefusedError: its form, and a literal host's address
    await check(url, private)    a Destination: the URL and its checked addresses (at delivery)
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
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _table(*rows: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(network), name) for network, name in rows)


#: The blocks of IANA's IPv4 and IPv6 Special-Purpose Address Registries whose "Globally
#: Reachable" is False (or N/A: deprecated), and multicast; the first that holds an address
#: names it. Our own table, not ipaddress's `is_global`, whose answer changes between Python
#: versions. A block is refused whole: the few addresses inside one that a narrower entry marks
#: reachable (192.0.0.9 and .10, 2001:1::1 to ::3: anycast of PCP, TURN and DNS-SD, which the
#: nearest server answers, maybe one inside the network; AMT, AS112, ORCHIDv2, DETs in 2001::/23)
#: are no webhook's receiver.
SPECIAL = _table(
    ("0.0.0.0/32", "unspecified"),
    ("0.0.0.0/8", "this-network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared (carrier-grade NAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "special-purpose (IETF protocol assignments)"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "deprecated (6to4 relay anycast)"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "deprecated (IPv4-compatible)"),
    ("64:ff9b:1::/48", "local-use (NAT64)"),
    ("100::/64", "discard-only"),
    ("2001::/32", "Teredo"),
    ("2001:2::/48", "benchmarking"),
    ("2001::/23", "special-purpose (IETF protocol assignments)"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment-routing (SRv6)"),
    ("fc00::/7", "private (unique-local)"),
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
)
#: IANA's IPv6 global unicast space: everything outside it is reserved, or named above.
GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
#: IPv6 blocks that carry an IPv4 address, and where it sits (the shift of its 32 bits): such an
#: address reaches that IPv4 one (through the host's own stack, a NAT64 gateway or a 6to4
#: relay), so it is judged by it.
CARRIERS = (
    (ipaddress.IPv6Network("::ffff:0:0/96"), 0),  # IPv4-mapped
    (ipaddress.IPv6Network("64:ff9b::/96"), 0),  # NAT64's well-known prefix
    (ipaddress.IPv6Network("2002::/16"), 80),  # 6to4
)
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
        # httpx quotes the part it refused after a colon; a 422 never says the input back
        raise _bad_url(f"not a URL: {str(exc).split(':', 1)[0]}") from None
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


def at_submit(url: str, allow_private: bool) -> httpx.URL:
    """What the API checks of a webhook URL, without resolving its host: parse(), and, unless
    allow_private, that a host given as an address, or a name that is loopback by definition
    (localhost, *.localhost: RFC 6761), is a public one. The reasons name no part of the URL: a
    422 never says a submitted value back."""
    parsed = parse(url)
    host = parsed.raw_host.decode("ascii").lower().rstrip(".")
    literal = _literal(host)
    if allow_private:
        return parsed
    if host == "localhost" or host.endswith(".localhost"):
        why: str | None = "loopback"
    else:
        why = None if literal is None else blocked(literal)
    if why is not None:
        raise RefusedError(
            f"the webhook's host is a {why} address: webhooks go to public addresses only",
            "webhook_address",
        )
    return parsed


def blocked(address: IPAddress) -> str | None:
    """Why address is no public one ('loopback', 'private', ...: SPECIAL's name), or None if it
    is. An IPv6 address that carries an IPv4 one (mapped, NAT64, 6to4) is judged by that IPv4
    address; any other outside 2000::/3 is 'reserved'."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = _carried(address)
        if inner is not None:
            return blocked(inner)
    for network, name in SPECIAL:
        if address in network:
            return name
    if isinstance(address, ipaddress.IPv6Address) and address not in GLOBAL_UNICAST:
        return "reserved"
    return None


def _carried(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    for network, shift in CARRIERS:
        if address in network:
            return ipaddress.IPv4Address((int(address) >> shift) & 0xFFFFFFFF)
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
