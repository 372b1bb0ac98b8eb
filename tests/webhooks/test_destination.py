"""Which URLs a webhook may go to: http(s) with a host, no credentials, and a host whose every
address is public unless private ones are allowed; and a delivery connects to the address that
was checked, under the original name."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from app.webhooks.destination import RefusedError, blocked, check, parse

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
