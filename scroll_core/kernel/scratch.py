"""Removing a kernel's scratch folder, whatever a cell left in it.

``shutil.rmtree`` on Python 3.11 calls itself once per directory level
(``_rmtree_safe_fd``), so a cell that builds a chain a few thousand directories deep
makes it raise ``RecursionError``, which ``ignore_errors`` does not catch; it also holds
one descriptor per level. CPython made it iterative only in later releases (gh-89727),
and no well-kept package does this, so ``remove_tree`` is the host's own.

It walks with an explicit stack and holds one directory descriptor at a time (plus the
tree's parent): every name is resolved relative to a descriptor with
``O_NOFOLLOW | O_DIRECTORY``, so no path is ever long and no symlink is followed out of
the tree (a symlink, FIFO, socket or device is unlinked, never opened). Climbing back up
opens ``..`` and checks it is the directory it came from; a directory that is another
filesystem's mount point is left alone. A directory it may not read or write is made
``u+rwx`` first (a mode-000 directory without following a symlink, through an
``O_PATH`` descriptor). Entries that vanish meanwhile are fine. It never raises: it
returns whether anything is left at the path and logs what it could not remove.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from dataclasses import dataclass, field

__all__ = ["remove_tree"]

log = logging.getLogger("scroll.kernel")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SHOWN = 10  # problems spelled out in the log line; the rest are counted


@dataclass
class _Problems:
    """What could not be removed, kept short: a hostile tree can fail a million times."""

    shown: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, where: str, exc: BaseException) -> None:
        self.count += 1
        if len(self.shown) < _SHOWN:
            self.shown.append(f"{where}: {type(exc).__name__}: {exc}")


@dataclass
class _Frame:
    """A directory being emptied: its name in its parent, its identity, the subdirectories
    still to remove."""

    name: str
    ident: tuple[int, int]
    subdirs: list[str]
    depth: int


def remove_tree(path: str | os.PathLike[str]) -> bool:
    """Remove ``path`` and everything below it, without recursion; see the module docstring.

    True when nothing is left at ``path`` (also when there was nothing to begin with).
    A symlink at ``path`` itself is removed, not followed."""
    problems = _Problems()
    where = repr(path)
    try:
        where = os.path.abspath(os.fspath(path))
        gone = _remove(where, problems)
    except Exception as exc:  # the host's clean-up must never fail its caller
        problems.add("unexpected", exc)
        gone = _absent(where)
    if problems.count:
        log.warning(
            "could not remove all of %s (%d problem%s, gone=%s): %s",
            where,
            problems.count,
            "" if problems.count == 1 else "s",
            gone,
            "; ".join(problems.shown),
        )
    return gone


def _absent(path: str) -> bool:
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except Exception:  # cannot tell: say it may still be there
        return False
    return False


def _remove(path: str, problems: _Problems) -> bool:
    parent, name = os.path.split(path)
    if not name:
        problems.add(path, ValueError("will not remove the root directory"))
        return False
    try:
        base = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError as exc:
        problems.add(parent, exc)
        return _absent(path)
    try:
        try:
            st = os.stat(name, dir_fd=base, follow_symlinks=False)
        except FileNotFoundError:
            return True
        if stat.S_ISDIR(st.st_mode):
            _remove_dir(base, name, st.st_dev, problems)
        else:
            _unlink(base, name, problems, 0)
        try:
            os.stat(name, dir_fd=base, follow_symlinks=False)
        except FileNotFoundError:
            return True
        return False
    finally:
        os.close(base)


def _remove_dir(base: int, name: str, device: int, problems: _Problems) -> None:
    """Empty and remove the directory ``name`` in ``base``; one descriptor held at a time."""
    fd = _open_dir(base, name, device, problems, 0)
    if fd is None:
        return
    try:
        stack = [_Frame(name, _ident(fd), _clear(fd, problems, 1), 1)]
        while stack:  # fd is the directory of stack[-1]
            frame = stack[-1]
            if frame.subdirs:
                child = frame.subdirs.pop()
                below = _open_dir(fd, child, device, problems, frame.depth)
                if below is None:
                    continue
                os.close(fd)
                fd = below
                depth = frame.depth + 1
                stack.append(_Frame(child, _ident(fd), _clear(fd, problems, depth), depth))
                continue
            stack.pop()
            up = base if not stack else _parent(fd, stack[-1].ident, problems, frame.depth)
            os.close(fd)
            fd = -1
            if up is None:
                return  # cannot climb back safely: leave the rest, logged
            _rmdir(up, frame.name, problems, frame.depth - 1)
            if up != base:
                fd = up
    finally:
        if fd >= 0:
            os.close(fd)


def _open_dir(parent: int, name: str, device: int, problems: _Problems, depth: int) -> int | None:
    """A descriptor on the real directory ``name`` in ``parent`` (never through a symlink),
    or None when it is gone or cannot be removed (logged)."""
    try:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except PermissionError:
            _make_searchable(parent, name)
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # no longer a directory: unlink it
            _unlink(parent, name, problems, depth)
        else:
            problems.add(_at(depth, name), exc)
        return None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        problems.add(_at(depth, name), exc)
        return None
    if st.st_dev != device:
        os.close(fd)
        problems.add(_at(depth, name), OSError(errno.EXDEV, "another filesystem is mounted here"))
        return None
    return fd


def _make_searchable(parent: int, name: str) -> None:
    """``u+rwx`` on the directory ``name`` in ``parent``, which we cannot open: chmod through
    an ``O_PATH`` descriptor (no permission needed, no symlink followed)."""
    try:
        fd = os.open(name, _PATH_FLAGS, dir_fd=parent)
    except OSError:
        return
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode) | stat.S_IRWXU
        try:
            os.chmod(f"/proc/self/fd/{fd}", mode)
        except FileNotFoundError:  # no /proc: the name, which was a directory just now
            os.chmod(name, mode, dir_fd=parent)
    except OSError:
        pass  # not ours to change: opening it will fail and say so
    finally:
        os.close(fd)


def _clear(fd: int, problems: _Problems, depth: int) -> list[str]:
    """Unlink everything in the directory ``fd`` that is not a directory; return the names
    of its subdirectories."""
    with contextlib.suppress(OSError):
        mode = os.fstat(fd).st_mode
        if mode & stat.S_IRWXU != stat.S_IRWXU:
            os.fchmod(fd, stat.S_IMODE(mode) | stat.S_IRWXU)
    try:
        with os.scandir(fd) as listing:
            entries = list(listing)
    except OSError as exc:
        problems.add(_at(depth, "(listing)"), exc)
        return []
    subdirs = []
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False  # let unlink say what it is
        if is_dir or _unlink(fd, entry.name, problems, depth):
            subdirs.append(entry.name)
    return subdirs


def _unlink(parent: int, name: str, problems: _Problems, depth: int) -> bool:
    """Unlink ``name``; True when it turned out to be a directory."""
    try:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        return True
    except OSError as exc:
        problems.add(_at(depth, name), exc)
    return False


def _rmdir(parent: int, name: str, problems: _Problems, depth: int) -> None:
    try:
        os.rmdir(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except OSError as exc:
        problems.add(_at(depth, name), exc)


def _parent(fd: int, ident: tuple[int, int], problems: _Problems, depth: int) -> int | None:
    """The directory above ``fd``, if it is still the one we came down from."""
    try:
        up = os.open("..", _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        problems.add(_at(depth, ".."), exc)
        return None
    try:
        same = _ident(up) == ident
    except OSError as exc:
        os.close(up)
        problems.add(_at(depth, ".."), exc)
        return None
    if not same:
        os.close(up)
        problems.add(_at(depth, ".."), OSError(errno.ESTALE, "the tree moved while removed"))
        return None
    return up


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _at(depth: int, name: str) -> str:
    return f"depth {depth}: {name!r}"
