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

from .scratch import remove_tree

__all__ = ["MOUNT_FLAGS", "mount_status", "mount_tmpfs", "release", "tmpfs_options"]

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
        b"scroll-scratch", os.fsencode(path), b"tmpfs", MOUNT_FLAGS, options.encode()
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
