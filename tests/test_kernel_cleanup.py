"""A cell cannot make the host's clean-up of a kernel fail (issue 31, finding 2).

A cell can leave its scratch folder as hostile as its sandbox lets it: a directory chain
thousands deep (built with relative ``dir_fd`` opens, so no path is ever long), then die.
The host's clean-up must still remove the folder, and the session's next cell must get a
fresh kernel and run, not raise on every later cell.

The first half builds hostile trees in ``tmp_path`` and removes them with ``remove_tree``
(in this process, and as an unprivileged owner where the test runs as root, since root
reads and writes through any mode); the second half runs a real kernel on each tier. The
``bwrap`` tier's scratch is a tmpfs inside the sandbox, gone with it, so only the
``process`` tier leaves a host folder to check; on both the next cell must run.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scroll_core.kernel import (
    Kernel,
    KernelConfig,
    bwrap_status,
    client,
    sandbox,
    scratch,
    scratchfs,
)
from scroll_core.kernel.scratch import remove_tree
from tests import hostile_trees
from tests.hostile_trees import BUILDERS, DEPTH, build, snapshot

BWRAP_OK, BWRAP_WHY = bwrap_status()
TIERS = [
    "process",
    pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=BWRAP_WHY)),
]
NOBODY = 65534
SCRATCH_PY = Path(scratch.__file__)

# -- remove_tree on hostile trees ------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path``, emptied afterwards even when the test failed: pytest's own clean-up of
    old temporary folders is ``shutil.rmtree`` and would choke on a deep chain left behind."""
    yield tmp_path
    for entry in tmp_path.iterdir():
        remove_tree(entry)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_hostile_tree_is_removed_and_nothing_outside_it_is_touched(root, name, caplog):
    tree, outside = build(name, root)
    before = snapshot(outside)
    with caplog.at_level(logging.WARNING, logger="scroll.kernel"):
        assert remove_tree(tree) is True
    assert not os.path.lexists(tree)
    assert sorted(os.listdir(root)) == ["outside"]
    assert snapshot(outside) == before
    assert not caplog.records


