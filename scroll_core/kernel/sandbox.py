"""How a kernel process is launched for each sandbox tier.

``bwrap``: bubblewrap with fresh user, pid, network, ipc, uts and cgroup namespaces, the
runtime and the worker code bound read-only, a tmpfs capped in bytes and inodes as scratch
and cwd (the launch stage mounts it, the one thing it keeps ``CAP_SYS_ADMIN`` in the
sandbox's user namespace for, then drops every capability), an empty environment, and death
with its parent. ``process``: an interpreter
with ``-I -S``, an empty environment and a private scratch directory, started as an
unprivileged uid/gid of its own (no supplementary groups) when the host runs as root, its
scratch a tmpfs capped in bytes and inodes that the host mounts (``scratchfs``; reported
missing where the host may not mount). Each
kernel gets a fresh uid from a high range no account uses, so kernels cannot read each
other's scratch or signal each other through file permissions alone, and one kernel's
threads do not count against another's process limit.

On both tiers the interpreter first runs ``child/launch.py``: it applies the rlimits, puts
the kernel-enforced layers of ``child/confine.py`` on (``no_new_privs``, seccomp,
``no_exec`` where the kernel has seccomp user notification, Landlock where offered), then
execs the worker, which adds the audit hook on top as a first fence. The layers the host
expects are sent as ``require``; a kernel that cannot install them does not start.
``auto`` takes ``bwrap`` when it works and falls back to ``process`` only when the operator
allowed it (``SCROLL_SANDBOX_FALLBACK=process``); otherwise it raises
``SandboxUnavailable``.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SandboxUnavailable
from .child import confine
from .config import KernelConfig
from .scratch import remove_tree
from .scratchfs import mount_tmpfs, sweep_stale

__all__ = [
    "TIER_STRENGTH",
    "LaunchSpec",
    "bwrap_status",
    "landlock_status",
    "launch_spec",
    "layers_of",
    "no_exec_status",
    "resolve_tier",
    "sandbox_attributes",
]

CHILD_DIR = str(Path(__file__).resolve().parent / "child")
PYTHON = os.path.realpath(sys.executable)
RUNTIME = os.path.realpath(sys.base_prefix)
ZONEINFO = "/usr/share/zoneinfo"
SANDBOX_ROOT = "/opt/scroll"
SANDBOX_SCRATCH = "/scratch"
TIER_STRENGTH = {"bwrap": "strong", "process": "weaker"}
MB = 1024 * 1024
UNPRIVILEGED = 65534  # nobody / nogroup: the uid inside bwrap, and the reachability probe
# Process-tier kernels on a root host: uid = gid = KERNEL_UID_BASE + a random offset.
KERNEL_UID_BASE = 0x5C000000
KERNEL_UID_SPAN = 1 << 24
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
# Shared libraries an extension module may load after Landlock is on.
LIBRARY_PATHS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/etc/ld.so.cache")
_BOOT = (
    "import sys; sys.path.insert(0, {root!r}); "
    "from child.worker import main; del sys.path[0]; main()"
)
# Stage one (``child/launch.py``): limits and kernel layers, then exec of ``_BOOT``.
_LAUNCH = (
    "import sys; sys.path.insert(0, {root!r}); "
    "from child.launch import main; del sys.path[0]; main()"
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
    user: int | None = None  # uid and gid to start the process as (process tier, root host)
    confine: dict[str, Any] = field(default_factory=dict)  # what ``launch`` was told
    # Off only in tests that prove the kernel layers hold on their own (a cell that
    # corrupts the interpreter can switch the hook off; nothing can switch those off).
    audit_hook: bool = True

    def child_init(self) -> dict[str, Any]:
        """The sandbox's part of the kernel's ``init`` message."""
        return {"guard": self.audit_hook}


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


@functools.lru_cache(maxsize=1)
def landlock_status() -> tuple[int, str]:
    """The Landlock ABI the running kernel offers (0 when none) and a sentence saying so."""
    return confine.landlock_abi()


@functools.lru_cache(maxsize=1)
def no_exec_status() -> tuple[bool, str]:
    """Whether the running kernel can refuse every exec after the launch stage's one."""
    return confine.no_exec_offered()


