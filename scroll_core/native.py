"""Which of the package's modules run compiled, and the switch back to their source.

``setup.py`` compiles the modules ``COMPILED`` names with mypyc (the search's per-turn
work: term masks, the linear ranker, the bounds; an append's loops: the sums of a text's
words' token counts, the JSON insert's value check) to C extensions beside their ``.py``
files, and records each source's sha256 in ``native_build.json``. Python would import an
extension before its source; ``use_source_when_needed`` (run when this module is imported,
which ``scroll_core/__init__`` does first, before any compiled module can be imported)
makes it import the sources instead, all of them, when

- ``SCROLL_PURE_PYTHON=1`` is set (the reference, and the way to profile in Python),
- nothing was built (no record: a source-only install), or
- any source differs from the one its build compiled (an edit not yet rebuilt by ``make
  install``): the extension would run the old code, or
- the package is imported under another name than ``scroll_core`` (see ``_PACKAGE``).

All or none: the compiled modules call each other's compiled code directly, so one cannot
run compiled beside another interpreted. ``in_use`` says which ran compiled.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED", "PURE_ENV", "in_use", "stale", "use_source_when_needed"]

COMPILED = (
    "scroll_core.store.linear_rank",
    "scroll_core.store.term_match",
    "scroll_core.store.search_bounds",
    "scroll_core.store.ingest_rows",
    "scroll_core.token_sums",
)
PURE_ENV = "SCROLL_PURE_PYTHON"
_HERE = Path(__file__).resolve().parent
_RECORD = _HERE / "native_build.json"
# The package as imported: a checkout imported under another name (``bench/eventlog_ab.py``'s
# ``scroll_core_base``) runs its sources, since each extension is built for its own name and
# would load the group library of whichever ``scroll_core`` is importable.
_PACKAGE = __name__.rpartition(".")[0]
_AS_IMPORTED = {_PACKAGE + name.removeprefix("scroll_core"): name for name in COMPILED}


def _source(name: str) -> Path:
    """The ``.py`` file of compiled module ``name`` (as ``COMPILED`` names it)."""
    return _HERE.joinpath(*name.split(".")[1:]).with_suffix(".py")


def stale() -> list[str]:
    """The compiled modules whose source differs from the one built (all of them when no
    build is recorded)."""
    try:
        built = json.loads(_RECORD.read_text())
    except (OSError, ValueError):
        return list(COMPILED)
    return [
        name
        for name in COMPILED
        if built.get(name) != hashlib.sha256(_source(name).read_bytes()).hexdigest()
    ]


class _FromSource(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' ``.py`` files, ahead of the extensions beside them."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        name = _AS_IMPORTED.get(fullname)
        if name is None:
            return None
        return importlib.util.spec_from_file_location(fullname, _source(name))


def use_source_when_needed() -> None:
    """Import the compiled modules from source when asked to, or when the build is absent
    or stale (see above); idempotent."""
    if any(isinstance(finder, _FromSource) for finder in sys.meta_path):
        return
    if _PACKAGE != "scroll_core" or os.environ.get(PURE_ENV) == "1" or stale():
        sys.meta_path.insert(0, _FromSource())


def in_use() -> dict[str, bool]:
    """Whether each of ``COMPILED``, imported, runs compiled (an extension module)."""
    import importlib

    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return {
        name: (importlib.import_module(name).__file__ or "").endswith(suffixes) for name in COMPILED
    }


use_source_when_needed()
