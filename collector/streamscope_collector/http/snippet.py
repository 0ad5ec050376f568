"""``GET /sdk/streamscope.js``: the browser snippet web pages load (``streamscope_collector.browser``), revalidated by
its ETag so a page load costs a 304 once cached."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import Response

from streamscope_collector import browser


def add_snippet_route(app: FastAPI) -> None:
    """Serve the snippet on ``app``."""

    @app.get(browser.SNIPPET_PATH)
    async def snippet(request: Request) -> Response:
        """The snippet, or 304 when the page's cached copy is current."""
        source, etag = browser.snippet()
        headers = {"ETag": etag, "Cache-Control": "public, max-age=300"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return Response(source, media_type="text/javascript; charset=utf-8", headers=headers)
