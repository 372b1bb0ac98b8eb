"""The web dashboard: one static page served at /dashboard, no build step.

The page and its two assets are plain files in app/dashboard/. Only the names listed in ASSETS
are served (no path from the request ever reaches the file system), each with a strict
Content-Security-Policy: scripts, styles and requests come from this origin only, nothing
inline, no frames, and forms cannot submit anywhere (a key typed into the page can never end
up in a URL, even if its script failed to load).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import FileResponse

router = APIRouter(include_in_schema=False)
FOLDER = Path(__file__).resolve().parents[2] / "dashboard"
PAGE = "dashboard.html"
ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


def _file(name: str, media_type: str) -> FileResponse:
    return FileResponse(FOLDER / name, media_type=media_type, headers=HEADERS)


@router.get("/dashboard")
async def dashboard() -> FileResponse:
    """The dashboard's page."""
    return _file(PAGE, "text/html; charset=utf-8")


@router.get("/dashboard/static/{name}")
async def dashboard_asset(name: str) -> FileResponse:
    """One of the page's scripts or style sheets, by its exact name."""
    media_type = ASSETS.get(name)
    if media_type is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail="not found")
    return _file(name, media_type)
