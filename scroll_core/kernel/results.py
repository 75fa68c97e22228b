"""What one cell returns to the host."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["ExecError", "ExecResult", "ExecStatus", "NamespaceDigest", "truncation_notice"]

ExecStatus = Literal["ok", "error", "timeout", "killed", "denied"]


def truncation_notice(hidden: int, cap: int) -> str:
    return (
        f"\n[output truncated at {cap:,} characters; {hidden:,} more were hidden. "
        "Your variables persist in the kernel: print less (filter, slice or aggregate the "
        "values you already hold) instead of re-running the query.]"
    )


@dataclass(frozen=True)
class ExecError:
    type: str
    message: str
    traceback: str
    note: str | None = None


@dataclass(frozen=True)
class NamespaceDigest:
    variables: list[dict[str, Any]] = field(default_factory=list)
    omitted: int = 0

    def render(self) -> str:
        """One line per variable, e.g. ``rows: list[Hit] len=40``."""
        lines = []
        for var in self.variables:
            kind = var.get("type", "?")
            if "item_type" in var:
                kind = f"{kind}[{var['item_type']}]"
            text = f"{var.get('name')}: {kind}"
            if "len" in var:
                text += f" len={var['len']}"
            if "shape" in var:
                text += f" shape={tuple(var['shape'])}"
            if "value" in var:
                text += f" = {var['value']}"
            lines.append(text)
        if self.omitted:
            lines.append(f"... and {self.omitted} more")
        return "\n".join(lines)


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one cell, after the print cap.

    ``status``: ok, error (the cell raised), timeout (interrupted at the time limit),
    killed (the kernel died: a limit, a crash, a protocol violation) or denied (the sandbox
    refused an operation). ``variables_lost`` says the kernel was restarted. ``limit`` names
    what ended the cell: ``timeout`` (also a kernel that stopped reading what the host sent),
    ``memory``, ``file_size``, ``cpu``, or ``protocol`` (the kernel sent a line the host does
    not accept: malformed, oversized, too deeply nested, or an unexpected message).
    """

    status: ExecStatus
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    hidden_chars: int = 0
    error: ExecError | None = None
    duration_ms: float = 0.0
    digest: NamespaceDigest = field(default_factory=NamespaceDigest)
    tier: str = ""
    variables_lost: bool = False
    limit: str | None = None
    notice: str | None = None
    denials: list[str] = field(default_factory=list)
    host_calls: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def observation(self) -> str:
        """The text the model sees for this cell."""
        parts = [self.stdout]
        if self.stderr:
            parts.append(self.stderr)
        if self.error is not None:
            parts.append(self.error.traceback or f"{self.error.type}: {self.error.message}")
        if self.notice:
            parts.append(f"[{self.notice}]")
        return "\n".join(p.rstrip("\n") for p in parts if p)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
