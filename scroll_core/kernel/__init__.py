"""The persistent sandboxed kernel: host-side client, pool, sandbox tiers and ``ms``.

The child side lives in ``child/`` (standard library only); everything else runs in the host.
"""

from __future__ import annotations

from ..errors import (
    HostFunctionRefused,
    KernelError,
    KernelProtocolError,
    KernelUnresponsive,
    SandboxUnavailable,
)
from .client import Kernel, KernelStatus
from .config import KernelConfig
from .manager import KernelManager
from .results import ExecError, ExecResult, NamespaceDigest
from .sandbox import bwrap_status, resolve_tier

__all__ = [
    "ExecError",
    "ExecResult",
    "HostFunctionRefused",
    "Kernel",
    "KernelConfig",
    "KernelError",
    "KernelManager",
    "KernelProtocolError",
    "KernelStatus",
    "KernelUnresponsive",
    "NamespaceDigest",
    "SandboxUnavailable",
    "bwrap_status",
    "resolve_tier",
]