def resolve_tier(requested: str, fallback: str = "none") -> str:
    """The tier to use for ``requested``; never silently weaker than asked.

    ``process`` is the operator's explicit choice. ``bwrap`` fails closed when bubblewrap
    cannot run. ``auto`` takes ``bwrap``, and ``process`` only when ``fallback`` allows it.
    """
    if requested == "process":
        return "process"
    ok, reason = bwrap_status()
    if ok:
        return "bwrap"
    if requested == "bwrap":
        raise SandboxUnavailable(f"SCROLL_SANDBOX=bwrap but no kernel can start: {reason}")
    if fallback == "process":
        return "process"
    raise SandboxUnavailable(
        f"SCROLL_SANDBOX=auto and bubblewrap cannot run ({reason}); the weaker process tier "
        "is used only when the operator allows it: set SCROLL_SANDBOX_FALLBACK=process or "
        "SCROLL_SANDBOX=process, or install bubblewrap"
    )


def launch_spec(tier: str, config: KernelConfig) -> LaunchSpec:
    if tier == "bwrap":
        exe = shutil.which("bwrap")
        if exe is None:
            raise SandboxUnavailable("bwrap is not installed (Debian package bubblewrap)")
        read_roots: tuple[str, ...] = (RUNTIME, SANDBOX_ROOT, ZONEINFO)
        options = _confine(read_roots, SANDBOX_SCRATCH, uid=UNPRIVILEGED, namespaces=True)
        options["quota"] = {**_quota(config), "mount": True, "uid": UNPRIVILEGED}
        options["require"].append("quota")
        return LaunchSpec(
            tier=tier,
            argv=[
                *_bwrap_argv(exe, config),
                *_launch_argv(PYTHON, SANDBOX_ROOT, options, config),
            ],
            env={},
            cwd="/",
            scratch=SANDBOX_SCRATCH,
            host_scratch=None,
            read_roots=read_roots,
            allow_sqlite=True,
            confine=options,
        )
    user = KERNEL_UID_BASE + secrets.randbelow(KERNEL_UID_SPAN) if os.geteuid() == 0 else None
    # "other" permission bits decide what any uid that owns nothing can reach: probe once.
    python, runtime, worker_root = _process_runtime(None if user is None else UNPRIVILEGED)
    _sweep_once(os.path.realpath(config.scratch_root or tempfile.gettempdir()))
    scratch = tempfile.mkdtemp(prefix="scroll-kernel-", dir=config.scratch_root)
    if user is not None:
        os.chown(scratch, user, user)
    read_roots = (runtime, worker_root, ZONEINFO, "/dev/null", "/dev/zero", "/dev/urandom")
    options = _confine(read_roots, scratch, uid=user, namespaces=False)
    refused = mount_tmpfs(scratch, config.scratch_mb * MB, config.scratch_inodes, user)
    options["quota"] = {**_quota(config), "mount": False, "missing": refused}
    if refused is None:
        options["require"].append("quota")
    return LaunchSpec(
        tier="process",
        argv=_launch_argv(python, worker_root, options, config),
        env={"TMPDIR": scratch, "HOME": scratch, "LC_ALL": "C.UTF-8"},
        cwd=scratch,
        scratch=scratch,
        host_scratch=scratch,
        read_roots=read_roots,
        allow_sqlite=False,
        user=user,
        confine=options,
    )


@functools.lru_cache(maxsize=8)
def _sweep_once(root: str) -> None:
    """Once per host process and scratch root: scratch mounts left by a killed host go."""
    sweep_stale(root)


def _quota(config: KernelConfig) -> dict[str, int]:
    return {"bytes": config.scratch_mb * MB, "inodes": config.scratch_inodes}


def _launch_argv(
    python: str, root: str, options: dict[str, Any], config: KernelConfig
) -> list[str]:
    stage = {
        **options,
        "python": python,
        "boot": _BOOT.format(root=root),
        "limits": config.limits(),
    }
    return [python, "-I", "-S", "-c", _LAUNCH.format(root=root), json.dumps(stage)]


def _confine(
    read_roots: tuple[str, ...], scratch: str, *, uid: int | None, namespaces: bool
) -> dict[str, Any]:
    require = ["no_new_privs"]
    if confine.machine() in confine.SECCOMP_SYSCALL:
        require.append("seccomp")
        if no_exec_status()[0]:
            require.append("no_exec")
    if landlock_status()[0] > 0:
        require.append("landlock")
    if uid is not None:
        require.append("uid")
    return {
        "scratch": scratch,
        "read_roots": [*read_roots, *LIBRARY_PATHS],
        "require": require,
        "uid": uid,
        "namespaces": namespaces,
    }


