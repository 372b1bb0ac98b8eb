"""The asyncio clients' commands, packed by hiredis (app/connections.py): the same bytes as
redis-py's own packer writes, the same refusals, and a real server that understands them."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from app.connections import async_client, async_pooled, hiredis_packed
from app.settings import Settings

pytestmark = pytest.mark.anyio

ARGUMENTS: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 2, "fairgpu:job:1", b"raw\x00bytes", 7, -3, 2**70),
    ("SET", "clé", "wert ☃", "EX", 10),
    # Floats as repr() writes them (hiredis's own formatting differs in the last digit).
    ("ZADD", "z", 0.1 + 0.2, "m", 1e-7, "n", -2.5e300, "o", 1.0, "p"),
    ("CONFIG GET", "maxmemory"),  # a command of two words is split, as redis-py splits it
    (b"CLIENT SETNAME", b"x"),
    ("SET", "k", memoryview(b"view"), "GET"),
    ("SET", "k", bytearray(b"array")),
    ("ECHO", ""),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def packed_connection() -> Connection:
    client = hiredis_packed(aioredis.Redis())
    connection: Connection = client.connection_pool.make_connection()  # type: ignore[assignment]
    return connection


@pytest.mark.parametrize("args", ARGUMENTS, ids=[str(a[0]) for a in ARGUMENTS])
def test_hiredis_writes_the_bytes_redis_py_writes(args: tuple[Any, ...]) -> None:
    plain = Connection()
    assert b"".join(packed_connection().pack_command(*args)) == b"".join(plain.pack_command(*args))


@pytest.mark.parametrize("bad", [True, None, object(), [1]])
def test_what_redis_py_refuses_is_refused(bad: object) -> None:
    with pytest.raises(DataError):
        Connection().pack_command("SET", "k", bad)
    with pytest.raises(DataError):
        packed_connection().pack_command("SET", "k", bad)


def test_a_pipeline_is_packed_the_same() -> None:
    commands = [("INCR", "a"), ("EXPIRE", "a", 2), ("ZADD", "z", 0.1 + 0.2, "m")]
    plain = b"".join(Connection().pack_commands(commands))
    assert b"".join(packed_connection().pack_commands(commands)) == plain


async def test_the_app_s_clients_talk_to_a_real_server(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url)
    for client in (async_client(settings), async_pooled(settings, 4, 1.0)):
        assert client.connection_pool.connection_class.pack_command is not Connection.pack_command
        async with client:
            await client.set("clé", "wert ☃")
            await client.zadd("z", {"m": 0.1 + 0.2})
            async with client.pipeline() as pipe:
                pipe.get("clé").zscore("z", "m")
                got, score = await pipe.execute()
            assert got == "wert ☃".encode()
            assert score == 0.1 + 0.2  # the exact double went through and came back


def test_a_client_with_another_encoding_keeps_redis_py_s_packer() -> None:
    client = hiredis_packed(aioredis.Redis(encoding="latin-1"))
    connection = client.connection_pool.make_connection()
    assert b"".join(connection.pack_command("SET", "k", "é")) == b"".join(
        Connection(encoding="latin-1").pack_command("SET", "k", "é")
    )
