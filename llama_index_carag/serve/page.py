"""The page (check a claim, check a text, chat): static files shipped in this package, and plotly.js from the installed ``plotly`` package."""

from __future__ import annotations

from functools import cache, lru_cache
from importlib import resources
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, Response

__all__ = ["page_router", "CONTENT_SECURITY_POLICY"]

#: The page runs only its own scripts; Plotly needs inline styles; no other origin is contacted.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_STATIC = {
    "app.js": "text/javascript; charset=utf-8",
    "text.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}


@cache
def _static(name: str) -> bytes:
    return resources.files("llama_index_carag.serve").joinpath("static", name).read_bytes()


@lru_cache(maxsize=1)
def plotly_js_path() -> Path:
    """``plotly.min.js`` inside the installed ``plotly`` Python package (the page never uses a CDN)."""
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():  # pragma: no cover - a broken plotly install
        raise FileNotFoundError(f"plotly.min.js not found in the plotly package at {path}")
    return path


def page_router() -> APIRouter:
    """``GET /`` (the page), ``/static/app.js``, ``/static/text.js``, ``/static/app.css``, ``/static/plotly.min.js``."""
    router = APIRouter()

    @router.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(_static("index.html"), headers={"Cache-Control": "no-cache"})

    @router.get("/static/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(
            plotly_js_path(),
            media_type="text/javascript; charset=utf-8",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    @router.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in _STATIC:
            from llama_index_carag.serve.errors import ApiError

            raise ApiError(404, "not_found", f"no such file: /static/{name}")
        return Response(_static(name), media_type=_STATIC[name], headers={"Cache-Control": "no-cache"})

    return router
