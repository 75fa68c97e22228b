"""The escape corpus: each attempt must fail, on every tier, and leave the host unharmed.

Every attempt prints ``ESCAPED`` (or the planted token) only if it got through. After each
one the test checks the host: the planted secret file, the Event Log, the Django database
and the host environment are untouched, the loopback listener saw no connection, no canary
file appeared outside scratch, and the kernel still answers.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import sqlite3
import threading
from pathlib import Path
from string import Template

import pytest

from scroll_core import EventLog
from scroll_core.kernel import Kernel, KernelConfig, bwrap_status
from scroll_core.kernel.ms import MsCapability

BWRAP_OK, BWRAP_WHY = bwrap_status()
# execve and execveat on x86_64 and aarch64.
EXEC_NR = {"aarch64": (221, 281)}.get(platform.machine().lower(), (59, 322))
TIERS = [
    "process",
    pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=BWRAP_WHY)),
]
TOKEN = "tok-7f3a9c-planted-secret"
ENV_VAR = "SCROLL_ESCAPE_TEST_SECRET"

FRAME_WALK = """
import sys
found = []
def walk(frame):
    while frame is not None:
        g = frame.f_globals
        for v in list(g.values()):
            if isinstance(v, str) and '$token' in v:
                found.append(v)
        b = g.get('__builtins__')
        b = b if isinstance(b, dict) else vars(b)
        imp = b['__import__']
        env = imp('os').environ
        if '$env' in env:
            found.append(env['$env'])
        frame = frame.f_back
