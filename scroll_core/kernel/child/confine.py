"""Kernel-enforced layers a kernel process puts on itself before any user code runs.

The audit hook in ``guard`` is a Python fence: a cell that corrupts the interpreter can
switch it off. What this module installs lives in the Linux kernel, cannot be undone from
inside the process and is inherited across ``execve`` (``launch`` installs it, then execs
the worker):

- ``no_new_privs``: no exec can ever gain privileges (needed for the two below);
- Landlock, where the running kernel offers it: the runtime read-only, scratch writable,
  nothing else (no ``/proc``, no ``/etc``, no home, no Event Log); TCP bind/connect and
  signals/abstract sockets outside the process are scoped away where the ABI has them;
- a seccomp filter: ``execve`` and ``execveat`` (except ``execveat(exec_fd, ...,
  AT_EMPTY_PATH)``, the form ``launch`` uses to exec the worker, which the filter hands to
  a listener that dies with that exec: see "no exec after launch" below), process-creating
  ``clone``/``fork``/``vfork`` (threads, ``clone`` with ``CLONE_THREAD``, stay allowed:
  the worker has a reader thread and cells may start threads), sockets, ``ptrace``,
  ``process_vm_*``, ``mknod``, ``mount``, namespaces, ``keyctl``, ``bpf``,
  ``perf_event_open``, ``io_uring`` (which could issue socket operations without a syscall
  of its own), signals to other processes, and changing any rlimit except this process's
  own CPU soft limit (which cannot pass the hard limit: the kernel has no
  ``CAP_SYS_RESOURCE``). Denied calls fail with ``EPERM`` so Python raises a plain
  ``PermissionError``; ``clone3`` fails with ``ENOSYS`` so glibc falls back to ``clone``,
  whose flags the filter can read.

No exec after launch (layer ``no_exec``). A seccomp filter cannot read the path an
``execveat`` names, and with an absolute path the kernel ignores the descriptor, so an
allowed ``execveat(exec_fd, "/usr/bin/python3", ..., AT_EMPTY_PATH)`` would run any file
Landlock lets it. The filter therefore never allows that form: it returns
``SECCOMP_RET_USER_NOTIF``, and the listener it was installed with lives only in the launch
stage. A thread there answers exactly one notification, the launch stage's own exec, with
"continue"; the exec then kills that thread and closes the listener (close-on-exec), and
from then on the kernel fails every notified call with ``ENOSYS``, whatever its path. The
worker cannot install a listener of its own to answer in its place: the filter refuses
``seccomp()`` with ``SECCOMP_FILTER_FLAG_NEW_LISTENER``. (A second filter installed by the
worker after the exec would need ``ctypes`` there, which the worker must not have.) Kernels
older than Linux 5.7 lack the flags this needs; the launch stage then installs the filter
with a plain allow for that form and reports ``no_exec`` missing.

Why a hand-built classic BPF program instead of libseccomp: the kernel runs ``python -I -S``
with an empty environment, where neither Debian's ``python3-seccomp`` (only in
``/usr/lib/python3/dist-packages`` of Debian's own interpreter) nor PyPI ``pyseccomp`` (in
the host's virtualenv) can be imported, and libseccomp itself may be absent. The filter is
about sixty instructions; its arch check denies foreign-ABI calls (i386 through
``int 0x80``) and the x32 bit, so it cannot be walked around by another syscall table.

``ctypes`` is used only in the first stage (``launch``); the worker that runs cells is a
fresh image without it.
"""

from __future__ import annotations

import os
import platform
import struct
from typing import Any, NoReturn

# prctl options
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_NO_NEW_PRIVS = 39

# seccomp
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
_SECCOMP_FILTER_FLAG_TSYNC_ESRCH = 1 << 4
_LISTENER_FLAGS = (
    _SECCOMP_FILTER_FLAG_TSYNC
    | _SECCOMP_FILTER_FLAG_TSYNC_ESRCH
    | _SECCOMP_FILTER_FLAG_NEW_LISTENER
)
_RET_ALLOW = 0x7FFF0000
_RET_USER_NOTIF = 0x7FC00000
_RET_ERRNO = 0x00050000
_EPERM, _EINTR, _EFAULT, _EINVAL, _ENOSYS = 1, 4, 14, 22, 38
# struct seccomp_notif (80 bytes) and seccomp_notif_resp (24); _IOWR('!', 0 and 1, ...).
_NOTIF_SIZE, _NOTIF_RESP_SIZE = 80, 24
_NOTIF_RECV, _NOTIF_SEND = 0xC0502100, 0xC0182101
_NOTIF_FLAG_CONTINUE = 1
_LD_ABS_W = 0x20
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45
_RET = 0x06
_CLONE_THREAD = 0x00010000
_AT_EMPTY_PATH = 0x1000
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: never, even for a thread.
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
_CLONE_NAMESPACES |= 0x20000000 | 0x40000000
_RLIMIT_CPU = 0

