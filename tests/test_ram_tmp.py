"""Where ``make test`` keeps the suite's temporary files (``tests/ram_tmp.py``): a folder on a
RAM filesystem mounted with exec allowed and room to spare, a chosen folder, or the default."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tests import ram_tmp
from tests.conftest import REPO


def test_a_chosen_folder_wins_and_an_empty_choice_means_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv("SCROLL_TEST_TMPDIR", str(tmp_path))
    assert ram_tmp.ram_tmp() == str(tmp_path)
    monkeypatch.setenv("SCROLL_TEST_TMPDIR", "")
    assert ram_tmp.ram_tmp() is None


def test_a_folder_on_a_disk_is_not_taken(monkeypatch):
    monkeypatch.delenv("SCROLL_TEST_TMPDIR", raising=False)
    monkeypatch.setattr(ram_tmp, "RAM_ROOTS", (str(REPO),))
    assert ram_tmp._mount_of(str(REPO))[0] not in {"tmpfs", "ramfs"}
    assert ram_tmp.ram_tmp() is None


def test_a_missing_root_or_too_little_room_is_not_taken(monkeypatch, tmp_path):
    monkeypatch.delenv("SCROLL_TEST_TMPDIR", raising=False)
    monkeypatch.setattr(ram_tmp, "RAM_ROOTS", (str(tmp_path / "absent"),))
    assert ram_tmp.ram_tmp() is None
    if not ram_tmp._usable("/dev/shm"):
        pytest.skip("no RAM filesystem with room here")
    monkeypatch.setattr(ram_tmp, "RAM_ROOTS", ("/dev/shm",))
    monkeypatch.setattr(ram_tmp, "MIN_FREE", 1 << 62)
    assert ram_tmp.ram_tmp() is None


def test_a_ram_folder_is_made_like_tmp_and_printed(monkeypatch):
    monkeypatch.delenv("SCROLL_TEST_TMPDIR", raising=False)
    if not ram_tmp._usable("/dev/shm"):
        pytest.skip("no RAM filesystem with room here")
    assert ram_tmp._mount_of("/dev/shm")[0] in {"tmpfs", "ramfs"}
    folder = ram_tmp.ram_tmp()
    assert folder == "/dev/shm/scroll-tests"
    mode = os.stat(folder).st_mode
    assert stat.S_IMODE(mode) == 0o1777 or os.stat(folder).st_uid != os.getuid()
    env = {k: v for k, v in os.environ.items() if k != "SCROLL_TEST_TMPDIR"}
    printed = subprocess.run(
        [sys.executable, str(REPO / "tests" / "ram_tmp.py")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    assert printed == folder
