"""Errors of the kernel package (all are ``ScrollError``).

::

    ScrollError
    └── KernelError              a kernel could not be started or driven
        ├── SandboxUnavailable       the required sandbox tier cannot run here (fail closed)
        ├── KernelProtocolError      the kernel sent something the host will not accept
        └── HostFunctionRefused      a host-function name or call was rejected
"""

from __future__ import annotations

from ..errors import ScrollError

__all__ = ["HostFunctionRefused", "KernelError", "KernelProtocolError", "SandboxUnavailable"]


class KernelError(ScrollError):
    """A kernel could not be started or driven."""


class SandboxUnavailable(KernelError):
    """The requested sandbox tier is not available; no kernel was started."""


class KernelProtocolError(KernelError):
    """The kernel broke the wire protocol (malformed, oversized or unexpected message)."""


class HostFunctionRefused(KernelError, ValueError):
    """A host-function name is invalid, or a call named a function that is not registered."""
