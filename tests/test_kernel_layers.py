"""The kernel-enforced layers hold on their own, with the audit hook switched off.

A cell that corrupts interpreter memory can switch the audit hook off (the escape corpus
has such a cell). These tests start real kernels without the hook, which is where such a
cell ends up, and check that every attempt still fails with the errno of a kernel layer:
``EPERM`` from seccomp, ``EACCES`` from Landlock or the dropped uid (``ENOENT`` where the
bwrap namespace does not even mount the path). Planted files and the Event Log are world
readable and writable, so file permissions alone would not stop the attempts on a host that
is not root: Landlock does.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from scroll_core import EventLog, telemetry
from scroll_core.kernel import Kernel, KernelConfig, KernelError, bwrap_status, client, sandbox
from scroll_core.kernel.child import confine

BWRAP_OK, BWRAP_WHY = bwrap_status()
TIERS = [
    "process",
    pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=BWRAP_WHY)),
]
TOKEN = "tok-91c2e7-layers-secret"
ROOT = os.geteuid() == 0
LANDLOCK = sandbox.landlock_status()[0] > 0
NO_EXEC = confine.no_exec_offered()[0]
# What a path the bwrap namespace never mounts answers, next to the layers' own errno.
GONE = {errno.ENOENT}


def without_audit_hook(tier: str, config: KernelConfig) -> sandbox.LaunchSpec:
    return dataclasses.replace(sandbox.launch_spec(tier, config), audit_hook=False)


@pytest.fixture(scope="module")
def host():
    root = Path(tempfile.mkdtemp(prefix="scroll-layers-"))
    os.chmod(root, 0o777)
    secret = root / "secret.txt"
    secret.write_text(TOKEN)
    os.chmod(secret, 0o666)
    log = EventLog(root / "eventlog.sqlite3")
    log.append(session_id="s", kind="context_msg", content=f"the password is {TOKEN}")
    os.chmod(log.path, 0o666)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield {
        "root": root,
        "secret": secret,
        "log": log,
        "port": listener.getsockname()[1],
        "accepted": accepted,
        "canary": root / "canary",
    }
    stop.set()
    thread.join()
    listener.close()
    log.close()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module", params=TIERS)
def bare(request):
    """A kernel of each tier with the kernel layers on and the audit hook off."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(client, "launch_spec", without_audit_hook)
        config = KernelConfig(sandbox=request.param, timeout_s=10, grace_s=0.5)
        with Kernel(config) as kernel:
            yield kernel


def attempt(kernel: Kernel, code: str) -> int | str:
    """Run ``code``; the errno it failed with, or what it printed if it did not fail."""
    body = "\n".join("    " + line for line in code.splitlines())
    cell = (
        f"try:\n{body}\n    print('ESCAPED')\nexcept OSError as e:\n    print('errno', e.errno)\n"
    )
    result = kernel.execute(cell)
    assert result.status == "ok", result
    assert TOKEN not in result.stdout
    text = result.stdout.strip()
    return int(text.split()[1]) if text.startswith("errno ") else text


def assert_unharmed(host, kernel: Kernel) -> None:
    assert host["secret"].read_text() == TOKEN
    assert host["log"].count() == 1 and TOKEN in host["log"].get(1).content
    assert not host["canary"].exists()
    assert host["accepted"] == []
    assert kernel.execute("print('alive')").stdout == "alive\n"


def file_errnos(kernel: Kernel) -> set[int]:
    return {errno.EACCES} | (GONE if kernel.tier == "bwrap" else set())


def test_the_kernel_really_runs_without_the_audit_hook(bare):
    assert "audit_hook" not in bare.layers
    assert any(m.startswith("audit_hook") for m in bare.missing_layers)
    # The layers were put on by the launch stage, which then exec'd this interpreter: none
    # of the ctypes it used is left, not even a type reachable through __subclasses__.
    result = bare.execute(
        "import sys\nseen, todo = set(), [object]\nwhile todo:\n"
        "    for c in type.__subclasses__(todo.pop()):\n"
        "        if c not in seen: seen.add(c); todo.append(c)\n"
        "print([n for n in sys.modules if 'ctypes' in n], "
        "[c for c in seen if 'ctypes' in c.__module__])"
    )
    assert result.stdout == "[] []\n"


