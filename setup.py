"""Builds the search's and the append's hot modules as C extensions with mypyc (``pip
install -e .``, as ``make install`` runs it); everything else is in pyproject.toml.

The modules ``scroll_core.native.COMPILED`` names are compiled to extension modules
beside their ``.py`` files, which stay the reference: the package imports the source
instead when ``SCROLL_PURE_PYTHON=1``, when nothing was built, or when a source no longer
matches the hash recorded here at build time (``native_build.json``), so an edit is never
shadowed by a stale build. ``SCROLL_PURE_PYTHON=1`` at install time builds nothing.
See docs/native.md.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError

HERE = Path(__file__).resolve().parent
PACKAGE = Path("scroll_core")


def _compiled() -> list[str]:
    """``scroll_core.native.COMPILED``, read without importing the package (whose
    dependencies a build need not have)."""
    tree = ast.parse((HERE / PACKAGE / "native.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "COMPILED"
        ]:
            return list(ast.literal_eval(node.value))
    raise SystemExit("scroll_core/native.py names no COMPILED modules")


def _source(name: str) -> Path:
    """The source of compiled module ``name`` (``scroll_core.store.term_match``), relative to
    this folder."""
    return Path(*name.split(".")).with_suffix(".py")


COMPILED = _compiled()
# One shared library for the group (mypyc's), inside the package so an editable install
# finds it where it finds the package: scroll_core/native__mypyc.*.so.
GROUP = "scroll_core.native"


def _extensions() -> list:
    if os.environ.get("SCROLL_PURE_PYTHON") == "1":
        return []
    from mypyc.build import mypycify

    # What they import from outside the group (fts_query, the standard library's types
    # aside) is not analysed: following it meant type-analysing the package from
    # ``scroll_core/__init__`` down, 45 of the build's 52 s, for calls that are not on the
    # hot path (the search's p50 the same either way). Checking is `make typecheck`'s.
    sources = [str(_source(name)) for name in COMPILED]
    extensions = mypycify(["--follow-imports=skip", *sources], opt_level="3", group_name=GROUP)
    for extension in extensions:
        # No fused multiply-add: each float operation rounds as CPython's does, so the
        # compiled scores equal the interpreted ones to the last bit on every machine.
        extension.extra_compile_args.append("-ffp-contract=off")
    return extensions


class RecordSources(build_ext):
    """``build_ext`` that records the hash of each compiled module's source beside the
    extensions, for ``scroll_core.native`` to check at import."""

    def run(self) -> None:
        in_tree = self.inplace or getattr(self, "editable_mode", False)
        folder = (HERE if in_tree else Path(self.build_lib)) / PACKAGE
        record = folder / "native_build.json"
        record.unlink(missing_ok=True)
        try:
            super().run()
        except (CCompilerError, BaseError, OSError) as exc:
            # No C compiler (or no Python headers): the sources run interpreted, the same
            # results, slower; under CI=true tests/test_native.py fails on it.
            print(f"warning: the compiled modules were not built ({exc}); "
                  "scroll_core runs them from source", file=sys.stderr)  # fmt: skip
            return
        if not self.extensions:
            return
        hashes = {
            name: hashlib.sha256((HERE / _source(name)).read_bytes()).hexdigest()
            for name in COMPILED
        }
        folder.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(hashes, indent=1) + "\n")


setup(ext_modules=_extensions(), cmdclass={"build_ext": RecordSources})
