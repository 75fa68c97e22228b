"""A process-tier kernel's scratch as a filesystem of its own: bytes and inodes both capped.

The audit hook counts files a cell creates by watching ``open`` with ``O_CREAT``, which
misses ``O_TMPFILE`` files, directories and hard links; a folder on the host's disk then
holds whatever a cell writes. A tmpfs mounted on the scratch folder with ``size`` and
``nr_inodes`` makes the Linux kernel count instead: every regular file (named or
``O_TMPFILE``), directory, symlink and hard link takes an inode from ``nr_inodes``, and
every page of data, linked or not, counts against ``size``. Past either, the call fails
with ``ENOSPC`` inside the cell. ``MS_NOSUID | MS_NODEV | MS_NOEXEC`` on top.

Mounting needs ``CAP_SYS_ADMIN`` in the host's mount namespace, which a root host
normally has (the process tier runs kernels as their own uid only there anyway). Where the
mount is refused, the kernel starts with the ``quota`` layer reported missing and the
reason; see docs/security.md for what the process tier bounds then. (The bwrap tier mounts
its own tmpfs inside the sandbox's namespaces: ``child/launch.py``.)

Python 3.11 has no ``os.mount``; this calls libc's ``mount``/``umount2`` through ctypes,
in the host only.
"""

from __future__ import annotations

import ctypes
import functools
import os
import tempfile
import time

from .scratch import remove_tree

__all__ = [
    "MOUNT_FLAGS",
    "mount_status",
    "mount_tmpfs",
    "release",
    "sweep_stale",
    "tmpfs_options",
]

SOURCE = "scroll-scratch"  # the mount's source name: how a sweep recognises its own
STALE_AFTER_S = 120.0
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MOUNT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC
_MNT_DETACH = 2


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def tmpfs_options(size_bytes: int, inodes: int, uid: int | None) -> str:
    """The tmpfs option string: the caps, and the root owned by the kernel's uid."""
    owner = "" if uid is None else f",uid={uid},gid={uid}"
    return f"size={int(size_bytes)},nr_inodes={int(inodes)},mode=0700{owner}"


def mount_tmpfs(path: str, size_bytes: int, inodes: int, uid: int | None) -> str | None:
    """Mount a capped tmpfs on ``path``; ``None`` on success, else why it was refused."""
    options = tmpfs_options(size_bytes, inodes, uid)
    result = _libc().mount(
        SOURCE.encode(), os.fsencode(path), b"tmpfs", MOUNT_FLAGS, options.encode()
    )
    if result != 0:
        err = ctypes.get_errno()
        return f"the host cannot mount a tmpfs on the scratch folder ({os.strerror(err)})"
    return None


@functools.lru_cache(maxsize=1)
def mount_status() -> tuple[bool, str]:
    """Whether this host can give a process-tier kernel its capped scratch, and why not."""
    probe = tempfile.mkdtemp(prefix="scroll-mount-probe-")
    try:
        refused = mount_tmpfs(probe, 1 << 20, 16, None)
        return refused is None, refused or "the host mounts a capped tmpfs per kernel"
    finally:
        release(probe)


def release(path: str) -> bool:
    """Unmount ``path`` if a tmpfs sits there, then remove the folder; never raises.

    The unmount is lazy (``MNT_DETACH``): a kernel process that still holds the scratch as
    its cwd does not keep it mounted, and its memory goes back when the last user lets go.
    A cell's tree, however deep, goes with the mount: nothing is walked."""
    if os.path.ismount(path):
        _libc().umount2(os.fsencode(path), _MNT_DETACH)
    return remove_tree(path)


def sweep_stale(root: str, older_than_s: float = STALE_AFTER_S) -> list[str]:
    """Release scratch mounts under ``root`` that no process uses any more; the folders gone.

    A host killed with SIGKILL cannot unmount its kernels' scratch, and a mount, unlike a
    folder, stays in the host's mount table until someone does. A scratch mount is stale
    when no process has its working directory inside it (a live kernel always has: the
    worker runs in its scratch) and it is older than ``older_than_s`` (a scratch just mounted
    for a kernel still starting has no process yet). Never raises."""
    root = os.path.realpath(root)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as table:
            mounts = [line.split() for line in table]
    except OSError:
        return []
    ours = []
    for fields in mounts:
        if "-" not in fields:
            continue
        after = fields[fields.index("-") + 1 :]
        point = fields[4].replace("\\040", " ")
        if after[:2] == ["tmpfs", SOURCE] and os.path.dirname(point) == root:
            ours.append(point)
    if not ours:
        return []
    in_use = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                in_use.add(os.readlink(f"/proc/{pid}/cwd"))
            except OSError:
                continue
    now = time.time()
    swept = []
    for point in ours:
        if any(cwd == point or cwd.startswith(point + "/") for cwd in in_use):
            continue
        try:
            if now - os.stat(point).st_mtime < older_than_s:
                continue
        except OSError:
            continue
        release(point)
        swept.append(point)
    return swept