def test_the_interpreter_cannot_be_executed_again(bare, host):
    # The launch stage exec'd the worker through descriptor number RLIMIT_NOFILE, the one
    # execveat seccomp lets through; no descriptor with that number can exist any more, and
    # the filter's listener, which let that one exec continue, is gone: the kernel answers
    # ENOSYS before it even looks at the descriptor. glibc's fexecve then tries
    # /proc/self/fd/N with execve (EPERM), and says ENOSYS where /proc is not mounted (bwrap).
    limit = bare.config.open_files
    assert attempt(bare, f"import os; os.dup2(0, {limit})") == errno.EBADF
    refused = attempt(bare, f"import os; os.execve({limit}, ['sh'], {{}})")
    assert refused == (errno.ENOSYS if bare.tier == "bwrap" else errno.EPERM)
    code = "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))"
    assert bare.execute(f"try:\n    {code}\nexcept ValueError as e:\n    print(e)").stdout == (
        "not allowed to raise maximum limit\n"
    )
    assert_unharmed(host, bare)


@pytest.mark.skipif(not LANDLOCK, reason="this kernel offers no Landlock")
def test_a_planted_world_readable_secret_stays_unread(bare, host):
    assert attempt(bare, f"print(open({str(host['secret'])!r}).read())") in file_errnos(bare)
    assert_unharmed(host, bare)


@pytest.mark.skipif(not LANDLOCK, reason="this kernel offers no Landlock")
@pytest.mark.parametrize("pid", ["1", "os.getppid()", "os.getpid()"])
def test_no_process_environment_can_be_read_through_proc(bare, host, pid):
    code = f"import os\nprint(open(f'/proc/{{{pid}}}/environ', 'rb').read())"
    assert attempt(bare, code) in file_errnos(bare)
    assert_unharmed(host, bare)


@pytest.mark.parametrize(
    "code",
    [
        "import os; os.execv('/bin/sh', ['sh', '-c', 'touch $canary'])",
        "import subprocess; subprocess.run(['/bin/sh', '-c', 'touch $canary'])",
        "import os; os.posix_spawn('/bin/sh', ['sh', '-c', 'touch $canary'], {})",
        "import os\nif os.fork() == 0:\n    open('$canary', 'w')\n    os._exit(0)",
    ],
    ids=["execv", "subprocess", "posix_spawn", "fork"],
)
def test_no_shell_and_no_new_process_is_started(bare, host, code):
    assert attempt(bare, code.replace("$canary", str(host["canary"]))) == errno.EPERM
    assert_unharmed(host, bare)


# The image a successful exec would start: it leaves a marker in scratch and on stderr.
NEW_IMAGE = (
    "import os; open(os.getcwd() + '/exec-marker', 'w').write('ran'); "
    "os.write(2, b'NEW IMAGE RAN\\n')"
)
NEEDS_NO_EXEC = pytest.mark.skipif(not NO_EXEC, reason="no seccomp user notification here")
EXEC_NR = {"x86_64": (59, 322), "aarch64": (221, 281)}.get(confine.machine(), (-1, -1))
RAW_EXEC = (
    "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    f"argv = [sys.executable, '-I', '-S', '-c', {NEW_IMAGE!r}]\n"
    "args = (ctypes.c_char_p * 6)(*[a.encode() for a in argv], None)\n"
    "env = (ctypes.c_char_p * 1)(None)\npath = sys.executable.encode()\n"
    "if libc.syscall($call) != 0:\n    raise OSError(ctypes.get_errno(), 'exec')"
)