def test_a_deep_chain_is_removed_with_few_descriptors_to_spare(root):
    """One directory descriptor at a time: a chain far deeper than the descriptor limit."""
    tree, _ = build("deep_chain", root)
    load = (
        "import importlib.util, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))\n"
        "spec = importlib.util.spec_from_file_location('scratch', sys.argv[1])\n"
        "module = sys.modules['scratch'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "print(module.remove_tree(sys.argv[2]))\n"
    )

    done = subprocess.run(
        [sys.executable, "-I", "-c", load, str(SCRATCH_PY), str(tree)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"True\n"
    assert not os.path.lexists(tree)


def _unprivileged_python() -> str | None:
    for python in (os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            done = subprocess.run(
                [python, "-I", "-S", "-c", "pass"],
                capture_output=True,
                timeout=30,
                user=NOBODY,
                group=NOBODY,
                extra_groups=[],
                cwd="/",
                check=False,
            )
        except OSError:
            continue
        if done.returncode == 0:
            return python
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="not root: the test above already binds modes")
def test_hostile_trees_are_removed_by_their_unprivileged_owner():
    """As root every mode is bypassed; as the uid that owns the tree (a process-tier kernel
    on a host that is not root runs as the host's uid) the chmod paths must do the work."""
    python = _unprivileged_python()
    if python is None:
        pytest.skip(f"no interpreter uid {NOBODY} can run")
    base = Path(tempfile.mkdtemp(prefix="scroll-cleanup-test-"))
    try:
        code, work = base / "code", base / "work"
        code.mkdir()
        work.mkdir()
        shutil.copy(SCRATCH_PY, code / "scratch.py")
        shutil.copy(hostile_trees.__file__, code / "hostile_trees.py")
        for path in (base, code, *code.iterdir()):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        os.chown(work, NOBODY, NOBODY)
        script = (
            "import json, os, sys\n"
            "from pathlib import Path\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "from hostile_trees import BUILDERS, build, snapshot\n"
            "from scratch import remove_tree\n"
            "seen = {}\n"
            "for name in sorted(BUILDERS):\n"
            "    root = Path(sys.argv[2]) / name\n"
            "    root.mkdir()\n"
            "    tree, outside = build(name, root)\n"
            "    before = snapshot(outside)\n"
            "    gone = remove_tree(tree)\n"
            "    seen[name] = [gone, os.path.lexists(tree), os.listdir(root),\n"
            "                  snapshot(outside) == before]\n"
            "print(json.dumps(seen))\n"
        )
        done = subprocess.run(
            [python, "-I", "-S", "-c", script, str(code), str(work)],
            capture_output=True,
            timeout=300,
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            cwd="/",
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        assert done.stderr == b""  # nothing logged: every problem was handled
        seen = json.loads(done.stdout)
        assert seen == {name: [True, False, ["outside"], True] for name in BUILDERS}
    finally:
        assert remove_tree(base)


def test_what_is_not_there_is_gone(root):
    assert remove_tree(root / "never") is True


def test_a_file_or_a_symlink_at_the_path_itself_is_unlinked_not_followed(root):
    target = root / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    (root / "link").symlink_to(target)
    (root / "file").write_text("x")
    assert remove_tree(root / "link") is True
    assert remove_tree(str(root / "file")) is True
    assert sorted(os.listdir(root)) == ["target"]
    assert (target / "keep").read_text() == "x"


def test_entries_that_vanish_while_it_runs_are_fine(root, monkeypatch, caplog):
    tree = root / "tree"
    for i in range(3):
        (tree / f"full{i}").mkdir(parents=True)
        (tree / f"full{i}" / "f").write_text("x")
        (tree / f"gone{i}").mkdir()
        (tree / f"file{i}").write_text("x")
    real_open, real_unlink, real_rmdir = os.open, os.unlink, os.rmdir

    def opening(path, flags, mode=0o777, *, dir_fd=None):
        if isinstance(path, str) and path.startswith("gone"):
            real_rmdir(path, dir_fd=dir_fd)  # removed by someone else just before
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def unlinking(path, *, dir_fd=None):
        real_unlink(path, dir_fd=dir_fd)
        real_unlink(path, dir_fd=dir_fd)  # raises FileNotFoundError: it vanished

    def removing(path, *, dir_fd=None):
        real_rmdir(path, dir_fd=dir_fd)
        real_rmdir(path, dir_fd=dir_fd)

    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING, "scroll.kernel"):
        patch.setattr(os, "open", opening)
        patch.setattr(os, "unlink", unlinking)
        patch.setattr(os, "rmdir", removing)
        assert remove_tree(tree) is True
    assert not os.path.lexists(tree)
    assert not caplog.records


def test_what_it_cannot_remove_is_logged_and_the_rest_is_removed(root, monkeypatch, caplog):
    tree = root / "tree"
    (tree / "stuck").mkdir(parents=True)
    (tree / "stuck" / "f").write_text("x")
    (tree / "other").mkdir()
    real_rmdir = os.rmdir

    def removing(path, *, dir_fd=None):
        if path == "stuck":
            raise PermissionError(errno.EPERM, "Operation not permitted", path)
        real_rmdir(path, dir_fd=dir_fd)

    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING, "scroll.kernel"):
        patch.setattr(os, "rmdir", removing)
        assert remove_tree(tree) is False
    assert os.listdir(tree) == ["stuck"]
    assert os.listdir(tree / "stuck") == []
    assert "could not remove all of" in caplog.text and "'stuck'" in caplog.text


def test_an_unexpected_failure_is_logged_not_raised(root, monkeypatch, caplog):
    tree = root / "tree"
    tree.mkdir()

    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING, "scroll.kernel"):
        patch.setattr(scratch, "_clear", broken)
        assert remove_tree(tree) is False
    assert "RecursionError" in caplog.text


# -- a real kernel on each tier ----------------------------------------------------------------

