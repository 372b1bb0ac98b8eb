"""The plumbing of the fairgpu API's client (app/client/http.py): one httpx client, a request
that turns every failure into one RequestError with a one-line explanation, and the parsing of
answers into the API's models."""

from __future__ import annotations

import functools
import re
import ssl
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from app.usage_models import AccountView

DEFAULT_URL = "http://127.0.0.1:8000"
ERRNO_PREFIX = re.compile(r"^\[Errno -?\d+\]\s*")
M = TypeVar("M", bound=BaseModel)


class RequestError(Exception):
    """A request that did not succeed; str() is a one-line explanation fit for a terminal. The
    client's one error: it loads none of the server's modules, so not app.errors.FairGPUError."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status, or None when no answer came


def one_line(text: str) -> str:
    """Text with every run of whitespace, newlines included, as one space."""
    return " ".join(text.split())


def describe_detail(detail: Any) -> str:
    """An error body's `detail` as one line: a string as it is, a validation list as
    `field: message; ...`."""
    if isinstance(detail, str):
        return one_line(detail)
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = [str(p) for p in item.get("loc", []) if p != "body"]
                msg = str(item.get("msg", item))
                parts.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
            else:
                parts.append(str(item))
        return one_line("; ".join(parts))
    return one_line(str(detail))


class Transport:
    """The fairgpu API at `url`, spoken to with the API key `key`: the connection and the
    request's plumbing that every group of calls (app/client/http.py, admin_calls.py) uses."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        key: str | None = None,
        *,
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        reconnects: int = 5,
        reconnect_delay_s: float = 0.5,
    ) -> None:
        self.url = check_url(url)
        if key is not None and not (key.isascii() and key.isprintable()):
            # httpx would fail later with an encoding error that names no header.
            raise ValueError("the API key must be printable ASCII")
        self.timeout_s = timeout_s
        self.reconnects = reconnects
        self.reconnect_delay_s = reconnect_delay_s
        headers = {"X-API-Key": key} if key else {}
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            verify=tls_context(),
        )

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _list(self, adapter: TypeAdapter[list[M]], reply: httpx.Response) -> list[M]:
        try:
            return adapter.validate_json(reply.content)
        except ValidationError:
            raise self._unexpected(reply) from None

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        params: dict[str, str | int] | None = None,
        headers: dict[str, str] | None = None,
        admin: bool = False,
    ) -> httpx.Response:
        try:
            reply = self._http.request(method, path, json=json, params=params, headers=headers)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if admin and reply.status_code == 404 and detail_of(reply) == "Not Found":
            raise self._refused(reply)
        if not reply.is_success:
            raise self._failure(reply)
        return reply

    def _parse(self, model: type[M], reply: httpx.Response) -> M:
        try:
            return model.model_validate_json(reply.content)
        except ValidationError:
            raise self._unexpected(reply) from None

    def _unexpected(self, reply: httpx.Response) -> RequestError:
        """A success whose body is not what the API answers: likely not a fairgpu server."""
        where = url_of(reply)
        return RequestError(
            f"unexpected answer from {where} (is {self.url} a fairgpu server?)",
            status=reply.status_code,
        )

    def _refused(self, reply: httpx.Response) -> RequestError:
        """Why the admin API answered 404 as for a path that does not exist: it hides itself
        from a bad key and from non-admins alike, so ask GET /account which it is."""
        where = url_of(reply)
        try:
            who = self._parse(AccountView, self._request("GET", "/account"))
        except RequestError as exc:
            if exc.status == 401:
                return exc  # the key itself is wrong: say that
            return RequestError(f"404 at {where}: not an admin, or no admin API here", status=404)
        if who.admin:
            return RequestError(f"404 at {where}: this server has no admin API", status=404)
        return RequestError(f"404 at {where}: account {who.user_id} is not an admin", status=404)

    def _failure(self, reply: httpx.Response) -> RequestError:
        """One line for an error answer: status, the server's detail, where, when to retry."""
        message = f"{reply.status_code} {detail_of(reply)} at {url_of(reply)}"
        retry_after = reply.headers.get("Retry-After")
        if retry_after is not None:
            message += f"; retry after {one_line(retry_after)} s"
        return RequestError(message, status=reply.status_code)

    def _unreachable(self, exc: httpx.TransportError) -> RequestError:
        if isinstance(exc, httpx.TimeoutException):
            return RequestError(f"no answer from {self.url} within {self.timeout_s:g} s")
        return RequestError(f"cannot reach {self.url}: {reason(exc)}")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default context (system CAs, verified), made once per process: each made anew
    loads the CA bundle, ~18 ms a client. A context is safe to share between clients."""
    return httpx.create_ssl_context()


def check_url(url: str) -> str:
    """The base URL without a trailing slash; ValueError unless it is http(s)://host[:port]."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"invalid server URL {url!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"invalid server URL {url!r}: expected http://host:port")
    return str(parsed).rstrip("/")


def segment(text: str) -> str:
    """Text made safe as one path segment, so an id can never reach another endpoint."""
    return quote(text, safe="")


def url_of(reply: httpx.Response) -> str:
    url = reply.request.url
    return str(url.copy_with(query=None))


def detail_of(reply: httpx.Response) -> str:
    try:
        body = reply.json()
    except ValueError:
        return reply.reason_phrase or "error"
    if isinstance(body, dict) and "detail" in body:
        return describe_detail(body["detail"])
    return reply.reason_phrase or "error"


def reason(exc: httpx.TransportError) -> str:
    """What went wrong with a connection, in words: "connection refused", not "[Errno 111] ..."."""
    text = ERRNO_PREFIX.sub("", one_line(str(exc)))
    if not text:
        return type(exc).__name__
    return text[0].lower() + text[1:]
