"""Stage one of every kernel: set the limits, put the kernel-enforced layers on, become the worker.

Run as ``python -I -S -c <boot> <options JSON>``. It first gets the scratch quota in place
(``quota``: on the bwrap tier it mounts the capped tmpfs and drops every capability), then
applies the rlimits, installs
``no_new_privs``, Landlock and the seccomp filter (``confine``, which needs ``ctypes``), then
replaces itself with a fresh interpreter running the worker. Layers survive ``execve``;
``ctypes`` does not, so no ``_ctypes`` type is left for a cell to find through
``object.__subclasses__()``.

The filter denies ``execve`` outright and lets ``execveat`` through only on one descriptor,
numbered exactly at the ``RLIMIT_NOFILE`` limit: this stage opens the interpreter there
(close-on-exec) before lowering the limit. After the exec that descriptor is closed and no
process under the filter can create a descriptor with that number (``dup2`` and ``fcntl``
refuse numbers at or over the limit, and the filter refuses raising it). That alone does not
stop an absolute path, which the kernel resolves without looking at the descriptor, so the
filter does not allow even that form: it hands it to a listener only this stage holds, which
lets exactly this stage's exec continue and is closed by it (``no_exec`` in ``confine``).
After the exec nothing can be executed again, in any form.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any

from . import confine, quota

_LIMITS = {
    "memory_bytes": resource.RLIMIT_AS,
    "file_size_bytes": resource.RLIMIT_FSIZE,
    "processes": resource.RLIMIT_NPROC,
    "open_files": resource.RLIMIT_NOFILE,
    "cpu_seconds": resource.RLIMIT_CPU,
}
EXIT_REFUSED = 70


def main() -> None:
    try:
        options: dict[str, Any] = json.loads(sys.argv[1])
        python = str(options["python"])
        scratch_quota = _quota(options)  # first: the bwrap tier's mount drops capabilities
        limits = dict(options.get("limits") or {})
        exec_fd = _open_interpreter(python, int(limits.get("open_files", 256)))
        for key, which in _LIMITS.items():
            value = limits.get(key)
            if value is not None:
                resource.setrlimit(which, (int(value), int(value)))
        layers, missing = _uid(options)
        if scratch_quota is None:
            layers.append("quota")
        else:
            missing["quota"] = scratch_quota
        active, absent, listener = confine.install(
            scratch=str(options["scratch"]),
            read_roots=[str(p) for p in options.get("read_roots") or []],
            require=[r for r in options.get("require") or [] if r not in ("uid", "quota")],
            exec_fd=exec_fd,
        )
        for layer in ("uid", "quota"):
            if layer in (options.get("require") or []) and layer in missing:
                raise RuntimeError(f"{layer} layer required: {missing[layer]}")
    except (OSError, RuntimeError, ValueError, KeyError, IndexError) as exc:
        sys.stderr.write(f"scroll kernel: {exc}\n")
        sys.stderr.flush()
        os._exit(EXIT_REFUSED)
    report = json.dumps({"layers": layers + active, "missing": {**missing, **absent}})
    argv = [python, "-I", "-S", "-c", str(options["boot"]), report]
    try:
        confine.exec_worker(exec_fd, argv, dict(os.environ), listener)
    except (OSError, RuntimeError) as exc:  # RuntimeError: no thread to answer the exec
        sys.stderr.write(f"scroll kernel: {exc}\n")
        sys.stderr.flush()
    os._exit(EXIT_REFUSED)


def _open_interpreter(python: str, limit: int) -> int:
    """Open ``python`` as descriptor number ``limit`` while the soft limit is still higher."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= limit:
        raise RuntimeError(f"open_files {limit} must be below the hard RLIMIT_NOFILE {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    fd = os.open(python, os.O_RDONLY | os.O_CLOEXEC)
    os.dup2(fd, limit, inheritable=False)
    os.close(fd)
    return limit


def _quota(options: dict[str, Any]) -> str | None:
    """Mount the scratch tmpfs if this stage is to (bwrap), then check the filesystem's caps.

    ``None`` when the filesystem enforces the quota, else why not."""
    spec = options.get("quota") or {}
    if not spec:
        return "no scratch quota was asked for"
    scratch, size, inodes = str(options["scratch"]), int(spec["bytes"]), int(spec["inodes"])
    if spec.get("mount"):
        quota.mount(scratch, size, inodes, int(spec.get("uid") or 0))
    elif spec.get("missing"):
        return str(spec["missing"])
    return quota.check(scratch, size, inodes)


def _uid(options: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    layers: list[str] = []
    missing: dict[str, str] = {}
    if options.get("namespaces"):
        layers.append("namespaces")
    uid = options.get("uid")
    if isinstance(uid, int) and os.getuid() == uid and os.geteuid() == uid and uid != 0:
        layers.append(f"uid:{uid}")
    elif uid is None and os.geteuid() != 0:
        missing["uid"] = "the host is not root: the kernel runs as the host's own uid"
    else:
        missing["uid"] = f"expected uid {uid}, running as {os.geteuid()}"
    return layers, missing