# Run inside the kernel: the os module as a cell can use it, one descriptor held at a time.
DEEP_CHAIN = f"""
import os
fd = os.open('.', os.O_RDONLY | os.O_DIRECTORY)
for _ in range({DEPTH}):
    os.mkdir('d', dir_fd=fd)
    below = os.open('d', os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = below
os.close(fd)
print('built', {DEPTH})
"""


@pytest.fixture(params=TIERS)
def kernel(request: pytest.FixtureRequest) -> Iterator[Kernel]:
    config = KernelConfig(sandbox=request.param, timeout_s=60, grace_s=0.5, memory_mb=512)
    with Kernel(config) as k:
        yield k


def _host_scratch(kernel: Kernel) -> str | None:
    spec = kernel._spec
    assert spec is not None
    return spec.host_scratch


def _depth(root: str) -> int:
    """How deep the chain ``d/d/d/...`` below ``root`` goes, read with relative opens."""
    depth = 0
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            try:
                below = os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                return depth
            os.close(fd)
            fd = below
            depth += 1
    finally:
        os.close(fd)


def test_a_kernel_that_dies_over_a_deep_chain_is_replaced_and_its_scratch_removed(kernel):
    folder = _host_scratch(kernel)
    built = kernel.execute(DEEP_CHAIN)
    assert built.status == "ok", built.observation()
    assert built.stdout == f"built {DEPTH}\n"
    if folder is not None:  # the process tier's scratch is a host folder
        assert _depth(folder) == DEPTH

    died = kernel.execute("import os\nos._exit(3)")
    assert died.status == "killed" and died.variables_lost

    after = kernel.execute("print(6 * 7)")
    assert after.status == "ok", after.observation()
    assert after.stdout == "42\n"
    assert kernel.alive
    if folder is not None:
        assert not os.path.lexists(folder)
        assert _host_scratch(kernel) != folder


def test_a_kernel_killed_by_the_host_over_a_deep_chain_is_replaced(kernel):
    folder = _host_scratch(kernel)
    assert kernel.execute(DEEP_CHAIN).stdout == f"built {DEPTH}\n"
    kernel._terminate()  # killed from outside, between cells
    assert kernel._proc is not None
    kernel._proc.wait(timeout=30)

    after = kernel.execute("print('fresh')")
    assert after.stdout == "fresh\n"
    assert after.variables_lost
    if folder is not None:
        assert not os.path.lexists(folder)


def test_closing_a_kernel_over_a_deep_chain_removes_its_scratch(kernel):
    folder = _host_scratch(kernel)
    assert kernel.execute(DEEP_CHAIN).stdout == f"built {DEPTH}\n"
    kernel.close()
    assert not kernel.alive
    if folder is not None:
        assert not os.path.lexists(folder)


def test_a_kernel_whose_clean_up_raises_is_still_replaced_whole(monkeypatch):
    """Whatever fails while the old process is cleaned up, nothing of it is kept: the
    session's next cell starts a fresh kernel instead of failing the same way again."""
    config = KernelConfig(sandbox="process", timeout_s=30, grace_s=0.5, memory_mb=512)
    with Kernel(config) as kernel:
        folder = _host_scratch(kernel)
        assert folder is not None

        def failing(path: str) -> bool:
            raise RuntimeError("clean-up failed")

        with monkeypatch.context() as patch:
            patch.setattr(client.scratchfs, "release", failing)
            with pytest.raises(RuntimeError, match="clean-up failed"):
                kernel.execute("import os\nos._exit(3)")
            assert kernel._proc is None and kernel._spec is None
        try:
            after = kernel.execute("print('fresh')")
            assert after.status == "ok" and after.stdout == "fresh\n"
            assert _host_scratch(kernel) != folder
        finally:
            assert scratchfs.release(folder)


def test_the_worker_copy_is_removed_at_exit_without_recursion(monkeypatch):
    registered = []
    monkeypatch.setattr(sandbox.atexit, "register", lambda *call: registered.append(call))
    root = sandbox._copy_worker()
    assert registered == [(remove_tree, root)]
    assert remove_tree(root) and not os.path.lexists(root)
