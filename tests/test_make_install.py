"""The Makefile's ``install_into``: uv installs into a virtualenv when there is uv, pip does
when there is not (and says so), and a requirement neither can meet fails the install.

Each case installs a wheel built here (one module), with ``--no-index``: no network."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

from tests.servers import in_ci

REPO = Path(__file__).resolve().parents[1]
UV = REPO / ".uv-venv" / "bin" / "uv"


def _wheel(folder: Path, name: str) -> Path:
    """A one-module wheel, ``name`` 1.0, its RECORD hashed as pip checks it."""
    files = {
        f"{name}.py": b"ANSWER = 42\n",
        f"{name}-1.0.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
        ),
        f"{name}-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{name}-1.0.dist-info/RECORD,,")
    files[f"{name}-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


@pytest.fixture(scope="module")
def python(tmp_path_factory):
    """A fresh virtualenv with pip (each test installs a module of its own name into it)."""
    env = tmp_path_factory.mktemp("make-install") / "venv"
    venv.create(env, with_pip=True)
    return env / "bin" / "python"


def _install(python: Path, what: str, uv: Path) -> subprocess.CompletedProcess[str]:
    make = shutil.which("make")
    assert make, "make not found"
    return subprocess.run(
        [
            make, "--no-print-directory", "-C", str(REPO),
            "--eval", f"probe-install: ; $(call install_into,{python},{what})",
            "probe-install", f"UV={uv}",
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _answer(python: Path, name: str) -> str:
    return subprocess.run(
        [str(python), "-c", f"import {name}; print({name}.ANSWER)"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip


def test_without_uv_pip_installs_and_says_so(python, tmp_path):
    wheel = _wheel(tmp_path, "scroll_probe_pip")
    done = _install(python, f"--no-index {wheel}", tmp_path / "no-uv-here")
    assert done.returncode == 0, done.stderr
    assert "installing with pip instead of uv" in done.stderr
    assert _answer(python, "scroll_probe_pip") == "42"


def test_with_uv_uv_installs_and_pip_is_not_called(python, tmp_path):
    if not UV.is_file():
        if in_ci():
            pytest.fail("CI=true and no uv under .uv-venv/ (.ci/run runs make uv)")
        pytest.skip("no uv under .uv-venv/ (make uv)")
    wheel = _wheel(tmp_path, "scroll_probe_uv")
    done = _install(python, f"--no-index {wheel}", UV)
    assert done.returncode == 0, done.stderr
    assert "instead of uv" not in done.stderr
    assert _answer(python, "scroll_probe_uv") == "42"


def test_a_requirement_neither_can_meet_fails_the_install(python, tmp_path):
    missing = tmp_path / "scroll_probe_missing-1.0-py3-none-any.whl"  # never written
    uv = UV if UV.is_file() else tmp_path / "no-uv-here"
    done = _install(python, f"--no-index {missing}", uv)
    assert done.returncode != 0
    assert "installing with pip instead of uv" in done.stderr  # uv failed or was absent
    assert _answer(python, "scroll_probe_missing") == ""  # nothing was installed
