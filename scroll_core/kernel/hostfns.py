"""Named host functions the kernel may call, served by the host while a cell runs."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import HostFunctionRefused
from .protocol import to_wire

__all__ = ["HostFunctions"]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
MAX_ARGS_CHARS = 1_000_000


class HostFunctions:
    """A registry of ``name -> callable``; ``ms.search`` style names group under ``ms``."""

    def __init__(self, functions: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self._functions: dict[str, Callable[..., Any]] = {}
        for name, fn in (functions or {}).items():
            self.register(name, fn)

    def register(self, name: str, fn: Callable[..., Any]) -> None:
        if not _NAME.match(name):
            raise HostFunctionRefused(f"invalid host function name {name!r}")
        if not callable(fn):
            raise HostFunctionRefused(f"host function {name!r} is not callable")
        self._functions[name] = fn

    def names(self) -> list[str]:
        return sorted(self._functions)

    def __contains__(self, name: object) -> bool:
        return name in self._functions

    def serve(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """Run one ``call`` message from the kernel; the reply never carries a host traceback."""
        call_id = message.get("id")
        name = message.get("name")
        args = message.get("args", [])
        kwargs = message.get("kwargs", {})
        if not isinstance(name, str) or name not in self._functions:
            return _refusal(call_id, "HostFunctionRefused", f"no host function {name!r}")
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            return _refusal(call_id, "HostFunctionRefused", "malformed call")
        if not all(isinstance(k, str) and k.isidentifier() for k in kwargs):
            return _refusal(call_id, "HostFunctionRefused", "malformed keyword arguments")
        try:
            value = to_wire(self._functions[name](*args, **kwargs))
        except Exception as exc:
            return _refusal(call_id, type(exc).__name__, str(exc)[:2000])
        return {"op": "reply", "id": call_id, "ok": True, "value": value}


def _refusal(call_id: Any, kind: str, message: str) -> dict[str, Any]:
    return {"op": "reply", "id": call_id, "ok": False, "error": {"type": kind, "message": message}}
