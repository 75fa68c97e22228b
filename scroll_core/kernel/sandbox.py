"""How a kernel process is launched for each sandbox tier.

``bwrap``: bubblewrap with fresh user, pid, network, ipc, uts and cgroup namespaces, the
runtime and the worker code bound read-only, a size-limited tmpfs as scratch and cwd, an
empty environment, no capabilities, and death with its parent. ``process``: the same
interpreter with ``-I -S``, an empty environment and a private scratch directory; the
worker's rlimits and audit hook are the whole fence. ``auto`` takes ``bwrap`` when it works.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import SandboxUnavailable
from .config import KernelConfig

__all__ = ["TIER_STRENGTH", "LaunchSpec", "bwrap_status", "launch_spec", "resolve_tier"]

CHILD_DIR = str(Path(__file__).resolve().parent / "child")
PYTHON = os.path.realpath(sys.executable)
RUNTIME = os.path.realpath(sys.base_prefix)
ZONEINFO = "/usr/share/zoneinfo"
SANDBOX_ROOT = "/opt/scroll"
SANDBOX_SCRATCH = "/scratch"
TIER_STRENGTH = {"bwrap": "strong", "process": "weaker"}
_BOOT = (
    "import sys; sys.path.insert(0, {root!r}); "
    "from child.worker import main; del sys.path[0]; main()"
)


@dataclass(frozen=True)
class LaunchSpec:
    tier: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    scratch: str  # the scratch directory as the kernel sees it
    host_scratch: str | None  # a host directory to remove at close, if any
    read_roots: tuple[str, ...]
    allow_sqlite: bool


@functools.lru_cache(maxsize=1)
def bwrap_status() -> tuple[bool, str]:
    """Whether bubblewrap can build the kernel's sandbox here, and why not if it cannot."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False, "bwrap is not installed (Debian package bubblewrap)"
    argv = [*_bwrap_argv(exe, KernelConfig()), PYTHON, "-I", "-S", "-c", "pass"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=20, env={}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap could not run: {exc}"
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        return False, f"bwrap cannot create the sandbox here: {reason}"
    return True, f"bwrap works ({exe})"


def resolve_tier(requested: str) -> str:
    """The tier to use for ``requested``; fail closed when ``bwrap`` is demanded but absent."""
    if requested == "process":
        return "process"
    ok, reason = bwrap_status()
    if ok:
        return "bwrap"
    if requested == "bwrap":
        raise SandboxUnavailable(f"SCROLL_SANDBOX=bwrap but no kernel can start: {reason}")
    return "process"


def launch_spec(tier: str, config: KernelConfig) -> LaunchSpec:
    if tier == "bwrap":
        exe = shutil.which("bwrap")
        if exe is None:
            raise SandboxUnavailable("bwrap is not installed (Debian package bubblewrap)")
        boot = _BOOT.format(root=SANDBOX_ROOT)
        return LaunchSpec(
            tier=tier,
            argv=[*_bwrap_argv(exe, config), PYTHON, "-I", "-S", "-c", boot],
            env={},
            cwd="/",
            scratch=SANDBOX_SCRATCH,
            host_scratch=None,
            read_roots=(RUNTIME, SANDBOX_ROOT, ZONEINFO),
            allow_sqlite=True,
        )
    scratch = tempfile.mkdtemp(prefix="scroll-kernel-", dir=config.scratch_root)
    return LaunchSpec(
        tier="process",
        argv=[PYTHON, "-I", "-S", "-c", _BOOT.format(root=str(Path(CHILD_DIR).parent))],
        env={"TMPDIR": scratch, "HOME": scratch, "LC_ALL": "C.UTF-8"},
        cwd=scratch,
        scratch=scratch,
        host_scratch=scratch,
        read_roots=(RUNTIME, CHILD_DIR, ZONEINFO, "/dev/null", "/dev/zero", "/dev/urandom"),
        allow_sqlite=False,
    )


def _bwrap_argv(exe: str, config: KernelConfig) -> list[str]:
    argv = [
        exe,
        "--unshare-all",
        "--unshare-user",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv",
        "TMPDIR",
        SANDBOX_SCRATCH,
        "--setenv",
        "HOME",
        SANDBOX_SCRATCH,
        "--setenv",
        "LC_ALL",
        "C.UTF-8",
    ]
    for path in ("/usr/lib", "/usr/lib64"):
        if os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64")):
        if os.path.islink(link):
            argv += ["--symlink", target, link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    argv += ["--ro-bind", RUNTIME, RUNTIME]
    if os.path.isdir(ZONEINFO):
        argv += ["--ro-bind", ZONEINFO, ZONEINFO]
    argv += [
        "--ro-bind",
        CHILD_DIR,
        f"{SANDBOX_ROOT}/child",
        "--dev",
        "/dev",
        "--size",
        str(config.scratch_mb * 1024 * 1024),
        "--tmpfs",
        SANDBOX_SCRATCH,
        "--chdir",
        SANDBOX_SCRATCH,
        "--",
    ]
    return argv