@pytest.mark.skipif(EXEC_NR[0] < 0, reason="no syscall numbers for this machine")
@pytest.mark.parametrize(
    ("call", "expected"),
    [
        # The red team's form: with an absolute path the kernel ignores the descriptor, so
        # the one execveat the launch stage needed would run any file Landlock allows.
        pytest.param(
            f"{EXEC_NR[1]}, $exec_fd, path, args, env, 0x1000", errno.ENOSYS, marks=NEEDS_NO_EXEC
        ),
        # The launch stage's own form: its listener is gone, the kernel answers ENOSYS.
        pytest.param(
            f"{EXEC_NR[1]}, $exec_fd, b'', args, env, 0x1000", errno.ENOSYS, marks=NEEDS_NO_EXEC
        ),
        (f"{EXEC_NR[1]}, -100, path, args, env, 0", errno.EPERM),  # AT_FDCWD
        (f"{EXEC_NR[1]}, 0, path, args, env, 0x1000", errno.EPERM),
        (f"{EXEC_NR[0]}, path, args, env", errno.EPERM),  # execve
        (None, errno.EPERM),  # os.execv
    ],
    ids=[
        "execveat_absolute_path",
        "execveat_exec_fd",
        "execveat_fdcwd",
        "execveat_other_fd",
        "execve_raw",
        "os_execv",
    ],
)
def test_nothing_is_executed_after_launch(bare, host, call, expected):
    # Only the launch stage's one exec was ever allowed; the worker runs no new image in any
    # form, and the kernel that tried is the same process afterwards.
    if call is None:
        code = f"import os, sys; os.execv(sys.executable, ['python', '-c', {NEW_IMAGE!r}])"
    else:
        code = RAW_EXEC.replace("$call", call.replace("$exec_fd", str(bare.config.open_files)))
    pid, restarts, stderr = bare.pid, bare.restarts, bare._stderr_tail
    body = "\n".join("    " + line for line in code.splitlines())
    result = bare.execute(f"try:\n{body}\nexcept OSError as e:\n    print('errno', e.errno)")
    if bare.restarts != restarts:  # the worker is gone: let its stderr drain
        time.sleep(1)
    seen = b"".join(stderr).decode("utf-8", "replace")
    assert "NEW IMAGE RAN" not in seen and (bare.pid, bare.restarts) == (pid, restarts), (
        result,
        seen,
    )
    assert result.status == "ok" and result.stdout == f"errno {expected}\n", result
    assert bare.execute("import os; print(os.path.exists('exec-marker'))").stdout == "False\n"
    assert_unharmed(host, bare)


@pytest.mark.skipif(EXEC_NR[0] < 0, reason="no syscall numbers for this machine")
def test_no_seccomp_listener_of_its_own_can_let_an_exec_through(bare, host):
    # A newer filter's listener would be asked first; seccomp() refuses to create one (a
    # kernel that got that far with no program would answer EFAULT, not EPERM).
    nr = confine.SECCOMP_SYSCALL[confine.machine()]
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"if libc.syscall({nr}, 1, 0x8, None) != 0:\n"
        "    raise OSError(ctypes.get_errno(), 'seccomp')"
    )
    assert attempt(bare, code) == errno.EPERM
    assert "no_exec" in bare.layers or not NO_EXEC
    assert_unharmed(host, bare)


def test_no_loopback_connection_is_made(bare, host):
    code = f"import socket; socket.create_connection(('127.0.0.1', {host['port']}), 2)"
    assert attempt(bare, code) == errno.EPERM
    assert_unharmed(host, bare)


@pytest.mark.skipif(not LANDLOCK, reason="this kernel offers no Landlock")
def test_the_event_log_file_cannot_be_written(bare, host):
    code = f"open({str(host['log'].path)!r}, 'ab').write(b'x' * 4096)"
    assert attempt(bare, code) in file_errnos(bare) | {errno.EROFS}
    assert_unharmed(host, bare)


