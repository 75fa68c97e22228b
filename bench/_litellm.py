"""LiteLLM's proxy in a subprocess, the peer ``bench/gateway.py --peers litellm`` times beside
Scroll: one process (``--num_workers 1``), one model (``bench``) routed to the bench's
loopback upstream, a master key and no database (so it logs nothing: no spend rows, no
request log; Scroll writes every call to its Event Log).

Its virtualenv is its own (``make litellm``): ``--litellm-venv``, else ``SCROLL_LITELLM_VENV``,
else ``.litellm-venv`` in the repository. Asked for and missing, the bench stops with an error
that says how to build it; it never skips the arm.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from _common import REPO

__all__ = ["MASTER_KEY", "LiteLLMProxy", "litellm_venv"]

MASTER_KEY = "sk-scroll-bench"


def litellm_venv(option: str | None) -> Path:
    """The virtualenv named by ``option``, ``SCROLL_LITELLM_VENV`` or the default; raises
    SystemExit with what to do when it has no ``litellm`` command."""
    chosen = option or os.environ.get("SCROLL_LITELLM_VENV") or str(REPO / ".litellm-venv")
    venv = Path(chosen).expanduser()
    if not (venv / "bin" / "litellm").is_file():
        raise SystemExit(
            f"the LiteLLM arm needs LiteLLM's proxy in a virtualenv: {venv}/bin/litellm is "
            "missing. Build it with `make litellm`, or name one with --litellm-venv or "
            "SCROLL_LITELLM_VENV."
        )
    return venv


class LiteLLMProxy:
    """``litellm --config`` on 127.0.0.1:``port`` from ``venv``, routing model ``bench`` to
    ``upstream_url`` (an OpenAI-compatible ``.../v1``)."""

    def __init__(self, venv: Path, folder: Path, port: int, upstream_url: str) -> None:
        self.venv = venv
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        folder.mkdir(parents=True, exist_ok=True)
        self.config = folder / "litellm.yaml"
        # JSON is YAML: no YAML writer needed here.
        self.config.write_text(
            "{"
            '"model_list": [{"model_name": "bench", "litellm_params": {"model": "openai/bench", '
            f'"api_base": "{upstream_url}", "api_key": "none"}}}}], '
            f'"general_settings": {{"master_key": "{MASTER_KEY}"}}'
            "}\n"
        )
        self.log = (folder / "litellm.log").open("wb")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float) -> None:
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("OTEL_", "DATABASE_URL", "LITELLM_"))
        }
        # Offline: the bundled model cost map, not the one fetched at start; errors only.
        env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
        self.proc = subprocess.Popen(
            [str(self.venv / "bin" / "litellm"), "--config", str(self.config),
             "--host", "127.0.0.1", "--port", str(self.port), "--num_workers", "1"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"litellm exited with {self.proc.returncode}; see {self.log.name}"
                )
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"litellm did not listen within {timeout:g} s; see {self.log.name}")

    def version(self) -> str:
        """The installed ``litellm`` distribution's version."""
        return subprocess.run(
            [str(self.venv / "bin" / "python"), "-c",
             "import importlib.metadata as m; print(m.version('litellm'))"],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout.strip()  # fmt: skip

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("litellm is not started")
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()