@functools.lru_cache(maxsize=2)
def _process_runtime(user: int | None) -> tuple[str, str, str]:
    """(interpreter, its prefix, worker root) that ``user`` can run; SandboxUnavailable if none.

    The worker code is copied to a folder of its own (world-readable, owned by the host):
    Landlock then grants exactly that folder, where the package's parent would expose the
    host's code, and an unprivileged uid can reach it wherever the checkout lives. The
    host's own interpreter may sit where such a uid cannot reach it (a pyenv build under
    ``/root``); the worker needs only the standard library, so any Python 3 it can run
    will do.
    """
    root = _copy_worker()
    if user is None:
        return PYTHON, RUNTIME, root
    candidates = [PYTHON]
    for name in ("python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        for folder in ("/usr/bin", "/usr/local/bin"):
            path = os.path.realpath(f"{folder}/{name}")
            if os.path.isfile(path) and path not in candidates:
                candidates.append(path)
    probe = f"import sys; sys.path.insert(0, {root!r}); import child.worker; print(sys.prefix)"
    tried = []
    for python in candidates:
        try:
            done = subprocess.run(
                [python, "-I", "-S", "-c", probe],
                capture_output=True,
                timeout=20,
                env={},
                cwd="/",
                user=user,
                group=user,
                extra_groups=[],
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            tried.append(f"{python}: {exc}")
            continue
        if done.returncode == 0:
            return python, os.path.realpath(done.stdout.decode().strip()), root
        tried.append(f"{python}: {done.stderr.decode('utf-8', 'replace').strip()[-200:]}")
    raise SandboxUnavailable(
        f"the process tier cannot start a kernel as uid {user}: " + "; ".join(tried)
    )


def _copy_worker() -> str:
    root = tempfile.mkdtemp(prefix="scroll-worker-")
    target = Path(root) / "child"
    shutil.copytree(CHILD_DIR, target, ignore=shutil.ignore_patterns("__pycache__"))
    os.chmod(root, 0o755)
    os.chmod(target, 0o755)
    for file in target.iterdir():
        os.chmod(file, 0o644)
    atexit.register(remove_tree, root)
    return root


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
        # Only the launch stage uses it, to mount the capped scratch, and then drops it.
        "--cap-add",
        "CAP_SYS_ADMIN",
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
    # The four devices the kernel may open (Landlock allows no others), bound one by one:
    # ``--dev /dev`` would make bwrap run the kernel in a nested user namespace that does
    # not own the mount namespace, and the launch stage could not mount the scratch tmpfs.
    argv += ["--dir", "/dev"]
    for device in DEVICES:
        if os.path.exists(device):
            argv += ["--dev-bind", device, device]
    argv += [
        "--ro-bind",
        CHILD_DIR,
        f"{SANDBOX_ROOT}/child",
        "--size",
        str(config.scratch_mb * 1024 * 1024),
        "--tmpfs",
        SANDBOX_SCRATCH,
        "--chdir",
        SANDBOX_SCRATCH,
        "--",
    ]
    return argv


def layers_of(ready: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(active layers, "name: why" of missing ones) from a kernel's ``ready`` message."""
    layers = ready.get("layers")
    missing = ready.get("missing")
    active = tuple(str(x)[:40] for x in layers[:20]) if isinstance(layers, list) else ()
    absent: tuple[str, ...] = ()
    if isinstance(missing, dict):
        absent = tuple(f"{k}: {v}"[:200] for k, v in list(missing.items())[:20])
    return active, absent


def sandbox_attributes(
    tier: str, layers: tuple[str, ...], missing: tuple[str, ...]
) -> dict[str, Any]:
    """Span attributes that put the sandbox in force on every span of a kernel."""
    return {
        "scroll.sandbox.tier": tier,
        "scroll.sandbox.strength": TIER_STRENGTH.get(tier, "unknown"),
        "scroll.sandbox.layers": list(layers),
        "scroll.sandbox.missing": list(missing) or None,
    }