# Landlock
_LL_CREATE_RULESET_VERSION = 1
_LL_RULE_PATH_BENEATH = 1
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2  # ABI 6


class _Arch:
    def __init__(self, audit: int, x32: bool, numbers: dict[str, int]) -> None:
        self.audit, self.x32, self.nr = audit, x32, numbers


# Only the numbers the filter names. x86_64 from arch/x86/entry/syscalls/syscall_64.tbl,
# aarch64 from include/uapi/asm-generic/unistd.h (no fork, vfork, mknod there).
_X86_64 = _Arch(
    0xC000003E,
    True,
    {
        "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "clone": 56, "clone3": 435,
        "socket": 41, "socketpair": 53, "connect": 42, "bind": 49, "listen": 50,
        "accept": 43, "accept4": 288, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "mknod": 133, "mknodat": 259, "mount": 165, "umount2": 166,
        "pivot_root": 155, "chroot": 161, "setrlimit": 160, "prlimit64": 302, "unshare": 272,
        "setns": 308, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
        "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "pidfd_open": 434,
        "pidfd_send_signal": 424, "pidfd_getfd": 438, "process_madvise": 440, "kcmp": 312,
        "open_by_handle_at": 304, "name_to_handle_at": 303, "kill": 62, "tkill": 200,
        "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "kexec_load": 246,
        "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "quotactl": 179, "iopl": 172, "ioperm": 173,
        "syslog": 103, "uselib": 134, "prctl": 157, "seccomp": 317,
    },
)  # fmt: skip
_AARCH64 = _Arch(
    0xC00000B7,
    False,
    {
        "execve": 221, "execveat": 281, "clone": 220, "clone3": 435, "socket": 198,
        "socketpair": 199, "bind": 200, "listen": 201, "accept": 202, "connect": 203,
        "accept4": 242, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "mknodat": 33, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "setrlimit": 164, "prlimit64": 261, "unshare": 97, "setns": 268, "keyctl": 219,
        "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "process_madvise": 440, "kcmp": 272, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "kill": 129, "tkill": 130, "tgkill": 131,
        "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "kexec_load": 104,
        "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "quotactl": 60, "syslog": 116, "prctl": 167,
        "seccomp": 277,
    },
)  # fmt: skip
_ARCHES = {"x86_64": _X86_64, "aarch64": _AARCH64}
LANDLOCK_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
SECCOMP_SYSCALL = {"x86_64": 317, "aarch64": 277}

# Always denied with EPERM. Signals, clone, prlimit64, prctl, seccomp and execveat get
# argument checks instead.
_DENIED = (
    "execve", "fork", "vfork", "socket", "socketpair", "connect", "bind",
    "listen", "accept", "accept4", "ptrace", "process_vm_readv", "process_vm_writev",
    "mknod", "mknodat", "mount", "umount2", "pivot_root", "chroot", "setrlimit", "unshare",
    "setns", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "pidfd_open",
    "pidfd_send_signal", "pidfd_getfd", "process_madvise", "kcmp", "open_by_handle_at",
    "name_to_handle_at", "tkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "acct", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "quotactl", "iopl", "ioperm", "syslog", "uselib",
)  # fmt: skip


def machine() -> str:
    return platform.machine().lower()