@pytest.mark.skipif(not LANDLOCK, reason="this kernel offers no Landlock")
def test_nothing_is_written_outside_scratch(bare, host):
    code = f"open({str(host['canary'])!r}, 'w').write('ESCAPED')"
    assert attempt(bare, code) in file_errnos(bare) | {errno.EROFS}
    assert_unharmed(host, bare)


def test_the_parent_cannot_be_signalled(bare, host):
    assert attempt(bare, "import os; os.kill(os.getppid(), 0)") == errno.EPERM
    assert_unharmed(host, bare)


def test_the_resource_limits_cannot_be_changed(bare, host):
    # Lowering is always allowed by Linux; only seccomp's EPERM (which Python words as
    # "not allowed to raise") refuses it.
    result = bare.execute(
        "import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))\n"
        "except ValueError as e:\n    print(e)"
    )
    assert result.stdout == "not allowed to raise maximum limit\n"
    assert_unharmed(host, bare)


def test_scratch_threads_and_imports_still_work(bare):
    result = bare.execute(
        "import json, threading\nopen('note.txt', 'w').write('hi')\nout = []\n"
        "t = threading.Thread(target=lambda: out.append(json.dumps(open('note.txt').read())))\n"
        "t.start(); t.join(); print(out)"
    )
    assert result.stdout == "['\"hi\"']\n"


@pytest.mark.skipif(not ROOT, reason="the uid is dropped only when the host runs as root")
def test_each_process_kernel_runs_as_its_own_uid_and_root_files_in_scratch_stay_closed():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(client, "launch_spec", without_audit_hook)
        with Kernel(KernelConfig(sandbox="process")) as kernel:
            spec = kernel._spec
            assert spec is not None and spec.host_scratch is not None
            uid = os.stat(spec.host_scratch).st_uid
            assert spec.user == uid and uid >= sandbox.KERNEL_UID_BASE
            planted = Path(spec.host_scratch) / "root-only.txt"
            planted.write_text(TOKEN)
            os.chmod(planted, 0o600)
            ids = kernel.execute("import os; print(os.getuid(), os.getgid(), os.getgroups())")
            assert ids.stdout == f"{uid} {uid} []\n"
            # Landlock allows scratch; only the uid keeps this file closed.
            assert attempt(kernel, "print(open('root-only.txt').read())") == errno.EACCES
            assert f"uid:{uid}" in kernel.layers
            with Kernel(KernelConfig(sandbox="process")) as other:
                assert other._spec is not None and other._spec.user != uid
                code = f"print(sorted(os.listdir({spec.host_scratch!r})))"
                assert attempt(other, "import os\n" + code) == errno.EACCES


@pytest.fixture
def with_hook(monkeypatch):
    monkeypatch.setattr(client, "launch_spec", sandbox.launch_spec)


@pytest.mark.parametrize("tier", TIERS)
def test_status_and_every_span_name_the_tier_and_its_layers(tier, with_hook):
    state = telemetry.configure(ring_size=100)
    try:
        assert client.launch_spec is sandbox.launch_spec
        with Kernel(KernelConfig(sandbox=tier)) as kernel:
            status = kernel.status()
            kernel.execute("print(1)")
            kernel.restart()
        ring = state.ring
        spans = ring.records(prefix="execute_tool") + ring.records("scroll.kernel.restart")
    finally:
        telemetry.reset()
    expected = {"no_new_privs", "seccomp", "audit_hook"}
    if LANDLOCK:
        expected.add("landlock")
    if NO_EXEC:
        expected.add("no_exec")
    else:
        assert any(m.startswith("no_exec") for m in status.missing_layers)
    if tier == "bwrap":
        expected |= {"namespaces", "uid"}
    elif ROOT:
        expected.add("uid")
    assert {layer.split(":")[0] for layer in status.layers} >= expected
    if not LANDLOCK:
        assert any(m.startswith("landlock") for m in status.missing_layers)
    assert len(spans) == 2
    for record in spans:
        assert record.attributes["scroll.sandbox.tier"] == tier
        assert record.attributes["scroll.sandbox.strength"] == sandbox.TIER_STRENGTH[tier]
        assert list(record.attributes["scroll.sandbox.layers"]) == list(status.layers)