"""

# A dir fd on scratch, then a working directory deep in the runtime: "../" * depth climbs
# to / from the dir fd but only to somewhere inside the runtime from the working directory.
DIRFD_SETUP = (
    "import os\nd = os.open('.', os.O_RDONLY)\n"
    "depth = len([p for p in os.getcwd().split('/') if p])\n"
    "os.chdir(os.path.dirname(os.__file__) + '/encodings')\n"
)

ATTEMPTS: dict[str, str] = {
    # -- files on the host ----------------------------------------------------------------
    "open_secret": "print(open('$secret').read())",
    "pathlib_secret": "import pathlib; print(pathlib.Path('$secret').read_text())",
    "os_open_secret": "import os; print(os.read(os.open('$secret', os.O_RDONLY), 100))",
    "fileio_secret": "import io; print(io.FileIO('$secret').read())",
    "bytes_path_secret": "print(open(b'$secret', 'rb').read())",
    "relative_secret": ("import os; print(open(os.path.relpath('$secret', os.getcwd())).read())"),
    "dotdot_secret": "print(open('../' * 20 + '$secret'.lstrip('/')).read())",
    "proc_root_secret": "print(open('/proc/self/root$secret').read())",
    "proc_parent_root": "import os; print(open(f'/proc/{os.getppid()}/root$secret').read())",
    "linecache_secret": "import linecache; print(linecache.getline('$secret', 1))",
    "codecs_secret": "import codecs; print(codecs.open('$secret').read())",
    "shutil_copy_secret": "import shutil; shutil.copy('$secret', 'c'); print(open('c').read())",
    "symlink_secret": "import os; os.symlink('$secret', 'l'); print(open('l').read())",
    "hardlink_secret": "import os; os.link('$secret', 'h'); print(open('h').read())",
    "tarfile_secret": (
        "import tarfile; t = tarfile.open('t.tar', 'w'); t.add('$secret'); t.close()\n"
        "print(tarfile.open('t.tar').extractfile(t.getmembers()[0]).read())"
    ),
    "runpy_secret": "import runpy; runpy.run_path('$secret')",
    "import_spec_secret": (
        "from importlib.machinery import SourceFileLoader\n"
        "print(SourceFileLoader('m', '$secret').get_data('$secret'))"
    ),
    "listdir_secret_dir": "import os; print(os.listdir('$secret_dir'))",
    "scandir_secret_dir": "import os; print([e.name for e in os.scandir('$secret_dir')])",
    "glob_secret_dir": "import glob; print(glob.glob('$secret_dir/*'))",
    "str_subclass_path": (
        "class P(str):\n"
        "    def startswith(self, *a): return True\n"
        "    def __str__(self): return '/tmp'\n"
        "print(open(P('$secret')).read())"
    ),
    "stateful_fspath": (
        "import os\n"
        "class P:\n"
        "    n = 0\n"
        "    def __fspath__(self):\n"
        "        P.n += 1\n"
        "        return os.getcwd() + '/x' if P.n == 1 else '$secret'\n"
        "print(open(P()).read())"
    ),
    "chdir_then_relative": "import os; os.chdir('/'); print(open('$secret'.lstrip('/')).read())",
    "patched_getcwd": (
        "import os, posix; posix.getcwd = os.getcwd = lambda: '$secret_dir'\n"
        "print(open('secret.txt').read())"
    ),
    # -- directory descriptors: a relative path resolved against a dir fd, not the cwd --
    "dirfd_dotdot_secret": DIRFD_SETUP
    + (
        "fd = os.open('../' * depth + '$secret'.lstrip('/'), os.O_RDONLY, dir_fd=d)\n"
        "print(os.read(fd, 100))"
    ),
    "dirfd_listdir_secret_dir": DIRFD_SETUP
    + (
        "p = os.open('../' * depth + '$secret_dir'.lstrip('/'), os.O_RDONLY, dir_fd=d)\n"
        "print('ESCAPED' if 'secret.txt' in os.listdir(p) else 'no')"
    ),
    "dirfd_scandir_secret_dir": DIRFD_SETUP
    + (
        "p = os.open('../' * depth + '$secret_dir'.lstrip('/'), os.O_RDONLY, dir_fd=d)\n"
        "print('ESCAPED' if 'secret.txt' in [e.name for e in os.scandir(p)] else 'no')"
    ),
    "dirfd_write_runtime": (
        "import os\nd = os.open(os.path.dirname(os.__file__), os.O_RDONLY)\n"
        "os.open('scroll_escape_canary.py', os.O_WRONLY | os.O_CREAT, dir_fd=d)\n"
        "print('ESCAPED')"
    ),
    "dirfd_runtime_listdir": (
        "import os\nd = os.open(os.path.dirname(os.__file__), os.O_RDONLY)\n"
        "print('ESCAPED', os.listdir(os.open('..', os.O_RDONLY, dir_fd=d)))"
    ),
    "fchmod_runtime_file": (
        "import os\nfd = os.open(os.__file__, os.O_RDONLY)\nos.chmod(fd, 0o777)\nprint('ESCAPED')"
    ),
    # -- switching the audit hook off ----------------------------------------------------
    "addaudithook_noop": (
        "import sys; sys.addaudithook(lambda event, args: None)\nprint(open('$secret').read())"
    ),
    "addaudithook_exit": (
        "import sys\ndef h(event, args):\n    raise SystemExit\n"
        "sys.addaudithook(h)\nprint(open('$secret').read())"
    ),
    "bad_constant_index": (
        "import opcode, types\ndef f():\n    return None\n"
        "ops = bytes([opcode.opmap['RESUME'], 0, opcode.opmap['LOAD_CONST'], 200, "
        "opcode.opmap['RETURN_VALUE'], 0])\n"
        "g = types.FunctionType(f.__code__.replace(co_code=ops), {})\ng()\n"
        "print(open('$secret').read())\nimport os; os.system('touch $canary')"
    ),
    # -- the Event Log and the Django database ------------------------------------------
    "open_eventlog": "print(open('$log', 'rb').read())",
    "sqlite_eventlog": (
        "import sqlite3; print(sqlite3.connect('$log').execute('select content from events')"
        ".fetchall())"
    ),
    "sqlite_attach_eventlog": (
        "import sqlite3; db = sqlite3.connect(':memory:')\n"
        "db.execute(\"ATTACH '$log' AS l\"); print(db.execute('select * from l.events').fetchall())"
    ),
    "sqlite_uri_eventlog": (
        "import sqlite3; db = sqlite3.connect('file:$log?mode=ro', uri=True)\n"
        "print(db.execute('select content from events').fetchall())"
    ),
    "open_django_db": "print(open('$django', 'rb').read())",
    "sqlite_django_db": (
        "import sqlite3; print(sqlite3.connect('$django').execute('select * from auth_user')"
        ".fetchall())"
    ),
    # -- host environment ------------------------------------------------------------------
    "environ": "import os; print(os.environ.get('$env'), dict(os.environ))",
    "environb": "import os; print(os.environb.get(b'$env'))",
    "proc_self_environ": "print(open('/proc/self/environ').read())",
    "proc_parent_environ": "import os; print(open(f'/proc/{os.getppid()}/environ').read())",
    # -- network ---------------------------------------------------------------------------
    "socket_connect": "import socket; socket.create_connection(('127.0.0.1', $port), 2)",
    "raw_socket": "import socket; s = socket.socket(); s.connect(('127.0.0.1', $port))",
    "urllib": "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port', timeout=2)",
    "http_client": (
        "import http.client; c = http.client.HTTPConnection('127.0.0.1', $port, timeout=2)\n"
        "c.request('GET', '/')"
    ),
    "asyncio_connect": (
        "import asyncio\nasyncio.run(asyncio.wait_for("
        "asyncio.open_connection('127.0.0.1', $port), 2))"
    ),
    "unix_socket": "import socket; socket.socket(socket.AF_UNIX).connect('/tmp/.X11-unix/X0')",
    # -- processes -------------------------------------------------------------------------
    "subprocess_run": "import subprocess; subprocess.run(['touch', '$canary'])",
    "os_system": "import os; os.system('touch $canary')",
    "os_popen": "import os; os.popen('touch $canary').read()",
    "os_execv": "import os; os.execv('/bin/sh', ['sh', '-c', 'touch $canary'])",
    "posix_spawn": "import os; os.posix_spawn('/bin/touch', ['touch', '$canary'], {})",
    "os_fork": "import os\nif os.fork() == 0:\n    open('$canary', 'w')\n    os._exit(0)",
    "pty_spawn": "import pty; pty.spawn(['touch', '$canary'])",
    "multiprocessing": (
        "import multiprocessing as mp\n"
        "p = mp.Process(target=open, args=('$canary', 'w')); p.start(); p.join()"
    ),
    "posixsubprocess": "import _posixsubprocess; print('ESCAPED', _posixsubprocess.fork_exec)",
    "subclasses_popen": (
        "import subprocess\n"
        "P = [c for c in object.__subclasses__()[0].__subclasses__() + "
        "[c for b in object.__subclasses__() for c in b.__subclasses__()] "
        "if c.__name__ == 'Popen'][0]\nP(['touch', '$canary'])"
    ),
    "subclasses_wrap_close": (
        "w = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close']"
        "[0]\nw.__init__.__globals__['system']('touch $canary')"
    ),
    "ctypes_system": "import ctypes; ctypes.CDLL(None).system(b'touch $canary')",
    "ctypes_raw": "import _ctypes; print('ESCAPED', _ctypes)",
    # The launch stage's one exec went through execveat(RLIMIT_NOFILE, "", AT_EMPTY_PATH);
    # an absolute path in that form ignores the descriptor. test_kernel_layers runs these
    # (and os_execv) without the audit hook, where only the kernel stops them.
    "execveat_absolute_path": (
        "import ctypes, sys\nargv = (ctypes.c_char_p * 4)(sys.executable.encode(), b'-c', "
        "b\"open('$canary', 'w')\", None)\n"
        "ctypes.CDLL(None).syscall($execveat, 256, sys.executable.encode(), argv, None, 0x1000)"
    ),
    "execve_raw": (
        "import ctypes, sys\nargv = (ctypes.c_char_p * 4)(sys.executable.encode(), b'-c', "
        "b\"open('$canary', 'w')\", None)\n"
        "ctypes.CDLL(None).syscall($execve, sys.executable.encode(), argv, None)"
    ),
    "subinterpreter": "import _xxsubinterpreters as s; print('ESCAPED', s.create())",
    "fresh_posix_module": (
        "import sys; del sys.modules['posix']; import posix\nprint('ESCAPED', posix.pidfd_open)"
    ),
    # -- frames, generators and the worker's own objects ----------------------------------
    "generator_frames": FRAME_WALK
    + "def g():\n    yield\nx = g(); next(x); walk(x.gi_frame)\n"
    + "print('ESCAPED' if found else 'no host here')",
    "traceback_frames": FRAME_WALK
    + "try:\n    1/0\nexcept Exception as e:\n    walk(e.__traceback__.tb_frame)\n"
    + "print('ESCAPED' if found else 'no host here')",
    "getframe_builtins": (
        "import sys\nf = sys._getframe()\nwhile f.f_back: f = f.f_back\n"
        "b = f.f_globals['__builtins__']; b = b if isinstance(b, dict) else vars(b)\n"
        "b['__import__']('os').system('touch $canary')"
    ),
    "host_modules_reachable": (
        "import sys\nprint('ESCAPED' if {'scroll_core', 'django', 'dashboard'} & "
        "{m.split('.')[0] for m in sys.modules} else 'clean')"
    ),
    "gc_find_hook": "import gc; print(len(gc.get_objects()))",
    "patch_guard_module": (
        "import sys\ng = [m for n, m in sys.modules.items() if n.endswith('guard')][0]\n"
        "g._DENY_EVENTS = frozenset(); g._DENY_PREFIXES = ()\n"
        "import os; os.system('touch $canary')"
    ),
    "patch_builtins": (
        "import builtins, os\nbuiltins.isinstance = lambda *a: True\n"
        "builtins.len = lambda *a: 0\nos.system('touch $canary')"
    ),
    "forge_protocol": (
        "import os, json\n"
        "msg = json.dumps({'op': 'call', 'id': 10**9, 'name': 'os.system', "
        "'args': ['touch $canary'], 'kwargs': {}}) + '\\n'\n"
        "for fd in range(3, 12):\n    try: os.write(fd, msg.encode())\n    except OSError: pass\n"
        "import time; time.sleep(0.3)"
    ),
    "proxy_private_call": ("print(ms.search._caller.call('os.system', ['touch $canary'], {}))"),
    # -- writing to the log through ms -----------------------------------------------------
    "ms_delete": "ms.sql_query('DELETE FROM events')",
    "ms_update": "ms.sql_query(\"UPDATE events SET content = 'pwned'\")",
    "ms_insert": (
        'ms.sql_query("INSERT INTO events(session_id, kind, content, created_at, tokens) '
        "VALUES ('x', 'y', 'z', 'w', 1)\")"
    ),
    "ms_drop": "ms.sql_query('DROP TABLE events')",
    "ms_attach": "ms.sql_query(\"ATTACH DATABASE '$canary' AS x\")",
    "ms_pragma": "ms.sql_query('PRAGMA query_only = 0')",
    "ms_pragma_writable_schema": "ms.sql_query('PRAGMA writable_schema = 1')",
    "ms_two_statements": "ms.sql_query('SELECT 1; DELETE FROM events')",
    "ms_params_injection": "ms.sql_query('SELECT ?', [\"1; DROP TABLE events\"])",
    # -- resources and the parent ----------------------------------------------------------
    "fork_bomb": "import os\nwhile True:\n    os.fork()",
    "thread_bomb": (
        "import threading, time\nwhile True:\n"
        "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()"
    ),
    "memory_bomb_one": "x = ' ' * (10**10)",
    "memory_bomb_grow": "x = []\nwhile True:\n    x.append(bytearray(10**7))",
    "infinite_loop": "while True:\n    pass",
    "deep_recursion_c": "import sys; sys.setrecursionlimit(10**7)\ndef f(n): return f(n+1)\nf(0)",
    "output_flood": "while True:\n    print('x' * 10000)",
    "stderr_fd_flood": "import os\nwhile True:\n    os.write(2, b'y' * 65536)",
    "kill_parent": "import os; os.kill(os.getppid(), 9)",
    "killpg": "import os; os.killpg(0, 9)",
    "pidfd_parent": "import os, signal; signal.pidfd_send_signal(os.pidfd_open(os.getppid()), 9)",
    "fill_disk": (
        "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n    i += 1"
    ),
    "raise_rlimit": (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\nx = ' ' * (10**10)"
    ),
    # -- writing outside scratch -----------------------------------------------------------
    "write_canary": "open('$canary', 'w').write('ESCAPED')",
    "delete_secret": "import os; os.remove('$secret')",
    "truncate_secret": "import os; os.truncate('$secret', 0)",
    "chmod_secret": "import os; os.chmod('$secret', 0o777)",
    "rename_secret": "import os; os.rename('$secret', 'stolen')",
    "mkdir_outside": "import os; os.mkdir('$canary')",
}

# Attempts whose natural end is the time limit or a restart; they get a short timeout.
SLOW = {
    "infinite_loop",
    "output_flood",
    "stderr_fd_flood",
    "thread_bomb",
    "fill_disk",
    "memory_bomb_grow",
}


class Listener:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    root = tmp_path_factory.mktemp("host")
    secret = root / "secret.txt"
    secret.write_text(TOKEN)
    django = root / "db.sqlite3"
    with sqlite3.connect(django) as db:
        db.execute("CREATE TABLE auth_user (username TEXT, password TEXT)")
        db.execute("INSERT INTO auth_user VALUES ('admin', ?)", (TOKEN,))
    db.close()
    log = EventLog(root / "eventlog.sqlite3")
    log.append(session_id="s", kind="context_msg", content=f"the password is {TOKEN}")
    listener = Listener()
    os.environ[ENV_VAR] = TOKEN
    state = {
        "secret": secret,
        "django": django,
        "log": log,
        "listener": listener,
        "canary": root / "canary",
        "secret_hash": _digest(secret),
        "django_hash": _digest(django),
        "log_count": log.count(),
    }
    yield state
    os.environ.pop(ENV_VAR, None)
    listener.close()
    log.close()


@pytest.fixture(scope="module", params=TIERS)
def kernel(request, host):
    ms = MsCapability(host["log"])
    config = KernelConfig(
        sandbox=request.param,
        timeout_s=5,
        grace_s=0.5,
        memory_mb=256,
        file_size_mb=4,
        max_created_files=16,
        scratch_mb=32,
        processes=32,
    )
    with Kernel(config, host_functions=ms.functions()) as k:
        yield k
    ms.close()


@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_escape_attempt_fails_and_the_host_is_unharmed(kernel, host, name):
    code = Template(ATTEMPTS[name]).substitute(
        secret=host["secret"],
        secret_dir=host["secret"].parent,
        log=host["log"].path,
        django=host["django"],
        env=ENV_VAR,
        port=host["listener"].port,
        canary=host["canary"],
        token=TOKEN,
        execve=EXEC_NR[0],
        execveat=EXEC_NR[1],
    )
    result = kernel.execute(code, timeout=1.0 if name in SLOW else 5.0)
    seen = result.observation() + " ".join(result.denials)
    assert "ESCAPED" not in result.stdout
    assert TOKEN not in seen
    assert result.status in ("ok", "error", "denied", "timeout", "killed")

    # The host is unharmed.
    assert host["secret"].exists() and _digest(host["secret"]) == host["secret_hash"]
    assert oct(host["secret"].stat().st_mode & 0o777) != "0o777"
    assert _digest(host["django"]) == host["django_hash"]
    assert host["log"].count() == host["log_count"]
    assert TOKEN in host["log"].get(1).content
    assert os.environ.get(ENV_VAR) == TOKEN
    assert host["listener"].accepted == 0
    assert not host["canary"].exists()
    assert kernel.execute("print('alive')").stdout == "alive\n"


def test_the_corpus_is_large_enough():
    assert len(ATTEMPTS) >= 60


def test_denied_attempts_are_reported_as_denied(kernel, host):
    result = kernel.execute(f"open({str(host['secret'])!r}).read()")
    assert result.status == "denied"
    assert result.denials and "sandbox denied open" in result.denials[0]
