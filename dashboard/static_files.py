"""Static files for the embedded default (``SCROLL_SERVE_STATIC``): Django's
``ASGIStaticFilesHandler``, with every response it opens closed.

Django's ASGI handler cancels a request's task when the client disconnects. A static
file's view runs in a thread and opens the file; if the disconnect comes while that
thread runs, the cancelled task never hands the ``FileResponse`` back, so nothing closes
it and the open file lingers until the garbage collector finds it (a ``ResourceWarning``;
a browser leaving a page while its favicon loads is enough). Here the view's work is
shielded from the cancellation, and a response that finishes after its client left is
closed at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

__all__ = ["StaticFiles"]


def _close_finished(task: asyncio.Task[Any]) -> None:
    """Close the response of a view whose client left before it returned."""
    if not task.cancelled() and task.exception() is None:
        task.result().close()


class StaticFiles(ASGIStaticFilesHandler):
    """``ASGIStaticFilesHandler`` that closes a response its cancelled request left."""

    async def get_response_async(self, request: Any) -> Any:
        view = asyncio.ensure_future(super().get_response_async(request))
        try:
            return await asyncio.shield(view)
        except asyncio.CancelledError:
            view.add_done_callback(_close_finished)
            raise
