"""The folder the test suite keeps its temporary files in: one on a RAM filesystem when the
machine has one to spare, else none (the default temporary folder).

Every test writes files: SQLite logs, the data folders of the throwaway PostgreSQL and Redis
servers (``tests/servers.py``), kernels' work folders, and about 600 fresh PostgreSQL
databases, each a copy of its template's 8 MB. On a disk the kernel writes all of that back,
and on a virtual machine the writeback costs CPU the suite is bound by: ``CREATE DATABASE``
took 200-290 ms of the machine's CPU on disk against 15-16 ms on tmpfs, and the embedded pass
944 against 844 CPU-s, 500 against 444 s (2 cores, 2026-12-05; ``make test`` passes the
folder as ``TMPDIR``). Nothing the tests check depends on it: the disk-full faults mount
tmpfs of their own, and the suite passes either way.

``python tests/ram_tmp.py`` prints the folder (made world-writable and sticky, as ``/tmp``
is: the servers run as ``postgres``, sandboxed cells as users of their own), or nothing
when there is no RAM filesystem mounted with exec allowed, with ``MIN_FREE`` free on it
and in memory. ``SCROLL_TEST_TMPDIR`` chooses the folder instead (empty: the default).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MIN_FREE", "RAM_ROOTS", "ram_tmp"]

# Where a RAM filesystem is mounted on Linux for every user.
RAM_ROOTS = ("/dev/shm",)
# Free space the suite needs at least, on the filesystem and in memory (tmpfs pages are
# memory): its files peak well under 1 GiB.
MIN_FREE = 4 << 30
_RAM_TYPES = {"tmpfs", "ramfs"}


def _mount_of(path: str) -> tuple[str, set[str]] | None:
    """The filesystem type and mount options of the mount ``path`` is on."""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    best: tuple[int, str, set[str]] | None = None
    real = os.path.realpath(path)
    for line in lines:
        fields = line.split()
        if len(fields) < 4:
            continue
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):
            best = (len(point), fields[2], set(fields[3].split(",")))
    return (best[1], best[2]) if best else None


def _available_memory() -> int:
    """MemAvailable, in bytes (0 when it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _usable(root: str) -> bool:
    if not os.path.isdir(root) or not os.access(root, os.W_OK | os.X_OK):
        return False
    mount = _mount_of(root)
    if mount is None or mount[0] not in _RAM_TYPES or "noexec" in mount[1]:
        return False
    stats = os.statvfs(root)
    return stats.f_bavail * stats.f_frsize >= MIN_FREE and _available_memory() >= MIN_FREE


def ram_tmp() -> str | None:
    """The folder for the suite's temporary files, made if needed; None for the default."""
    chosen = os.environ.get("SCROLL_TEST_TMPDIR")
    if chosen is not None:
        return chosen or None
    for root in RAM_ROOTS:
        if not _usable(root):
            continue
        folder = Path(root) / "scroll-tests"
        try:
            folder.mkdir(exist_ok=True)
            if folder.stat().st_uid == os.getuid():
                folder.chmod(0o1777)
        except OSError:
            continue
        if os.access(folder, os.W_OK | os.X_OK):
            return str(folder)
    return None


if __name__ == "__main__":
    print(ram_tmp() or "")