def test_a_kernel_that_cannot_install_a_required_layer_does_not_start(monkeypatch):
    expect = sandbox._confine

    def demanding(*args, **kwargs):
        options = expect(*args, **kwargs)
        return {**options, "require": [*options["require"], "time_travel"]}

    monkeypatch.setattr(sandbox, "_confine", demanding)
    with pytest.raises(KernelError, match="did not start"):
        Kernel(KernelConfig(sandbox="process", start_timeout_s=10))


FALLBACK = """
import json, os, sys
from scroll_core.kernel.child import confine
confine._LISTENER_FLAGS |= 1 << 30  # a flag no kernel knows, as the 5.7 ones before 5.7
offered = confine.no_exec_offered()[0]
fd = os.open(sys.executable, os.O_RDONLY)
active, missing, listener = confine.install(
    scratch=os.getcwd(), read_roots=[], require=["seccomp"], exec_fd=fd
)
try:
    confine.install(scratch=os.getcwd(), read_roots=[], require=["no_exec"], exec_fd=fd)
    refused = ""
except RuntimeError as exc:
    refused = str(exc)
print(json.dumps([offered, active, sorted(missing), listener, refused]))
"""


@pytest.mark.skipif(confine.machine() not in confine.SECCOMP_SYSCALL, reason="no filter here")
def test_without_seccomp_user_notification_no_exec_is_reported_missing(tmp_path):
    # The filter still goes on (with a plain allow for the launch stage's exec form), the
    # layer is reported missing, and a host that requires it gets no kernel.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", FALLBACK], cwd=tmp_path, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    offered, active, missing, listener, refused = json.loads(done.stdout)
    assert offered is False and listener == -1
    assert "seccomp" in active and "no_exec" not in active and "no_exec" in missing
    assert refused.startswith("kernel layers required but not installed: no_exec (")


# -- the seccomp program itself, run by a classic-BPF interpreter -----------------------
ALLOW, EPERM, ENOSYS, NOTIFY = 0x7FFF0000, 0x00050001, 0x00050026, 0x7FC00000
X86_64, I386, AARCH64 = 0xC000003E, 0x40000003, 0xC00000B7