def seccomp_program(
    pid: int, arch_name: str | None = None, exec_fd: int = -1, *, exec_once: bool = False
) -> bytes:
    """The filter as ``struct sock_filter[]`` bytes for ``arch_name`` (default: this one).

    ``pid`` is the kernel's own pid: ``kill``/``tgkill`` may target only it (or its own
    process group, which is only itself), ``prlimit64`` only it. ``execveat`` gets past the
    filter only as ``execveat(exec_fd, <any path>, ..., AT_EMPTY_PATH)``, and with
    ``exec_once`` not even then: that form goes to the filter's listener (``no_exec``).
    ``seccomp()`` may not create a listener.
    """
    arch = _ARCHES[arch_name or machine()]
    nr = arch.nr
    prog: list[tuple[int, Any, Any, int]] = []
    label: dict[str, int] = {}

    def op(code: int, k: int, jt: Any = 0, jf: Any = 0) -> None:
        prog.append((code, jt, jf, k))

    def arg_lo(i: int) -> int:
        return 16 + 8 * i  # struct seccomp_data: nr, arch, ip, args[6]; little-endian

    op(_LD_ABS_W, 4)  # arch
    op(_JEQ, arch.audit, 0, "deny")
    op(_LD_ABS_W, 0)  # nr
    if arch.x32:
        op(_JGE, 0x40000000, "deny", 0)
    for name in _DENIED:
        if name in nr:
            op(_JEQ, nr[name], "deny", 0)
    op(_JEQ, nr["clone"], "clone", 0)
    op(_JEQ, nr["clone3"], "enosys", 0)
    op(_JEQ, nr["prlimit64"], "prlimit", 0)
    op(_JEQ, nr["kill"], "own_pid_or_group", 0)
    op(_JEQ, nr["tgkill"], "own_pid", 0)
    op(_JEQ, nr["prctl"], "prctl", 0)
    op(_JEQ, nr["execveat"], "execveat", 0)
    op(_JEQ, nr["seccomp"], "seccomp", 0)
    op(_RET, _RET_ALLOW)
    label["execveat"] = len(prog)
    op(_LD_ABS_W, arg_lo(0))
    op(_JEQ, exec_fd & 0xFFFFFFFF, 0, "deny")
    op(_LD_ABS_W, arg_lo(4))
    op(_JEQ, _AT_EMPTY_PATH, "exec", "deny")
    label["seccomp"] = len(prog)
    op(_LD_ABS_W, arg_lo(1))  # flags: a listener of its own could answer "continue"
    op(_JSET, _SECCOMP_FILTER_FLAG_NEW_LISTENER, "deny", "allow")
    label["clone"] = len(prog)
    op(_LD_ABS_W, arg_lo(0))
    op(_JSET, _CLONE_NAMESPACES, "deny", 0)
    op(_JSET, _CLONE_THREAD, "allow", "deny")
    label["prlimit"] = len(prog)
    op(_LD_ABS_W, arg_lo(0))
    op(_JEQ, 0, 1, 0)
    op(_JEQ, pid, 0, "deny")
    op(_LD_ABS_W, arg_lo(2))  # new_limit == NULL: a read, always fine
    op(_JEQ, 0, 0, 2)
    op(_LD_ABS_W, arg_lo(2) + 4)
    op(_JEQ, 0, "allow", 0)
    op(_LD_ABS_W, arg_lo(1))
    op(_JEQ, _RLIMIT_CPU, "allow", "deny")
    label["own_pid_or_group"] = len(prog)
    op(_LD_ABS_W, arg_lo(0))
    op(_JEQ, 0, "allow", 0)
    op(_JEQ, pid, "allow", "deny")
    label["own_pid"] = len(prog)
    op(_LD_ABS_W, arg_lo(0))
    op(_JEQ, pid, "allow", "deny")
    label["prctl"] = len(prog)
    op(_LD_ABS_W, arg_lo(0))
    op(_JEQ, _PR_SET_DUMPABLE, "deny", "allow")
    label["allow"] = len(prog)
    op(_RET, _RET_ALLOW)
    label["deny"] = len(prog)
    op(_RET, _RET_ERRNO | _EPERM)
    label["enosys"] = len(prog)
    op(_RET, _RET_ERRNO | _ENOSYS)
    label["exec"] = len(prog)
    op(_RET, _RET_USER_NOTIF if exec_once else _RET_ALLOW)

    out = bytearray()
    for index, (code, jt, jf, k) in enumerate(prog):
        jumps = []
        for target in (jt, jf):
            offset = target if isinstance(target, int) else label[target] - index - 1
            if not 0 <= offset < 256:
                raise ValueError(f"seccomp jump out of range at {index}")
            jumps.append(offset)
        out += struct.pack("<HBBI", code, jumps[0], jumps[1], k & 0xFFFFFFFF)
    return bytes(out)


def landlock_abi() -> tuple[int, str]:
    """The Landlock ABI version this kernel offers (0 when it has none) and why not."""
    calls = LANDLOCK_SYSCALLS.get(machine())
    if calls is None:
        return 0, f"no Landlock syscall numbers for {machine()}"
    libc, ctypes = _libc()
    try:
        version = libc.syscall(calls[0], None, 0, _LL_CREATE_RULESET_VERSION)
        if version < 0:
            err = ctypes.get_errno()
            return 0, f"Landlock is not offered by this kernel ({os.strerror(err)})"
        return int(version), f"Landlock ABI {version}"
    finally:
        del libc, ctypes


