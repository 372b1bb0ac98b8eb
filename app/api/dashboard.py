"""The web dashboard: one static page served at /dashboard, no build step."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(include_in_schema=False)
