"""Start kernel processes from one long-lived thread.

``bwrap --die-with-parent`` (PR_SET_PDEATHSIG) ties the sandbox to the *thread* that forked
it, not the process: a kernel started from a short-lived request thread would die with that
thread. Forking every kernel from this one daemon thread ties them to the host process.

``user`` starts the process as that uid and gid with no supplementary groups (the
``process`` tier on a root host): the drop happens between fork and exec, so the kernel's
interpreter never runs a single instruction as root.
"""

from __future__ import annotations

import queue
import subprocess
import threading
from concurrent.futures import Future

__all__ = ["spawn"]

_Job = tuple[list[str], dict[str, str], str, int | None, "Future[subprocess.Popen[bytes]]"]
_jobs: queue.Queue[_Job] = queue.Queue()
_started = False
_start_lock = threading.Lock()


def spawn(
    argv: list[str], env: dict[str, str], cwd: str, user: int | None = None
) -> subprocess.Popen[bytes]:
    _ensure_thread()
    done: Future[subprocess.Popen[bytes]] = Future()
    _jobs.put((argv, env, cwd, user, done))
    return done.result()


def _ensure_thread() -> None:
    global _started
    with _start_lock:
        if not _started:
            threading.Thread(target=_run, name="scroll-kernel-spawner", daemon=True).start()
            _started = True


def _run() -> None:
    while True:
        argv, env, cwd, user, done = _jobs.get()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                bufsize=0,
                close_fds=True,
                start_new_session=True,
                user=user,
                group=user,
                extra_groups=None if user is None else [],
            )
        except BaseException as exc:
            done.set_exception(exc)
        else:
            done.set_result(proc)
