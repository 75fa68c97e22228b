"""A gradient-boosted tree ranker shipped as data, scored without the library that fitted it.

The model is a JSON file of regression trees (``scroll_core/store/ranker_trees.json``, written by
``bench/_tree_fit.py`` from LightGBM's LambdaMART fit on LoCoMo's dev split). A turn's score
is the sum of one leaf value per tree, in tree order; at an inner node the walk goes left when
``feature value <= threshold`` (LightGBM's numerical rule). No numpy or LightGBM at query time:
the trees are turned once, at load, into one plain Python function of nested conditional
expressions (every constant in it a float or int read from the file and checked, so the
generated source holds nothing else), which walks ~100 small trees over a turn's features in
a few microseconds and gives the same sums as LightGBM's own ``predict``.

A file that is not such a model (not JSON, another format, features this search does not
compute, a categorical split, a child pointing nowhere) is a ``ConfigError`` at load, which
``SearchTuning`` does when it is built: a bad model is named at configuration time.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["FORMAT", "SHIPPED_TREES", "TreeRanker", "load_trees", "trees_from_dict"]

FORMAT = "scroll-tree-ranker/1"
SHIPPED_TREES = Path(__file__).with_name("ranker_trees.json")
# Kept small on purpose (see bench/_tree_fit.py); a file far past these is not this ranker.
MAX_TREES = 1000
MAX_NODES = 1024


@dataclass(frozen=True)
class TreeRanker:
    """A loaded model: the feature names it was fitted on (in order), how many trees, and
    ``score(values) -> float`` for one turn's feature tuple."""

    features: tuple[str, ...]
    trees: int
    score: Callable[[Sequence[float]], float]
    source: str


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"tree ranker: {what} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ConfigError(f"tree ranker: {what} must be finite, got {value!r}")
    return number


def _tree_source(tree: Any, index: int, width: int) -> str:
    """One tree as a Python expression over ``x`` (the feature tuple)."""
    if not isinstance(tree, dict):
        raise ConfigError(f"tree ranker: tree {index} is not an object")
    try:
        feature, threshold = tree["feature"], tree["threshold"]
        left, right, leaf = tree["left"], tree["right"], tree["leaf"]
    except KeyError as exc:
        raise ConfigError(f"tree ranker: tree {index} has no {exc.args[0]!r}") from None
    if not all(isinstance(v, list) for v in (feature, threshold, left, right, leaf)):
        raise ConfigError(f"tree ranker: tree {index}'s fields must be lists")
    inner = len(feature)
    if not (len(threshold) == len(left) == len(right) == inner) or len(leaf) != inner + 1:
        raise ConfigError(
            f"tree ranker: tree {index} has {inner} inner nodes but its lists disagree"
        )
    if inner + len(leaf) > MAX_NODES:
        raise ConfigError(f"tree ranker: tree {index} has more than {MAX_NODES} nodes")
    leaves = [repr(_number(v, f"tree {index} leaf")) for v in leaf]
    if inner == 0:
        return leaves[0]
    seen: set[int] = set()

    def node(child: Any) -> str:
        if isinstance(child, bool) or not isinstance(child, int):
            raise ConfigError(f"tree ranker: tree {index} has a child that is not an index")
        if child < 0:
            if ~child >= len(leaves):
                raise ConfigError(f"tree ranker: tree {index} points to leaf {~child}, absent")
            return leaves[~child]
        if child >= inner or child in seen:
            raise ConfigError(f"tree ranker: tree {index} points to node {child} twice or absent")
        seen.add(child)
        f = feature[child]
        if isinstance(f, bool) or not isinstance(f, int) or not 0 <= f < width:
            raise ConfigError(
                f"tree ranker: tree {index} splits on feature {f!r}, not one of {width}"
            )
        t = repr(_number(threshold[child], f"tree {index} threshold"))
        return f"({node(left[child])} if x[{f}] <= {t} else {node(right[child])})"

    return node(0)


def trees_from_dict(model: Any, features: Sequence[str], source: str = "<dict>") -> TreeRanker:
    """A ``TreeRanker`` from the parsed JSON ``model``, whose features must be ``features``
    (the names and order the search computes); ``ConfigError`` naming what is wrong."""
    if not isinstance(model, dict) or model.get("format") != FORMAT:
        raise ConfigError(f"tree ranker {source}: not a {FORMAT} model")
    names = model.get("features")
    if names != list(features):
        raise ConfigError(
            f"tree ranker {source}: fitted on features {names!r}; this search computes "
            f"{list(features)!r}"
        )
    trees = model.get("trees")
    if not isinstance(trees, list) or not 0 < len(trees) <= MAX_TREES:
        raise ConfigError(f"tree ranker {source}: needs 1 to {MAX_TREES} trees")
    parts = [_tree_source(tree, i, len(features)) for i, tree in enumerate(trees)]
    # Summed left to right from 0.0, as LightGBM adds its trees' outputs.
    code = compile("lambda x: 0.0 + " + " + ".join(parts), f"<tree ranker {source}>", "eval")
    score = eval(code, {"__builtins__": {}})  # only numbers, x and operators, checked above
    return TreeRanker(tuple(features), len(trees), score, source)


_CACHE: dict[tuple[str, int, int], TreeRanker] = {}
_CACHE_LOCK = threading.Lock()


def load_trees(path: str | os.PathLike[str], features: Sequence[str]) -> TreeRanker:
    """The model at ``path`` (cached per file and modification), checked against ``features``."""
    where = Path(path)
    try:
        stat = where.stat()
    except OSError as exc:
        raise ConfigError(f"tree ranker {where}: cannot read it ({exc.strerror})") from None
    key = (str(where.resolve()), stat.st_mtime_ns, stat.st_size)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
    if cached is not None and cached.features == tuple(features):
        return cached
    try:
        model = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"tree ranker {where}: not a JSON model ({exc})") from None
    ranker = trees_from_dict(model, features, str(where))
    with _CACHE_LOCK:
        _CACHE[key] = ranker
    return ranker
