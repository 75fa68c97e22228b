"""A static file whose client leaves while its view opens it is closed, not left to the
garbage collector (``dashboard.static_files``; the browser tests met it as a
``ResourceWarning`` on favicon.svg)."""

from __future__ import annotations

import asyncio
import gc
import io
import warnings

import pytest
from django.core.handlers.asgi import ASGIRequest

from dashboard.static_files import StaticFiles


def _request(path: str) -> ASGIRequest:
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": [],
        "root_path": "",
    }
    return ASGIRequest(scope, io.BytesIO())


async def _left_early(handler: StaticFiles, path: str) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = asyncio.ensure_future(handler.get_response_async(_request(path)))
        await asyncio.sleep(0)  # the view is on its way in its thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):  # the view finishes in its thread; then its response is closed
            await asyncio.sleep(0.005)
        gc.collect()
    return [w for w in caught if issubclass(w.category, ResourceWarning)]


async def test_a_file_whose_client_left_while_it_opened_is_closed():
    handler = StaticFiles(None)
    for _ in range(5):
        assert await _left_early(handler, "/static/favicon.svg") == []


async def test_a_file_still_comes_whole_when_the_client_stays():
    handler = StaticFiles(None)
    response = await handler.get_response_async(_request("/static/favicon.svg"))
    try:
        assert response.status_code == 200
        body = b"".join([part async for part in response.streaming_content])
        assert body.startswith(b"<svg") or b"<svg" in body[:200]
    finally:
        response.close()
