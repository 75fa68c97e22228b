"""The namespace digest: what lives in the kernel, in a few hundred characters.

For each user variable its name, type, length or shape and, for small scalars, the value.
Dunders, private names, modules and host-function proxies are left out; the whole digest is
bounded in entries and characters so it can sit in every prompt.
"""

from __future__ import annotations

import types
from typing import Any

MAX_ENTRIES = 40
MAX_CHARS = 4000
MAX_INLINE = 80
_SCALARS = (bool, int, float, complex, type(None))
_SIZED = (list, tuple, dict, set, frozenset, str, bytes, bytearray, range)


def describe(name: str, value: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "type": _type_name(value)}
    if isinstance(value, _SCALARS) or (isinstance(value, str) and len(value) <= MAX_INLINE):
        text = repr(value)
        if len(text) <= MAX_INLINE:
            entry["value"] = text
    if isinstance(value, _SIZED):
        entry["len"] = len(value)
        if isinstance(value, (list, tuple)) and value:
            entry["item_type"] = _type_name(value[0])
    else:
        shape = _shape(value)
        if shape is not None:
            entry["shape"] = shape
    return entry


def digest(namespace: dict[str, Any], hidden: frozenset[str]) -> dict[str, Any]:
    """Entries for the visible variables, newest names last, within the size bounds."""
    entries: list[dict[str, Any]] = []
    chars = 0
    omitted = 0
    for name, value in list(namespace.items()):
        if name.startswith("_") or name in hidden or isinstance(value, types.ModuleType):
            continue
        if getattr(type(value), "__scroll_hidden__", False):
            continue
        try:
            entry = describe(name, value)
        except Exception:
            entry = {"name": name, "type": _type_name(value)}
        size = sum(len(str(v)) for v in entry.values()) + 8
        if len(entries) >= MAX_ENTRIES or chars + size > MAX_CHARS:
            omitted += 1
            continue
        entries.append(entry)
        chars += size
    return {"variables": entries, "omitted": omitted}


def _type_name(value: Any) -> str:
    cls = type(value)
    name = cls.__qualname__
    module = cls.__module__
    if module in ("builtins", "__main__") or not isinstance(module, str):
        return name
    return f"{module}.{name}"


def _shape(value: Any) -> list[int] | None:
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
        return list(shape)
    if hasattr(type(value), "__len__"):
        try:
            return [len(value)]
        except Exception:
            return None
    return None