def no_exec_offered() -> tuple[bool, str]:
    """Whether this kernel can enforce ``no_exec`` (seccomp user notification), and why not.

    Asks ``seccomp()`` to validate the flags the launch stage will use with no program at
    all: a kernel that knows them fails on the missing program (``EFAULT``), one that does
    not fails on the flags (``EINVAL``). Nothing is installed either way.
    """
    arch = machine()
    if arch not in _ARCHES:
        return False, f"no seccomp filter is written for {arch}"
    libc, ctypes = _libc()
    try:
        ctypes.set_errno(0)
        libc.syscall(SECCOMP_SYSCALL[arch], _SECCOMP_SET_MODE_FILTER, _LISTENER_FLAGS, None)
        err = ctypes.get_errno()
    finally:
        del libc, ctypes
    if err == _EFAULT:
        return True, "seccomp user notification (a one-exec listener)"
    return False, f"no seccomp user notification with TSYNC_ESRCH, Linux 5.7+ ({os.strerror(err)})"


def install(
    *, scratch: str, read_roots: list[str], require: list[str], exec_fd: int = -1
) -> tuple[list[str], dict[str, str], int]:
    """Put every layer this kernel offers on the process; return (active, missing, listener).

    ``read_roots`` (directories or files) become read-only, ``scratch`` read-write.
    Must run while the process has a single thread (Landlock binds only the calling
    thread) and before any user code. ``exec_fd`` is the one descriptor ``execveat`` may
    still run (the worker's interpreter), and only once: ``listener`` (or -1 without
    ``no_exec``) goes to ``exec_worker``, which answers that one exec. Raises
    ``RuntimeError`` when a layer named in ``require`` cannot be installed: a kernel never
    starts weaker than the host expects.
    """
    active: list[str] = []
    missing: dict[str, str] = {}
    listener = -1
    libc, ctypes = _libc()
    _prctl(libc, ctypes, _PR_SET_NO_NEW_PRIVS, 1)
    if libc.prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1:
        active.append("no_new_privs")
    abi, why = landlock_abi()
    if abi > 0:
        _landlock(libc, ctypes, abi, scratch, read_roots)
        active.append(f"landlock:{abi}")
    else:
        missing["landlock"] = why
    arch = machine()
    if arch in _ARCHES:
        why_not = "no exec descriptor was given"
        if exec_fd >= 0:
            program = seccomp_program(os.getpid(), arch, exec_fd, exec_once=True)
            fd = _seccomp(libc, ctypes, program, SECCOMP_SYSCALL[arch], listen=True)
            listener = max(fd, -1)
            if fd < 0:
                why_not = (
                    f"seccomp refused a listener ({os.strerror(-fd)}); "
                    "user notification with TSYNC_ESRCH needs Linux 5.7+"
                )
        if listener < 0:
            program = seccomp_program(os.getpid(), arch, exec_fd)
            _seccomp(libc, ctypes, program, SECCOMP_SYSCALL[arch])
        active.append("seccomp")
        if listener >= 0:
            active.append("no_exec")
        else:
            missing["no_exec"] = why_not
    else:
        missing["seccomp"] = f"no seccomp filter is written for {arch}"
        missing["no_exec"] = missing["seccomp"]
    names = {a.split(":")[0] for a in active}
    absent = [r for r in require if r not in names]
    if absent:
        raise RuntimeError(
            "kernel layers required but not installed: "
            + ", ".join(f"{a} ({missing.get(a, 'failed')})" for a in absent)
        )
    return active, missing, listener


def exec_worker(exec_fd: int, argv: list[str], env: dict[str, str], listener: int) -> NoReturn:
    """``execveat(exec_fd, "", argv, env, AT_EMPTY_PATH)``: the one exec; returns only on failure.

    With a ``listener`` a thread answers this exec's notification with "continue" (and
    nothing else); the exec then ends that thread and closes the listener. The exec goes
    through ``ctypes``, which lets go of the GIL that thread needs (``os.execve`` keeps it).
    Without one (no ``no_exec``) it is a plain ``os.execve``. Raises ``OSError`` when the
    exec fails.
    """
    if listener < 0:
        os.execve(exec_fd, argv, env)
    import threading

    libc, ctypes = _libc()
    nr = _ARCHES[machine()].nr["execveat"]  # a listener exists only where a filter does
    threading.Thread(
        target=_answer_one_exec, args=(libc, ctypes, listener, nr, os.getpid()), daemon=True
    ).start()
    encoded = [os.fsencode(a) for a in argv]
    c_argv = (ctypes.c_char_p * (len(encoded) + 1))(*encoded, None)
    pairs = [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()]
    c_env = (ctypes.c_char_p * (len(pairs) + 1))(*pairs, None)
    libc.syscall(nr, exec_fd, b"", c_argv, c_env, _AT_EMPTY_PATH)
    raise OSError(ctypes.get_errno(), "execveat of the worker's interpreter")


