"""Host functions as seen from inside the kernel.

A call sends ``{"op": "call"}`` over the pipe and blocks until the host replies; the value
arrives as plain JSON and is revived into plain Python objects: dicts, lists, ``Record``
(a dict with attribute access and a type name) and ``PayloadHandle`` (loads lazily).
"""

from __future__ import annotations

import datetime as _dt
import json
import queue
import threading
from collections.abc import Callable
from typing import Any

from . import wire

Send = Callable[[dict[str, Any]], None]
TAG = "__scroll__"


class HostFunctionError(RuntimeError):
    """The host refused or failed a host-function call."""


class Record(dict[str, Any]):
    """A plain result row: a dict whose keys also read as attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.items())
        return f"{type(self).__name__}({inner})"


class PayloadHandle:
    """A stored payload that is fetched from the host only when ``load()`` is called."""

    def __init__(
        self, caller: HostCaller, loader: str, ref: str, key: Any, size: int | None
    ) -> None:
        self._caller = caller
        self._loader = loader
        self._key = key
        self.ref = ref
        self.size = size

    def load(self) -> Any:
        return self._caller.call(self._loader, [self._key], {})

    def __repr__(self) -> str:
        return f"PayloadHandle(ref={self.ref[:16]!r}, size={self.size})"


class HostCaller:
    """Sends calls and waits for their replies, one call at a time."""

    def __init__(self, send: Send, replies: queue.Queue[dict[str, Any]]) -> None:
        self._send = send
        self._replies = replies
        self._lock = threading.Lock()
        self._next_id = 0
        self._record_types: dict[str, type[Record]] = {}
        self.calls = 0

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        try:
            json.dumps([args, kwargs], default=_plain)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"arguments to {name} must be plain data: {exc}") from None
        with self._lock:
            self._next_id += 1
            call_id = self._next_id
            message = {
                "op": "call",
                "id": call_id,
                "name": name,
                "args": json.loads(json.dumps(args, default=_plain)),
                "kwargs": json.loads(json.dumps(kwargs, default=_plain)),
            }
            line = wire.encode(message)
            # The host would take a line it cannot accept as a broken kernel: refuse here.
            problem = wire.shape_problem(line)
            if len(line) > wire.MAX_CHILD_LINE - wire.SEAL_BYTES:
                problem = f"over {wire.MAX_CHILD_LINE - wire.SEAL_BYTES:,} bytes"
            if problem is not None:
                raise TypeError(f"arguments to {name} are too large to send: {problem}")
            self.calls += 1
            self._send(message)
            while True:
                reply = self._replies.get()
                if reply.get("id") == call_id:
                    break
        if reply.get("ok"):
            return self.revive(reply.get("value"))
        error = reply.get("error") or {}
        raise HostFunctionError(f"{name}: {error.get('type', 'Error')}: {error.get('message', '')}")

    def revive(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.revive(v) for v in value]
        if not isinstance(value, dict):
            return value
        tag = value.get(TAG)
        if tag == "record":
            cls = self._record_type(str(value.get("type", "Record")))
            return cls({k: self.revive(v) for k, v in dict(value.get("fields", {})).items()})
        if tag == "payload":
            size = value.get("size")
            ref = str(value.get("ref"))
            return PayloadHandle(
                self,
                str(value.get("loader")),
                ref,
                value.get("key", ref),
                size if size is None else int(size),
            )
        return {k: self.revive(v) for k, v in value.items()}

    def _record_type(self, name: str) -> type[Record]:
        cls = self._record_types.get(name)
        if cls is None:
            safe = name if name.isidentifier() else "Record"
            cls = type(safe, (Record,), {"__module__": "__main__"})
            self._record_types[name] = cls
        return cls


class HostFunction:
    """The kernel-side stand-in for one named host function."""

    __scroll_hidden__ = True

    def __init__(self, caller: HostCaller, name: str) -> None:
        self._caller = caller
        self.__name__ = name.rsplit(".", 1)[-1]
        self._full_name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._caller.call(self._full_name, list(args), kwargs)

    def __repr__(self) -> str:
        return f"<host function {self._full_name}>"


class HostNamespace:
    """Groups dotted host functions: ``ms.search`` is ``HostNamespace('ms').search``."""

    __scroll_hidden__ = True

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        names = sorted(k for k in vars(self) if not k.startswith("_"))
        return f"<{self._name}: {', '.join(names)}>"


def bind(namespace: dict[str, Any], caller: HostCaller, names: list[str]) -> set[str]:
    """Bind proxies for ``names`` into the user namespace; return the top-level names used."""
    top: set[str] = set()
    for full in names:
        head, _, attr = full.partition(".")
        proxy = HostFunction(caller, full)
        if attr:
            holder = namespace.get(head)
            if not isinstance(holder, HostNamespace):
                holder = HostNamespace(head)
                namespace[head] = holder
            setattr(holder, attr, proxy)
        else:
            namespace[head] = proxy
        top.add(head)
    return top


def _plain(value: Any) -> Any:
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not plain data")
