"""The scratch quota is counted by the filesystem, on both tiers (issue 31, findings 5 and 6).

Before it, the process tier's scratch was a folder on the host's disk and the audit hook
counted only ``open(..., O_CREAT)``: 240 anonymous 4 MB ``O_TMPFILE`` files got past
``max_created_files=16, scratch_mb=32``, and directories were not counted on either tier
(3.08 M of them in a bwrap tmpfs raised the host's unreclaimable slab by 2.5 GB). Each
flood below must now stop at the stated cap with ``ENOSPC`` in the cell, the result must
say which quota was reached, and the session must go on.

Hard links are refused by the audit hook before they reach the filesystem, so that test
runs with the hook off: the filesystem is what has to hold once a cell has switched the
hook off.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess

import pytest

from scroll_core.kernel import Kernel, KernelConfig, bwrap_status, client, sandbox, scratchfs

BWRAP_OK, BWRAP_WHY = bwrap_status()
MOUNT_OK, MOUNT_WHY = scratchfs.mount_status()
TIERS = [
    pytest.param("process", marks=pytest.mark.skipif(not MOUNT_OK, reason=MOUNT_WHY)),
    pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=BWRAP_WHY)),
]
SCRATCH_MB = 32
INODES = 600
CONFIG = dict(
    timeout_s=20, grace_s=0.5, scratch_mb=SCRATCH_MB, scratch_inodes=INODES, max_created_files=16
)


@pytest.fixture(params=TIERS)
def kernel(request):
    config = KernelConfig(sandbox=request.param, **CONFIG)
    with Kernel(config) as kernel:
        yield kernel


def assert_stopped_at_the_quota(kernel: Kernel, result) -> None:
    assert result.status == "error", result
    assert result.error is not None and result.error.type == "OSError", result.error
    assert "No space left on device" in result.error.message
    assert result.limit == "scratch"
    assert result.notice == (
        f"the scratch quota ({SCRATCH_MB} MB, {INODES} files, directories and links) is "
        "full; delete files in scratch to free it"
    )


def test_both_tiers_put_the_quota_layer_on(kernel):
    assert "quota" in kernel.layers
    assert not [m for m in kernel.missing_layers if m.startswith("quota")]
    result = kernel.execute("import os\nfs = os.statvfs('.')\nprint(fs.f_files)")
    assert result.stdout == f"{INODES}\n"


def test_an_o_tmpfile_flood_stops_at_the_byte_quota(kernel):
    # 16 anonymous 4 MB files, as in the finding: twice the quota, none made with O_CREAT
    # (the audit hook now counts them too, but only from the 17th).
    flood = (
        "import os\nheld = []\nchunk = b'x' * (4 << 20)\n"
        "for _ in range(16):\n"
        "    fd = os.open('.', os.O_TMPFILE | os.O_RDWR)\n"
        "    held.append(fd)\n"
        "    os.write(fd, chunk)\n"
    )
    assert_stopped_at_the_quota(kernel, kernel.execute(flood))
    written = kernel.execute(
        "print(sum(os.fstat(fd).st_size for fd in held))\nfor fd in held: os.close(fd)"
    )
    assert written.status == "ok"
    assert int(written.stdout) <= SCRATCH_MB << 20
    after = kernel.execute("open('kept.txt', 'w').write('room again')\nprint('ok')")
    assert after.status == "ok" and after.stdout == "ok\n"


def test_a_directory_flood_stops_at_the_inode_quota(kernel):
    flood = (
        "import os\nmade = 0\n"
        f"for i in range({INODES * 3}):\n"
        "    os.mkdir(f'd{i}')\n"
        "    made += 1\n"
    )
    assert_stopped_at_the_quota(kernel, kernel.execute(flood))
    made = kernel.execute("print(made)")
    assert 0 < int(made.stdout) < INODES
    # A chain uses inodes the same way as a flat flood.
    chain = "for i in range(50): os.rmdir(f'd{i}')\n"
    chain += "depth = 0\nwhile True:\n    os.mkdir('c')\n    os.chdir('c')\n    depth += 1\n"
    assert_stopped_at_the_quota(kernel, kernel.execute(chain))
    after = kernel.execute("print(depth)")
    assert after.status == "ok" and 0 < int(after.stdout) <= 50


def test_hard_links_count_against_the_inode_quota_with_the_audit_hook_off(monkeypatch):
    """os.link is refused by the hook; without it the filesystem still counts each link."""

    def without_hook(tier: str, config: KernelConfig) -> sandbox.LaunchSpec:
        return dataclasses.replace(sandbox.launch_spec(tier, config), audit_hook=False)

    monkeypatch.setattr(client, "launch_spec", without_hook)
    for param in TIERS:
        if any(mark.args[0] for mark in param.marks):
            continue
        with Kernel(KernelConfig(sandbox=param.values[0], **CONFIG)) as kernel:
            assert "audit_hook" not in kernel.layers
            flood = (
                "import os\nopen('f', 'w').close()\nlinks = 0\n"
                f"for i in range({INODES * 3}):\n"
                "    os.link('f', f'l{i}')\n"
                "    links += 1\n"
            )
            assert_stopped_at_the_quota(kernel, kernel.execute(flood))
            links = kernel.execute("print(links, os.stat('f').st_nlink)")
            count, nlink = map(int, links.stdout.split())
            assert 0 < count < INODES and nlink == count + 1
            assert kernel.execute("print('fine')").stdout == "fine\n"


@pytest.mark.skipif(not MOUNT_OK, reason=MOUNT_WHY)
def test_the_process_tiers_scratch_is_unmounted_and_removed_with_the_kernel():
    with Kernel(KernelConfig(sandbox="process", **CONFIG)) as kernel:
        spec = kernel._spec
        assert spec is not None and spec.host_scratch is not None
        folder = spec.host_scratch
        assert os.path.ismount(folder)
        fs = os.statvfs(folder)
        assert fs.f_files == INODES and fs.f_blocks * fs.f_frsize == SCRATCH_MB << 20
        assert kernel.execute("import os\nos._exit(3)").status == "killed"
        assert not os.path.lexists(folder)  # the dead kernel's mount went with it
        assert kernel._spec is not None and os.path.ismount(kernel._spec.host_scratch or "")


@pytest.mark.skipif(not MOUNT_OK, reason=MOUNT_WHY)
def test_scratch_mounts_a_killed_host_left_are_swept_and_live_ones_kept(tmp_path):
    stale, live, young = (str(tmp_path / name) for name in ("stale", "live", "young"))
    for folder in (stale, live, young):
        os.mkdir(folder)
        assert scratchfs.mount_tmpfs(folder, 1 << 20, 16, None) is None
    os.utime(stale, (0, 0))
    os.utime(live, (0, 0))
    holder = subprocess.Popen(["sleep", "30"], cwd=live)  # a kernel still working in it
    try:
        assert scratchfs.sweep_stale(str(tmp_path)) == [stale]
        assert not os.path.lexists(stale)
        assert os.path.ismount(live) and os.path.ismount(young)
    finally:
        holder.kill()
        holder.wait()
        for folder in (live, young):
            scratchfs.release(folder)