def run_filter(program: bytes, nr: int, arch: int, *args: int) -> int:
    """Evaluate ``program`` on one ``struct seccomp_data`` as the Linux kernel would."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


PID = 4242
EXEC_FD = 256
THREAD = 0x00010000 | 0x00000100 | 0x00000800  # CLONE_THREAD | CLONE_VM | CLONE_SIGHAND
PTR = 0x7FFF_0000_1000


@pytest.mark.parametrize(
    ("nr", "arch", "args", "expected"),
    [
        (0, X86_64, (), ALLOW),  # read
        (59, X86_64, (), EPERM),  # execve
        (322, X86_64, (), EPERM),  # execveat
        (57, X86_64, (), EPERM),  # fork
        (41, X86_64, (), EPERM),  # socket
        (101, X86_64, (), EPERM),  # ptrace
        (0, I386, (), EPERM),  # any call through the 32-bit table
        (0x40000000 | 59, X86_64, (), EPERM),  # x32 execve
        (0x40000000, X86_64, (), EPERM),  # x32 read
        (56, X86_64, (THREAD,), ALLOW),  # clone of a thread
        (56, X86_64, (17,), EPERM),  # clone(SIGCHLD): fork
        (56, X86_64, (THREAD | 0x10000000,), EPERM),  # a thread in a new user namespace
        (435, X86_64, (PTR,), ENOSYS),  # clone3: glibc falls back to clone
        (302, X86_64, (0, 9, 0, PTR), ALLOW),  # prlimit64 read of RLIMIT_AS
        (302, X86_64, (0, 9, PTR, 0), EPERM),  # prlimit64 set RLIMIT_AS
        (302, X86_64, (0, 9, PTR & ~0xFFFFFFFF, 0), EPERM),  # pointer with a zero low word
        (302, X86_64, (0, 0, PTR, 0), ALLOW),  # its own CPU soft limit
        (302, X86_64, (1, 0, PTR, 0), EPERM),  # another process's limits
        (160, X86_64, (), EPERM),  # setrlimit
        (62, X86_64, (PID, 2), ALLOW),  # kill itself
        (62, X86_64, (1, 9), EPERM),  # kill init
        (62, X86_64, ((-PID) & 0xFFFFFFFF, 9), EPERM),  # kill a process group
        (234, X86_64, (PID, PID + 1, 2), ALLOW),  # tgkill one of its own threads
        (234, X86_64, (1, 1, 9), EPERM),
        (157, X86_64, (4, 1), EPERM),  # prctl(PR_SET_DUMPABLE, 1)
        (157, X86_64, (38, 1), ALLOW),  # prctl(PR_SET_NO_NEW_PRIVS, 1)
        (426, X86_64, (), EPERM),  # io_uring_enter
        # The launch stage's exec, or an absolute path with the same descriptor and flag:
        # the listener decides, and it lets one exec through, the launch stage's.
        (322, X86_64, (EXEC_FD, PTR, PTR, PTR, 0x1000), NOTIFY),
        (322, X86_64, (3, PTR, PTR, PTR, 0x1000), EPERM),  # any other descriptor
        (322, X86_64, (EXEC_FD, PTR, PTR, PTR, 0), EPERM),  # a path relative to it
        (322, X86_64, ((-100) & 0xFFFFFFFF, PTR, PTR, PTR, 0), EPERM),  # AT_FDCWD
        (317, X86_64, (1, 0x8, PTR), EPERM),  # seccomp(): a listener that would say continue
        (317, X86_64, (1, 0x1 | 0x8 | 0x10, PTR), EPERM),
        (317, X86_64, (1, 0x1, PTR), ALLOW),  # a stricter filter of its own is harmless
    ],
)
def test_the_x86_64_seccomp_filter_decides_each_call(nr, arch, args, expected):
    program = confine.seccomp_program(PID, "x86_64", EXEC_FD, exec_once=True)
    assert run_filter(program, nr, arch, *args) == expected


def test_without_a_listener_the_filter_allows_the_exec_form_and_nothing_else():
    # The fallback for kernels without seccomp user notification (no_exec missing).
    program = confine.seccomp_program(PID, "x86_64", EXEC_FD)
    assert run_filter(program, 322, X86_64, EXEC_FD, PTR, PTR, PTR, 0x1000) == ALLOW
    assert run_filter(program, 322, X86_64, 3, PTR, PTR, PTR, 0x1000) == EPERM
    assert run_filter(program, 59, X86_64) == EPERM
    assert run_filter(program, 317, X86_64, 1, 0x8, PTR) == EPERM


def test_the_aarch64_filter_checks_its_own_arch_and_numbers():
    program = confine.seccomp_program(PID, "aarch64", EXEC_FD, exec_once=True)
    assert run_filter(program, 221, AARCH64) == EPERM  # execve
    assert run_filter(program, 281, AARCH64, EXEC_FD, PTR, PTR, PTR, 0x1000) == NOTIFY
    assert run_filter(program, 281, AARCH64, 3, PTR, PTR, PTR, 0x1000) == EPERM
    assert run_filter(program, 277, AARCH64, 1, 0x8, PTR) == EPERM  # seccomp NEW_LISTENER
    assert run_filter(program, 220, AARCH64, 17) == EPERM  # clone(SIGCHLD)
    assert run_filter(program, 220, AARCH64, THREAD) == ALLOW
    assert run_filter(program, 63, AARCH64) == ALLOW  # read
    assert run_filter(program, 63, X86_64) == EPERM
