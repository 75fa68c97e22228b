"""Kernel settings: sandbox tier, print cap, timeouts and resource limits."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from ..errors import ConfigError

__all__ = ["FALLBACK_CHOICES", "SANDBOX_CHOICES", "KernelConfig"]

SANDBOX_CHOICES = ("auto", "bwrap", "process")
# What ``auto`` may fall back to when bubblewrap cannot run: nothing, or the process tier.
FALLBACK_CHOICES = ("none", "process")
MB = 1024 * 1024


@dataclass(frozen=True)
class KernelConfig:
    """Every knob of a kernel; ``from_env`` reads ``SCROLL_SANDBOX`` and
    ``SCROLL_SANDBOX_FALLBACK``."""

    sandbox: str = "auto"
    fallback: str = "none"
    print_cap: int = 32_000
    timeout_s: float = 30.0
    grace_s: float = 2.0
    start_timeout_s: float = 15.0
    memory_mb: int = 1024
    cell_cpu_s: int = 120
    lifetime_cpu_s: int = 3600
    processes: int = 64
    file_size_mb: int = 32
    open_files: int = 256
    max_created_files: int = 256
    scratch_mb: int = 64
    # Files, directories, symlinks and hard links in scratch, O_TMPFILE ones included.
    scratch_inodes: int = 4096
    scratch_root: str | None = None

    def __post_init__(self) -> None:
        if self.sandbox not in SANDBOX_CHOICES:
            raise ConfigError(
                f"sandbox must be one of {', '.join(SANDBOX_CHOICES)}, not {self.sandbox!r}"
            )
        if self.fallback not in FALLBACK_CHOICES:
            raise ConfigError(
                f"sandbox fallback must be one of {', '.join(FALLBACK_CHOICES)}, "
                f"not {self.fallback!r}"
            )
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
                raise ConfigError(f"{f.name} must be positive, got {value!r}")
        if self.memory_mb < 64:
            raise ConfigError("memory_mb below 64 cannot start Python")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> KernelConfig:
        env = os.environ if env is None else env
        config = cls()
        if env.get("SCROLL_SANDBOX"):
            config = replace(config, sandbox=env["SCROLL_SANDBOX"].strip().lower())
        if env.get("SCROLL_SANDBOX_FALLBACK"):
            fallback = env["SCROLL_SANDBOX_FALLBACK"].strip().lower()
            config = replace(config, fallback=fallback)
        return replace(config, **overrides)  # type: ignore[arg-type]

    def limits(self) -> dict[str, int]:
        """rlimits the worker applies to itself before the first cell."""
        return {
            "memory_bytes": self.memory_mb * MB,
            "file_size_bytes": self.file_size_mb * MB,
            "processes": self.processes,
            "open_files": self.open_files,
            "cpu_seconds": self.lifetime_cpu_s,
        }
