"""The audit hook that fences user code in (the whole sandbox of tier ``process``).

Installed by the worker after its own setup and before the first user cell; an audit hook
cannot be removed. The hook never calls anything user code could replace: every function
it uses is captured in its closure at install time, paths are normalised lexically by hand,
and only exact ``str``/``bytes`` paths are trusted (C converters hand the hook ``str`` for
``pathlib`` paths already). Audit hooks are defence in depth, not a wall: both tiers put
kernel-enforced layers (``confine``) under the same hook.

Directory descriptors. The ``open`` event does not carry ``dir_fd``, so a relative path
opened against a directory descriptor would be judged against the working directory. The
hook keeps two invariants instead: a directory can be opened (and so a directory
descriptor held) only inside scratch, and a relative path may not contain ``..``. A
relative path then lands inside scratch whatever descriptor it is resolved against, or
inside the working directory the hook judged.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class SandboxDenied(PermissionError):
    """An operation the kernel sandbox does not allow."""


_DENY_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.spawn",
        "os.posix_spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "os.startfile",
        "os.symlink",
        "os.link",
        "os.chroot",
        "os.chown",
        "os.lchown",
        "subprocess.Popen",
        "pty.spawn",
        "webbrowser.open",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sqlite3.enable_load_extension",
        "sqlite3.load_extension",
        "sys._current_exceptions",
    }
)
_DENY_PREFIXES = ("socket.", "ctypes.", "_posixsubprocess.", "_xxsubinterpreters.")
# Modules whose import alone hands out a way around the hook. posix and _signal are loaded
# before the hook; an import event for them means someone dropped them from sys.modules to
# get a fresh copy of the functions the worker removed.
_DENY_IMPORTS = frozenset(
    {
        "ctypes",
        "_ctypes",
        "_posixsubprocess",
        "_xxsubinterpreters",
        "_xxinterpchannels",
        "_testcapi",
        "_testinternalcapi",
        "_testbuffer",
        "_testmultiphase",
        "_testimportmultiple",
        "_testsinglephase",
        "posix",
        "_signal",
        "_socket",
    }
)
# Events whose first argument is a path that gets written to; a descriptor is refused
# (it could point anywhere), except for truncate, which needs a descriptor open for writing.
_WRITE_PATH_EVENTS = frozenset(
    {
        "os.mkdir",
        "os.rmdir",
        "os.remove",
        "os.truncate",
        "os.chmod",
        "os.utime",
        "os.mkfifo",
        "os.mknod",
        "os.setxattr",
        "os.removexattr",
        "os.chflags",
        "os.lchflags",
    }
)
_READ_PATH_EVENTS = frozenset(
    {"os.listdir", "os.scandir", "os.chdir", "os.listxattr", "os.getxattr", "glob.glob"}
)
_WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000  # O_WRONLY O_RDWR O_CREAT O_TRUNC O_APPEND
_SIGINT = 2
# O_CREAT, and O_TMPFILE's own bit: an anonymous file is a created file too.
_CREATE_FLAGS = 0o100 | 0o20000000


def install(
    scratch: str,
    read_roots: tuple[str, ...],
    main_ident: int,
    max_created_files: int,
    allow_sqlite: bool,
) -> list[str]:
    """Install the hook; return the list it appends each denial to (for the operator).

    ``allow_sqlite`` permits in-memory and scratch databases; without namespaces around the
    kernel it must stay off, because ``ATTACH`` opens files below the audit hook.
    """
    import posix
    import stat

    deny_events, deny_prefixes, deny_imports = _DENY_EVENTS, _DENY_PREFIXES, _DENY_IMPORTS
    write_events, read_events = _WRITE_PATH_EVENTS, _READ_PATH_EVENTS
    write_flags, sigint = _WRITE_FLAGS, _SIGINT
    o_create = _CREATE_FLAGS

    denials: list[str] = []
    deny_exc = SandboxDenied
    getcwd: Callable[[], str] = posix.getcwd
    stat_path = posix.stat
    is_dir = stat.S_ISDIR
    os_error = OSError
    str_type, bytes_type, int_type = str, bytes, int
    to_str = str.__str__
    decode = bytes.decode
    startswith = str.startswith
    split = str.split
    join = "/".join
    append = list.append
    pop = list.pop
    length = len
    subclass = issubclass
    kind = type
    scratch_roots = (scratch,)
    all_reads = (*read_roots, scratch)
    created = [0]

    def normalise(path: Any) -> str | None:
        if kind(path) is bytes_type:
            path = decode(path, "utf-8", "surrogateescape")
        elif subclass(kind(path), str_type):
            path = to_str(path)
        else:
            return None
        if not startswith(path, "/"):
            for part in split(path, "/"):
                if part == "..":
                    # Might be resolved against a directory descriptor, not the cwd.
                    deny("path", "'..' in a relative path; use an absolute path")
            path = getcwd() + "/" + path
        parts: list[str] = []
        for part in split(path, "/"):
            if part in ("", "."):
                continue
            if part == "..":
                if parts:
                    pop(parts)
                continue
            append(parts, part)
        return "/" + join(parts)

    def directory(target: Any) -> bool:
        try:
            return is_dir(stat_path(target).st_mode)
        except os_error:
            return False
        except ValueError:
            return False

    def inside(path: str | None, roots: tuple[str, ...]) -> bool:
        if path is None:
            return False
        # No any(): the hook looks up no builtin user code could replace.
        for root in roots:  # noqa: SIM110
            if path == root or startswith(path, root + "/"):
                return True
        return False

    def deny(event: str, detail: Any) -> None:
        message = "sandbox denied " + event
        if kind(detail) is str_type and detail:
            message += ": " + detail
        if length(denials) < 100:
            append(denials, message)
        raise deny_exc(message)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in deny_events:
            deny(event, "")
        for prefix in deny_prefixes:
            if startswith(event, prefix):
                deny(event, "")
        if event == "open":
            target, flags = args[0], args[2]
            if kind(target) is int_type:
                return  # an inherited descriptor: only the worker's own pipes exist
            path = normalise(target)
            writing = kind(flags) is int_type and flags & write_flags
            if writing:
                if not inside(path, scratch_roots):
                    deny(event, (path or "?") + " (writes stay in the scratch directory)")
                if flags & o_create:
                    created[0] += 1
                    if created[0] > max_created_files:
                        deny(event, "too many files created in scratch")
            elif not inside(path, all_reads):
                deny(event, (path or "?") + " (outside the runtime and scratch)")
            elif not inside(path, scratch_roots) and directory(target):
                deny(event, (path or "?") + " (directory descriptors only inside scratch)")
        elif event == "import":
            name = args[0]
            if kind(name) is str_type and split(name, ".")[0] in deny_imports:
                deny(event, name)
        elif event in write_events:
            if kind(args[0]) is int_type:
                if event != "os.truncate":
                    deny(event, "a file descriptor could point outside scratch")
            elif not inside(normalise(args[0]), scratch_roots):
                deny(event, "outside scratch")
        elif event in read_events:
            target = args[0]
            if target is None:
                target = "."
            if kind(target) is not int_type and not inside(normalise(target), all_reads):
                deny(event, "outside the runtime and scratch")
        elif event == "os.rename":
            if not (
                inside(normalise(args[0]), scratch_roots)
                and inside(normalise(args[1]), scratch_roots)
            ):
                deny(event, "outside scratch")
        elif event == "sqlite3.connect":
            database = args[0]
            if not allow_sqlite:
                deny(event, "no databases inside the kernel; use ms.sql_query")
            if kind(database) is not str_type or startswith(database, "file:"):
                deny(event, "plain paths only")
            if database not in (":memory:", "") and not inside(normalise(database), scratch_roots):
                deny(event, "only in-memory or scratch databases")
        elif event == "signal.pthread_kill" and (
            args[0] != main_ident or args[1] not in (0, sigint)
        ):
            deny(event, "only interrupting the kernel's own main thread")

    sys.addaudithook(hook)
    return denials
