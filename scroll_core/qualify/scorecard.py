"""A qualification's scorecard: per item pass or fail with its cells, tokens and time; per
category a score; a total; and the verdict against the pass marks. Plain data that goes to
JSON and back unchanged, so two scorecards (two models, or two suite versions) compare side
by side."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CATEGORIES", "PASS_MARKS", "CategoryScore", "ItemResult", "Scorecard"]

CATEGORIES = ("acting", "recall", "protocol")
# The share of a category's items a model must pass. Protocol is all or nothing: a model that
# breaks the call shape, drops headlines or answers the archive is unfit whatever it knows.
PASS_MARKS = {"acting": 2 / 3, "recall": 3 / 4, "protocol": 1.0}


@dataclass(frozen=True)
class ItemResult:
    id: str
    category: str
    title: str
    passed: bool
    detail: str
    cells: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    lint: tuple[str, ...] = ()  # the trajectory lint's rules the item's session raised

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class CategoryScore:
    category: str
    passed: int
    total: int
    mark: float

    @property
    def score(self) -> float:
        """Percent of the category's items passed (0 for a category with none)."""
        return round(100 * self.passed / self.total, 1) if self.total else 0.0

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed / self.total >= self.mark - 1e-9


@dataclass
class Scorecard:
    """One run of the suite against one model."""

    suite_version: str
    seed: int
    model: str
    api: str = ""
    upstream: str = ""
    items: list[ItemResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def categories(self) -> list[CategoryScore]:
        return [
            CategoryScore(
                name,
                sum(1 for i in self.items if i.category == name and i.passed),
                sum(1 for i in self.items if i.category == name),
                PASS_MARKS[name],
            )
            for name in CATEGORIES
        ]

    def category(self, name: str) -> CategoryScore:
        for score in self.categories:
            if score.category == name:
                return score
        raise KeyError(name)

    @property
    def total(self) -> float:
        """Percent of all items passed."""
        if not self.items:
            return 0.0
        return round(100 * sum(i.passed for i in self.items) / len(self.items), 1)

    @property
    def passed(self) -> bool:
        """Every category at or above its pass mark."""
        return all(c.ok for c in self.categories)

    @property
    def tokens(self) -> int:
        return sum(i.tokens for i in self.items)

    def item(self, item_id: str) -> ItemResult:
        for result in self.items:
            if result.id == item_id:
                return result
        raise KeyError(item_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite_version": self.suite_version,
            "seed": self.seed,
            "model": self.model,
            "api": self.api,
            "upstream": self.upstream,
            "seconds": round(self.seconds, 3),
            "total": self.total,
            "passed": self.passed,
            "categories": {
                c.category: {"passed": c.passed, "total": c.total, "score": c.score, "ok": c.ok}
                for c in self.categories
            },
            "items": [asdict(i) for i in self.items],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scorecard:
        return cls(
            suite_version=str(data["suite_version"]),
            seed=int(data["seed"]),
            model=str(data["model"]),
            api=str(data.get("api", "")),
            upstream=str(data.get("upstream", "")),
            items=[
                ItemResult(**{**item, "lint": tuple(item.get("lint", ()))})
                for item in data["items"]
            ],
            seconds=float(data.get("seconds", 0.0)),
        )

    def summary(self) -> str:
        """One line: verdict, total and each category's score."""
        parts = [f"{c.category} {c.score:g}% ({c.passed}/{c.total})" for c in self.categories]
        verdict = "PASS" if self.passed else "FAIL"
        return f"{verdict} {self.total:g}% | " + " | ".join(parts)
