"""The form of a webhook URL that a submit may name, as the API's schema states it (the rules
themselves, with their reasons, are app/webhooks/destination.py's)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

#: The webhook URLs the API's rules take (app/webhooks/destination.py parse), as a JSON Schema
#: pattern: http(s), a DNS name of at most 253 characters or an IPv4 address, a port of 1 to
#: 65535, then what a URI may hold (RFC 3986). The rules take a little more (an IPv6 address,
#: any printable character after the host), which a client may send but the schema leaves out.
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# The last label starts with a letter: a name of digits and dots is read as an IPv4 address.
_NAME = rf"(?:{_LABEL}\.)*[A-Za-z](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.?"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_PORT = "(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_HOST = rf"(?![^:/?#]{{254}})(?:{_NAME}|{_OCTET}(?:\.{_OCTET}){{3}})"  # 253 at most
_URI_CHAR = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})"
_REST = rf"(?:[/?]{_URI_CHAR}*)?(?:#{_URI_CHAR}*)?"  # path and query, fragment
WEBHOOK_PATTERN = rf"^[Hh][Tt][Tt][Pp][Ss]?://{_HOST}(?::{_PORT})?{_REST}$"
#: A submit's optional webhook (both bodies): checked at submit (app/api/submissions.py); the
#: schema states the same rules (its pattern), which the check enforces with a reason.
WebhookUrl = Annotated[
    Annotated[
        str,
        Field(
            min_length=1,
            max_length=2048,
            json_schema_extra={"format": "uri", "pattern": WEBHOOK_PATTERN},
        ),
    ]
    | None,
    Field(
        description="an http(s) URL that gets the job's final status, POSTed and signed "
        "(docs/webhooks.md); one at a private or loopback address is refused",
    ),
]
