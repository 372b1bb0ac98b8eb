"""The signed-out dashboard says where API keys come from: the page as the API serves it."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI

from app.api.routes.dashboard import router


async def fetch(*paths: str) -> list[httpx.Response]:
    app = FastAPI()
    app.include_router(router)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://dashboard") as client:
        return [await client.get(path) for path in paths]


def test_the_signed_out_page_says_where_keys_come_from() -> None:
    page, script = asyncio.run(fetch("/dashboard", "/dashboard/static/dashboard.js"))
    assert page.status_code == 200
    assert '<p id="key-hint">' in page.text  # shown until a key is accepted
    assert "<code>fixtures/users.json</code>" in page.text
    assert "<code>uv run fairgpu dev</code>" in page.text
    # The page hides it once signed in, and shows it again on signing out.
    assert script.text.count("ui.keyHint.hidden = ") == 2
