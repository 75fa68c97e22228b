"""The scratch quota, counted by the filesystem: the launch stage's part (layer ``quota``).

Scratch is a tmpfs with ``size`` and ``nr_inodes`` set, so the Linux kernel, not the
audit hook, counts what a cell stores: every file (``O_TMPFILE`` ones too), directory,
symlink and hard link takes an inode, every page of data counts against the size, and past
either the call fails with ``ENOSPC``.

On the bwrap tier this stage mounts it: bubblewrap cannot set ``nr_inodes`` on its own
``--tmpfs``, so it starts this stage with ``CAP_SYS_ADMIN`` in the sandbox's user namespace
(``--cap-add``; a capability over that namespace's mounts only). The stage mounts the tmpfs
over ``/scratch`` before anything else, then drops every capability (ambient, effective,
permitted, inheritable) and checks with ``capget`` that none is left. The worker runs as
uid 65534 with ``no_new_privs``, so its exec could not regain any either way. On the
process tier the host mounted it (``scratchfs``). On both, ``check`` reads the limits back
with ``statvfs``: the layer is reported only when the filesystem itself enforces them.
"""

from __future__ import annotations

import os
import struct
from typing import Any

_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522
# struct __user_cap_header_struct {u32 version; int pid}; two data words of 3 x u32.
_CAP_DATA = struct.Struct("<6I")
_CAPSET_NR = {"x86_64": (125, 126), "aarch64": (90, 91)}  # (capget, capset)


def mount(scratch: str, size_bytes: int, inodes: int, uid: int) -> None:
    """Mount the capped tmpfs on ``scratch`` and drop every capability; ``OSError`` if not."""
    import ctypes
    import platform

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    options = f"size={size_bytes},nr_inodes={inodes},mode=0700,uid={uid},gid={uid}"
    try:
        flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
        if libc.mount(b"scroll-scratch", scratch.encode(), b"tmpfs", flags, options.encode()):
            raise OSError(ctypes.get_errno(), f"mount of the scratch tmpfs on {scratch}")
    finally:
        _drop_capabilities(libc, ctypes, platform.machine().lower())


def _drop_capabilities(libc: Any, ctypes: Any, arch: str) -> None:
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    capget, capset = _CAPSET_NR.get(arch, (-1, -1))
    if capget < 0:
        raise OSError(0, f"no capget/capset numbers for {arch}")
    header = ctypes.create_string_buffer(struct.pack("<Ii", _CAP_VERSION_3, 0), 8)
    data = ctypes.create_string_buffer(_CAP_DATA.pack(0, 0, 0, 0, 0, 0), _CAP_DATA.size)
    if libc.syscall(capset, header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset to no capabilities")
    left = ctypes.create_string_buffer(_CAP_DATA.size)
    header = ctypes.create_string_buffer(struct.pack("<Ii", _CAP_VERSION_3, 0), 8)
    if libc.syscall(capget, header, left) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    if any(_CAP_DATA.unpack(left.raw)) or libc.prctl(_PR_CAP_AMBIENT, 1, 21, 0, 0) == 1:
        raise OSError(0, "capabilities are left after dropping them")


def check(scratch: str, size_bytes: int, inodes: int) -> str | None:
    """Why the filesystem at ``scratch`` does not enforce the quota, or ``None`` if it does."""
    try:
        fs = os.statvfs(scratch)
    except OSError as exc:
        return f"statvfs of scratch failed ({exc})"
    size = fs.f_blocks * fs.f_frsize
    if fs.f_files == 0 or fs.f_files > inodes:
        return f"scratch allows {fs.f_files or 'unlimited'} inodes, not {inodes}"
    if size == 0 or size > size_bytes + fs.f_frsize:
        return f"scratch holds {size} bytes, not {size_bytes}"
    return None
