"""Hostile directory trees a cell could leave in its scratch folder, for the clean-up tests.

Standard library only: ``tests/test_kernel_cleanup.py`` also copies this file next to
``scroll_core/kernel/scratch.py`` and runs both as an unprivileged uid with the system
interpreter, where modes bind (root reads and writes through any of them).

Each builder fills ``tree`` (an existing, empty directory) and may point at ``outside``
(a directory beside the tree, made by ``make_outside``), which must survive unchanged.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

DEPTH = 3000
_DIR = os.O_RDONLY | os.O_DIRECTORY


def deep_chain(tree: Path, outside: Path) -> None:
    """``d/d/d/...`` DEPTH deep with a file at the bottom, every step a relative open."""
    fd = os.open(tree, _DIR)
    try:
        for _ in range(DEPTH):
            os.mkdir("d", dir_fd=fd)
            below = os.open("d", _DIR, dir_fd=fd)
            os.close(fd)
            fd = below
        os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
        os.symlink(str(outside), "out", dir_fd=fd)
    finally:
        os.close(fd)


def symlink_loop(tree: Path, outside: Path) -> None:
    os.symlink("b", tree / "a")
    os.symlink("a", tree / "b")
    (tree / "sub").mkdir()
    os.symlink("..", tree / "sub" / "up")
    os.symlink(".", tree / "sub" / "self")
    os.symlink(str(tree), tree / "sub" / "root")


def symlink_outside(tree: Path, outside: Path) -> None:
    os.symlink(str(outside), tree / "out")
    os.symlink(str(outside / "keep.txt"), tree / "out_file")
    (tree / "sub").mkdir()
    os.symlink(str(outside), tree / "sub" / "out")
    os.symlink("../../" + outside.name, tree / "sub" / "relative_out")


def locked_dir(tree: Path, outside: Path) -> None:
    """A directory with mode 000, with a locked directory and a symlink out inside it."""
    locked = tree / "locked"
    (locked / "inner").mkdir(parents=True)
    (locked / "inner" / "f").write_text("x")
    (locked / "f").write_text("x")
    os.symlink(str(outside), locked / "out")
    os.chmod(locked / "inner", 0)
    os.chmod(locked, 0)


def locked_file(tree: Path, outside: Path) -> None:
    """A file with mode 000 inside a directory with mode 500."""
    folder = tree / "read_only"
    folder.mkdir()
    (folder / "secret").write_text("x")
    os.chmod(folder / "secret", 0)
    os.chmod(folder, 0o500)


def locked_root(tree: Path, outside: Path) -> None:
    """The tree's own directory with mode 000."""
    (tree / "sub").mkdir()
    (tree / "sub" / "f").write_text("x")
    os.chmod(tree, 0)


def special_files(tree: Path, outside: Path) -> None:
    """A FIFO (never to be opened: that would block) and a socket, at the top and below."""
    (tree / "sub").mkdir()
    for folder in (tree, tree / "sub"):
        os.mkfifo(folder / "fifo")
        os.mknod(folder / "sock", stat.S_IFSOCK | 0o600)


BUILDERS: dict[str, Callable[[Path, Path], None]] = {
    "deep_chain": deep_chain,
    "symlink_loop": symlink_loop,
    "symlink_outside": symlink_outside,
    "locked_dir": locked_dir,
    "locked_file": locked_file,
    "locked_root": locked_root,
    "special_files": special_files,
}


def make_outside(outside: Path) -> None:
    """A directory beside the tree that nothing may touch; read-only, so that a chmod or
    an unlink through a symlink would show."""
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    os.chmod(outside / "keep.txt", 0o400)
    os.chmod(outside, 0o500)


def snapshot(outside: Path) -> dict[str, list[object]]:
    """Each entry of ``outside`` (and itself) with its mode, inode and content."""
    seen: dict[str, list[object]] = {}
    for path in (outside, *sorted(outside.iterdir())):
        st = os.lstat(path)
        body = path.read_text() if stat.S_ISREG(st.st_mode) else None
        seen[path.name] = [st.st_mode, st.st_ino, body]
    return seen


def build(name: str, root: Path) -> tuple[Path, Path]:
    """The tree ``name`` at ``root/tree`` and its ``root/outside``; returns both."""
    tree, outside = root / "tree", root / "outside"
    make_outside(outside)
    tree.mkdir()
    BUILDERS[name](tree, outside)
    return tree, outside
