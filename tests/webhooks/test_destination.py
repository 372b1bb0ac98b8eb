"""Which URLs a webhook may go to: http(s) with a host, no credentials, and a host whose every
address is public unless private ones are allowed; and a delivery connects to the address that
was checked, under the original name."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from app.webhooks.destination import RefusedError, at_submit, blocked, check, parse

PUBLIC = "93.184.215.14"


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # a cloud's metadata service
        "100.64.0.1",  # carrier-grade NAT
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:10.0.0.1",
        "2002:a00:1::",  # 6to4 of 10.0.0.1
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    ],
)
def test_a_non_public_address_is_blocked(address: str) -> None:
    assert blocked(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", [PUBLIC, "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_a_public_address_is_not(address: str) -> None:
    assert blocked(ipaddress.ip_address(address)) is None


#: IANA's special-purpose blocks that are not globally reachable, as their first and last
#: addresses (written out here, not derived from the code's table), and the public addresses
#: just outside each.
NOT_GLOBAL = [
    ("0.0.0.0", "0.255.255.255", ["1.0.0.0"]),
    ("10.0.0.0", "10.255.255.255", ["9.255.255.255", "11.0.0.0"]),
    ("100.64.0.0", "100.127.255.255", ["100.63.255.255", "100.128.0.0"]),
    ("127.0.0.0", "127.255.255.255", ["126.255.255.255", "128.0.0.0"]),
    ("169.254.0.0", "169.254.255.255", ["169.253.255.255", "169.255.0.0"]),
    ("172.16.0.0", "172.31.255.255", ["172.15.255.255", "172.32.0.0"]),
    ("192.0.0.0", "192.0.0.255", ["191.255.255.255", "192.0.1.0"]),
    ("192.0.2.0", "192.0.2.255", ["192.0.1.255", "192.0.3.0"]),
    ("192.88.99.0", "192.88.99.255", ["192.88.98.255", "192.88.100.0"]),
    ("192.168.0.0", "192.168.255.255", ["192.167.255.255", "192.169.0.0"]),
    ("198.18.0.0", "198.19.255.255", ["198.17.255.255", "198.20.0.0"]),
    ("198.51.100.0", "198.51.100.255", ["198.51.99.255", "198.51.101.0"]),
    ("203.0.113.0", "203.0.113.255", ["203.0.112.255", "203.0.114.0"]),
    ("224.0.0.0", "255.255.255.255", ["223.255.255.255"]),  # multicast, reserved, broadcast
    # IPv6: all but 2000::/3 (global unicast), and within it 2001::/23, 2001:db8::/32, 3fff::/20
    ("::", "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ["2000::"]),
    ("4000::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ["3ffe:ffff:ffff:ffff::"]),
    ("2001::", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", ["2000:ffff::", "2001:200::"]),
    ("2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", ["2001:db7:ffff::", "2001:db9::"]),
    ("3fff::", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", ["3ffe:ffff::", "3fff:1000::"]),
]


@pytest.mark.parametrize(("first", "last", "outside"), NOT_GLOBAL, ids=[r[0] for r in NOT_GLOBAL])
def test_each_special_purpose_block_is_refused_from_its_first_address_to_its_last(
    first: str, last: str, outside: list[str]
) -> None:
    start, end = ipaddress.ip_address(first), ipaddress.ip_address(last)
    middle = ipaddress.ip_address((int(start) + int(end)) // 2)
    for address in (start, middle, end):
        assert blocked(address) is not None, address
    for address in map(ipaddress.ip_address, outside):
        assert blocked(address) is None, address


@pytest.mark.parametrize(
    "address",
    [
        "192.0.0.8",  # IPv4 dummy address
        "192.0.0.9",  # PCP anycast: the nearest server answers, maybe one inside the network
        "192.88.99.1",  # 6to4 relay anycast, deprecated
        "192.0.0.10",  # TURN anycast
        "192.0.0.170",  # NAT64 discovery
        "2001::1",  # Teredo
        "2001:1::1",  # PCP anycast
        "2001:3::1",  # AMT
        "2001:20::1",  # ORCHIDv2
        "64:ff9b:1::1",  # NAT64, local use
        "100::1",  # discard-only
        "5f00::1",  # SRv6 segment ids
    ],
)
def test_an_address_inside_a_block_that_is_not_globally_reachable_is_refused(
    address: str,
) -> None:
    assert blocked(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("::ffff:192.0.0.9", False),  # IPv4-mapped
        ("::ffff:192.88.99.1", False),
        ("::ffff:100.64.0.1", False),
        ("::ffff:8.8.8.8", True),
        ("::8.8.8.8", False),  # IPv4-compatible: deprecated, refused whatever it carries
        ("::10.0.0.1", False),
        ("::127.0.0.1", False),
        ("64:ff9b::c000:9", False),  # NAT64 of 192.0.0.9
        ("64:ff9b::808:808", True),  # NAT64 of 8.8.8.8
        ("2002:c000:8::", False),  # 6to4 of 192.0.0.8
        ("2002:808:808::", True),  # 6to4 of 8.8.8.8
    ],
)
def test_an_ipv6_address_that_carries_an_ipv4_one_is_judged_by_it(
    address: str, public: bool
) -> None:
    assert (blocked(ipaddress.ip_address(address)) is None) is public


@pytest.mark.parametrize(
    "address",
    ["192.31.196.1", "192.52.193.1", "192.175.48.1", "2620:4f:8000::1"],
)
def test_a_special_purpose_block_that_is_globally_reachable_is_allowed(address: str) -> None:
    """AS112 and AMT have blocks of their own that the registries mark globally reachable."""
    assert blocked(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/hook",
        "example.com/hook",
        "//example.com/hook",
        "http:///hook",
        "http://user:secret@example.com/hook",
        "http://exa mple.com/hook",
        "http://example.com/ho\nok",
        "http://example.com:99999/hook",
        "http://exa_mple.com/hook",
        "http://[fe80::1%25eth0]/hook",
        "https://" + "a" * 2048 + ".com/",
    ],
)
def test_a_url_that_is_not_an_http_one_with_a_host_is_refused(url: str) -> None:
    with pytest.raises(RefusedError) as refused:
        parse(url)
    assert refused.value.kind == "webhook_url"


def test_an_http_or_https_url_with_a_name_or_an_address_parses() -> None:
    for url in ("https://hooks.example.com/x?y=1", f"http://{PUBLIC}:8080/", "https://[::1]/"):
        assert str(parse(url)) == url


def test_every_address_of_the_host_must_be_public_unless_private_ones_are_allowed() -> None:
    with pytest.raises(RefusedError) as refused:
        asyncio.run(check("http://localhost:8080/hook", allow_private=False))
    assert refused.value.kind == "webhook_address"
    assert "loopback" in refused.value.reason

    allowed = asyncio.run(check("http://localhost:8080/hook", allow_private=True))
    assert all(a.is_loopback for a in allowed.addresses)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://LOCALHOST./hook", "loopback"),
        ("http://a.b.localhost/hook", "loopback"),
        ("http://[::ffff:10.1.2.3]/hook", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
    ],
)
def test_at_submit_an_address_that_is_not_public_is_refused_without_naming_it(
    url: str, why: str
) -> None:
    with pytest.raises(RefusedError) as refused:
        at_submit(url, allow_private=False)
    assert refused.value.kind == "webhook_address"
    assert refused.value.reason == (
        f"the webhook's host is a {why} address: webhooks go to public addresses only"
    )
    assert at_submit(url, allow_private=True) == parse(url)


def test_at_submit_a_name_is_not_resolved() -> None:
    # check() refuses it (below): at_submit never asks DNS, so it cannot tell
    assert str(at_submit("https://no-such-host.invalid/hook", allow_private=False))


def test_a_host_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(RefusedError) as refused:
        asyncio.run(check("https://no-such-host.invalid/hook", allow_private=True))
    assert refused.value.kind == "webhook_host"


@pytest.mark.parametrize(
    ("url", "pinned", "host"),
    [
        (f"https://{PUBLIC}/hook?a=1", f"https://{PUBLIC}/hook?a=1", PUBLIC),
        ("https://[2606:4700::1111]:8443/h", "https://[2606:4700::1111]:8443/h", "2606:4700::1111"),
    ],
)
def test_a_delivery_goes_to_the_checked_address_under_the_original_name(
    url: str, pinned: str, host: str
) -> None:
    target = asyncio.run(check(url, allow_private=False))
    to, headers, extensions = target.pinned()

    assert str(to) == pinned
    assert headers == {"Host": parse(url).netloc.decode()}
    assert extensions == {"sni_hostname": host}


def test_a_named_host_is_pinned_to_its_address_and_keeps_its_name() -> None:
    target = asyncio.run(check("http://localhost:8080/hook", allow_private=True))
    to, headers, extensions = target.pinned()

    assert to.host == str(target.addresses[0])
    assert to.port == 8080
    assert headers == {"Host": "localhost:8080"}
    assert extensions == {"sni_hostname": "localhost"}