def _answer_one_exec(libc: Any, ctypes: Any, listener: int, execveat: int, pid: int) -> None:
    """Let this process's own ``execveat`` continue; refuse anything else. Then stop."""
    notif = ctypes.create_string_buffer(_NOTIF_SIZE)
    try:
        while True:
            ctypes.memset(notif, 0, _NOTIF_SIZE)  # the kernel wants it zeroed
            if libc.ioctl(listener, ctypes.c_ulong(_NOTIF_RECV), notif) != 0:
                if ctypes.get_errno() == _EINTR:
                    continue
                return
            ident, who, _, call = struct.unpack_from("<QIIi", notif.raw)
            ours = who == pid and call == execveat
            answer = struct.pack(
                "<QqiI", ident, 0, 0 if ours else -_EPERM, _NOTIF_FLAG_CONTINUE if ours else 0
            )
            resp = ctypes.create_string_buffer(answer, _NOTIF_RESP_SIZE)
            if libc.ioctl(listener, ctypes.c_ulong(_NOTIF_SEND), resp) != 0 or ours:
                return
    finally:
        # Answered, or failed: either way nothing more is let through. Closing the listener
        # makes any exec still waiting fail with ENOSYS instead of hanging.
        os.close(listener)


def _libc() -> tuple[Any, Any]:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc, ctypes


def _prctl(libc: Any, ctypes: Any, option: int, value: int) -> None:
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value})")


def _landlock(libc: Any, ctypes: Any, abi: int, scratch: str, roots: list[str]) -> None:
    create, add_rule, restrict = LANDLOCK_SYSCALLS[machine()]
    fs = (1 << 13) - 1
    if abi >= 2:
        fs |= _FS_REFER
    if abi >= 3:
        fs |= _FS_TRUNCATE
    if abi >= 5:
        fs |= _FS_IOCTL_DEV
    fields = [fs]
    if abi >= 4:
        fields.append(_NET_BIND_TCP | _NET_CONNECT_TCP)  # handled, no rule: none allowed
    if abi >= 6:
        fields.append(_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
    attr = struct.pack(f"<{len(fields)}Q", *fields)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(create, buf, len(attr), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        # Execute stays on the runtime: the worker's interpreter and its loader are exec'd
        # once; seccomp, not Landlock, is what refuses every exec after that.
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        write = fs & ~(_FS_EXECUTE | _FS_MAKE_CHAR | _FS_MAKE_BLOCK | _FS_MAKE_SOCK)
        rules = [(p, read) for p in roots] + [(scratch, write)]
        # The worker puts /dev/null on fds 0 and 1; reading /dev/null, zero and urandom is
        # harmless. Landlock checks a device open like any file.
        rules.append(("/dev/null", _FS_READ_FILE | _FS_WRITE_FILE))
        rules += [(p, _FS_READ_FILE) for p in ("/dev/zero", "/dev/urandom", "/dev/random")]
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a root that does not exist here grants nothing
            try:
                if not os.path.isdir(path):
                    access &= _FS_EXECUTE | _FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE
                rule = ctypes.create_string_buffer(struct.pack("<Qi", access, fd), 12)
                if libc.syscall(add_rule, ruleset, _LL_RULE_PATH_BENEATH, rule, 0) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        if libc.syscall(restrict, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _seccomp(
    libc: Any, ctypes: Any, program: bytes, seccomp_nr: int, *, listen: bool = False
) -> int:
    """Install ``program``; with ``listen`` return its listener, or ``-errno`` if refused.

    A refused listener installs nothing: the caller falls back to a filter without one.
    """
    filters = ctypes.create_string_buffer(program, len(program))

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Prog(len(program) // 8, ctypes.cast(filters, ctypes.c_void_p))
    # TSYNC: every thread of the process gets the filter, not only the calling one.
    flags = _LISTENER_FLAGS if listen else _SECCOMP_FILTER_FLAG_TSYNC
    result = libc.syscall(seccomp_nr, _SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(prog))
    if listen and result < 0:
        return -(ctypes.get_errno() or _EINVAL)  # EINVAL: flags this kernel does not know
    if result != 0 and not listen:
        raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER)")
    return int(result) if listen else -1
