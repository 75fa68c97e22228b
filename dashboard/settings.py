"""Settings of the Scroll console.

Everything an operator may change comes from an environment variable with a safe
default, so `make run` works with nothing configured (the embedded default: SQLite
for Django and the Event Log under one data folder, the in-memory channel layer).

SCROLL_DATA_DIR        data folder (default: var/ under the repository root)
SCROLL_EVENTLOG_PATH   Event Log file (default: <data>/eventlog.sqlite3)
SCROLL_EVENTLOG_URL    postgres://user:pass@host:port/name keeps the Event Log on PostgreSQL
                       instead (shared by every web process and worker; wins over the path)
SCROLL_EVENTLOG_READER_URL  the login ms.sql_query runs model SQL as on PostgreSQL (a member
                       of scroll_reader only); without it sql_query is refused there
SCROLL_SECRET_KEY      Django secret key (default: generated once, kept in <data>/secret_key)
SCROLL_DEBUG           "1" turns DEBUG on (default off)
SCROLL_ALLOWED_HOSTS   comma-separated (default: localhost,127.0.0.1)
SCROLL_CSRF_TRUSTED_ORIGINS  comma-separated origins, for a console behind a proxy
SCROLL_DATABASE_URL    postgres://user:pass@host:port/name to use PostgreSQL for Django
                       (parsed by dj-database-url; needs the [postgres] extra, psycopg 3)
SCROLL_REDIS_URL       redis://host:port/0 to use the Redis channel layer (needs the [redis]
                       extra, channels-redis); the gateway's web processes also share their
                       rate limits, token budgets and session leases there
SCROLL_SERVE_STATIC    "0" stops the ASGI app serving static files itself (default on)
SCROLL_GRAFANA_URL     base URL of a Grafana with Tempo, for "open this trace in Grafana" links
SCROLL_BENCH           "1" routes /bench/load/ (staff, loopback only): bench/console.py sets it
SCROLL_CONSOLE_SEARCH_TIMEOUT_S  seconds before a console search is stopped (default 2)
SCROLL_SPAN_RETENTION  spans kept for the Traces page, oldest pruned (default 50000)
SCROLL_SPAN_RETENTION_BYTES  and at most this many bytes of them (attributes, events and
                       status; default 200000000): the oldest go first, counted by the sink
SCROLL_SPAN_SPOOL_BYTES  spans that end while the console database is away wait on disk
                       (<data folder>/span-spool), in at most this many bytes (default
                       67108864); past it the oldest are dropped, counted and logged
SCROLL_LIVE_LINT_WAIT_MS  a session's finished turns are linted together this long after the
                       first of them (default 1000); 0 lints at every turn end, on the
                       request's interpreter
SCROLL_SPAN_LINGER_MS  how long the span sink waits after a span for more before it sends
                       them to the live pages, one frame per page (default 20)
SCROLL_KERNEL_POOL     warm kernels kept ready for new runs (default 1)
SCROLL_RUNNER_WORKERS  runs executing at once in one worker (embedded or scroll_worker; default 4)
SCROLL_WORKERS         "embedded" (default): each serving process runs one worker thread;
                       "external": runs execute only in `manage.py scroll_worker` processes
SCROLL_PROCESSES       how many processes serve or run this console (default 1); above 1, or
                       with external workers, SCROLL_REDIS_URL is required: the in-memory
                       channel layer does not cross processes and live pages would miss
                       whatever another process produced
SCROLL_WORKER_LEASE_S  seconds a worker's claim on a run lasts without a heartbeat (default 15)
SCROLL_RUNNER_WORKERS  runs executing at once in the in-process runner (default 4)
SCROLL_GATEWAY_THREADS gateway requests served at once per process (default 64: each holds a
                       thread while its upstream answers)
SCROLL_GATEWAY_MAX_BODY_MB  largest gateway request body (default 64; an agent resends its
                       whole history, which passes Django's 2.5 MB form limit early)
SCROLL_GATEWAY_CPU_SLOTS  gateway requests running Python at once per process (default 4; a
                       request gives its slot up while its upstream or kernel works)
SCROLL_GATEWAY_SESSION_WAIT_S  how long a request waits for another request of its session
                       to finish at another web process before a 409 with Retry-After
                       (default 30)
SCROLL_GATEWAY_SESSION_IDLE_S  a gateway session idle this long is forgotten by its web
                       process: conversation, kernel and lease (default 900, the kernels'
                       own idle timeout; rebuilt from the log if it comes back)
SCROLL_GATEWAY_RESPONSE_DAYS  how long a stored Responses API reply can be continued from
                       or retrieved (default 30, as OpenAI keeps them; the log keeps the
                       conversation itself for good)
SCROLL_DEMO            "1" starts the built-in demo run when the server starts (`make run` sets it)
SCROLL_DEMO_PAUSE      seconds between the demo's turns (default 4)
SCROLL_STARTUP         "1"/"0" forces the serving start-up (telemetry sink, runner) on or off
SCROLL_LOG_FORMAT      "json": log one JSON object per line; "text" (default)
SCROLL_LOG_LEVEL       level of Scroll's own loggers, request lines included (default INFO)

Deploying behind TLS (all off by default, so `make run` keeps working over plain HTTP; with
all of them set, `manage.py check --deploy` has no cookie, HSTS or redirect warnings):
SCROLL_SECURE_COOKIES  "1" sends the session and CSRF cookies only over HTTPS (Secure)
SCROLL_HSTS_SECONDS    Strict-Transport-Security max-age in seconds (default 0: no header);
                       start small (300), raise to 31536000 once HTTPS is known to work
SCROLL_HSTS_INCLUDE_SUBDOMAINS  "1" adds includeSubDomains to that header
SCROLL_HSTS_PRELOAD    "1" adds preload (only for domains submitted to the browsers' lists)
SCROLL_SSL_REDIRECT    "1" redirects every plain-HTTP request to HTTPS
SCROLL_PROXY_SSL_HEADER  "1" trusts X-Forwarded-Proto: https from the proxy in front as
                       meaning the request came over HTTPS; set it only when that proxy
                       always sets (or strips) the header, else clients could forge it

Every response carries a Content-Security-Policy (django-csp, CONTENT_SECURITY_POLICY below):
scripts, styles, images, fonts and connections (the live WebSocket included) from the console's
own origin only; no inline scripts, no eval, no frames, no plugins, forms post to itself.

Read by scroll_core directly: SCROLL_SANDBOX (auto|bwrap|process), SCROLL_MODEL_BASE_URL,
SCROLL_MODEL_API_KEY, SCROLL_MODEL_NAME, SCROLL_MODEL_CONTEXT_SIZE, and the standard
OTEL_EXPORTER_OTLP_* variables.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
from pathlib import Path
from typing import Any

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured
from django.core.management.utils import get_random_secret_key

from dashboard.logs import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int, *, minimum: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def _persisted_secret_key(data_dir: Path) -> str:
    """Read the secret key kept in the data folder, creating it on first start.

    The key is written to a private temporary file and linked into place, which fails if the
    file exists: two processes starting at once agree on one key, and neither ever reads a
    file the other has created but not yet written.
    """
    path = data_dir / "secret_key"
    if not path.exists():
        fd, temporary = tempfile.mkstemp(dir=data_dir, prefix=".secret_key.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(get_random_secret_key() + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)
        finally:
            os.unlink(temporary)
    key = path.read_text(encoding="utf-8").strip()
    if not key:
        raise ImproperlyConfigured(f"{path} is empty; delete it to generate a new key")
    return key


def _require(module: str, extra: str, setting: str) -> None:
    """Refuse a setting whose optional extra is not installed, naming the install command."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"{setting} is set but {module!r} cannot be imported ({exc}); "
            f"install the extra: pip install 'scroll[{extra}]'"
        ) from None


def _database_from_url(url: str) -> dict[str, Any]:
    """Django's database settings for a postgres:// URL, parsed by dj-database-url."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(
            f"SCROLL_DATABASE_URL must be a postgres:// URL, not {scheme or url!r}"
        )
    _require("psycopg", "postgres", "SCROLL_DATABASE_URL")
    try:
        config: dict[str, Any] = dict(dj_database_url.parse(url))
    except ValueError as exc:
        raise ImproperlyConfigured(f"SCROLL_DATABASE_URL cannot be parsed: {exc}") from None
    if not config.get("NAME"):
        raise ImproperlyConfigured("SCROLL_DATABASE_URL names no database (…/NAME at the end)")
    # A persistent connection that died with a PostgreSQL restart is replaced before a
    # request uses it, not found dead by that request (a 500 each, for minutes: issue 30).
    config["CONN_HEALTH_CHECKS"] = True
    return config


# How much longer than Redis blocks a channel layer read may wait for its answer.
REDIS_READ_MARGIN_S = 5.0


def redis_channel_layer(url: str) -> dict[str, Any]:
    """The channels-redis layer for a redis:// (or rediss://, unix://) URL."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"SCROLL_REDIS_URL must be a redis:// URL, not {scheme or url!r}"
        )
    _require("channels_redis", "redis", "SCROLL_REDIS_URL")
    from channels_redis.core import RedisChannelLayer

    # Each live page waits on a BZPOPMIN that Redis answers after brpop_timeout (5 s) when
    # nothing came. redis-py 8 reads with a 5 s socket timeout by default (None before), so
    # the read timed out first and dropped every idle page's socket about every 5 s (issue
    # 30). Read for longer than the server blocks; a dead server is still noticed by then.
    read_timeout = RedisChannelLayer.brpop_timeout + REDIS_READ_MARGIN_S
    host = {"address": url, "socket_timeout": read_timeout, "socket_keepalive": True}
    return {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # A live page that falls this far behind loses spans, as on the in-memory layer;
        # the page catches up from the database on reconnect.
        "CONFIG": {"hosts": [host], "capacity": 1000, "expiry": 60},
    }


SCROLL_DATA_DIR = Path(os.environ.get("SCROLL_DATA_DIR") or BASE_DIR / "var").resolve()
SCROLL_DATA_DIR.mkdir(parents=True, exist_ok=True)
SCROLL_EVENTLOG_PATH = Path(
    os.environ.get("SCROLL_EVENTLOG_PATH") or SCROLL_DATA_DIR / "eventlog.sqlite3"
)
SCROLL_PAYLOAD_DIR = SCROLL_DATA_DIR / "payloads"
SCROLL_EVENTLOG_URL = os.environ.get("SCROLL_EVENTLOG_URL") or None
SCROLL_EVENTLOG_READER_URL = os.environ.get("SCROLL_EVENTLOG_READER_URL") or None
# Rows per page in the console's session and event lists.
SCROLL_PAGE_SIZE = 50
# Console searches (home page, a session's search box) are stopped after this many seconds.
try:
    SCROLL_CONSOLE_SEARCH_TIMEOUT_S = float(os.environ.get("SCROLL_CONSOLE_SEARCH_TIMEOUT_S") or 2)
except ValueError:
    raise ImproperlyConfigured(
        "SCROLL_CONSOLE_SEARCH_TIMEOUT_S must be a number of seconds"
    ) from None
if not SCROLL_CONSOLE_SEARCH_TIMEOUT_S >= 0:
    raise ImproperlyConfigured("SCROLL_CONSOLE_SEARCH_TIMEOUT_S must be at least 0")

SECRET_KEY = os.environ.get("SCROLL_SECRET_KEY") or _persisted_secret_key(SCROLL_DATA_DIR)
DEBUG = _env_flag("SCROLL_DEBUG", False)
ALLOWED_HOSTS = _env_list("SCROLL_ALLOWED_HOSTS", "localhost,127.0.0.1")
CSRF_TRUSTED_ORIGINS = _env_list("SCROLL_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    # daphne first: its runserver replaces Django's, so `runserver` serves ASGI.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "csp",
    # The project: settings, URLs, ASGI, the Event Log handle and its commands, start-up, and
    # the migration history of the tables the apps below took over (they keep their names).
    "dashboard",
    # One app per concern; imports point down this list's reverse (see pyproject.toml's
    # import-linter contracts): the console reads the gateway, telemetry and runs.
    "dashboard.record",
    "dashboard.runs",
    "dashboard.projects",
    "dashboard.telemetry",
    "dashboard.qualify",
    "dashboard.gateway",
    "dashboard.console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A view that meets a database outage answers 503 "retry", not 500 (issue 30).
    "dashboard.outage.DatabaseOutageMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
ASGI_APPLICATION = "dashboard.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # The open-alert count in every page's header.
                "dashboard.console.context_processors.console",
            ],
        },
    },
]

if os.environ.get("SCROLL_DATABASE_URL"):
    DATABASES = {"default": _database_from_url(os.environ["SCROLL_DATABASE_URL"])}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": SCROLL_DATA_DIR / "console.sqlite3",
            # Kept open for the thread's life: the gateway's pool, the recorder and the span
            # sink outlive requests, and reopening costs each request a connect, the pragmas
            # and Django's function registrations (about a fifth of a new conversation's CPU).
            # A file has no server to restart; a connection left in a transaction is still
            # dropped by close_old_connections().
            "CONN_MAX_AGE": None,
            # Worker threads, the span sink and requests all write: WAL lets readers go on
            # beside the writer, and IMMEDIATE takes the write lock when a transaction
            # begins, so two writers queue (for up to `timeout` s) instead of one failing
            # with "database is locked" when it upgrades a read.
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
            },
            # Tests get a file too, not Django's shared-cache in-memory database: there a
            # write that meets another thread's read fails at once ("table is locked")
            # instead of waiting, and the live tests run the server, runs and the span sink
            # on threads of their own. One file per test process, removed afterwards.
            "TEST": {"NAME": str(Path(tempfile.gettempdir()) / f"scroll-test-{os.getpid()}.db")},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

SCROLL_WORKERS = os.environ.get("SCROLL_WORKERS", "").strip().lower() or "embedded"
if SCROLL_WORKERS not in {"embedded", "external"}:
    raise ImproperlyConfigured(f"SCROLL_WORKERS is embedded or external, not {SCROLL_WORKERS!r}")
SCROLL_PROCESSES = _env_int("SCROLL_PROCESSES", 1, minimum=1)
SCROLL_WORKER_LEASE_S = float(_env_int("SCROLL_WORKER_LEASE_S", 15, minimum=1))


def refuse_in_memory_layer(processes: int, workers: str, redis_url: str) -> None:
    """A deployment of several processes needs a channel layer they share."""
    if redis_url or (processes <= 1 and workers != "external"):
        return
    why = f"SCROLL_PROCESSES={processes}" if processes > 1 else "SCROLL_WORKERS=external"
    raise ImproperlyConfigured(
        f"{why} says several processes serve or run this console, but the channel layer is "
        "the in-memory one, which does not cross processes (live pages would miss what the "
        "others produce). Set SCROLL_REDIS_URL=redis://host:port/0."
    )


refuse_in_memory_layer(
    SCROLL_PROCESSES, SCROLL_WORKERS, os.environ.get("SCROLL_REDIS_URL", "").strip()
)

SCROLL_REDIS_URL = os.environ.get("SCROLL_REDIS_URL", "").strip()
if os.environ.get("SCROLL_REDIS_URL"):
    CHANNEL_LAYERS = {"default": redis_channel_layer(os.environ["SCROLL_REDIS_URL"])}
else:
    # The in-memory layer drops a message silently once a consumer's queue holds `capacity`;
    # a live page falls behind by at most this many spans before that happens.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "dashboard.layers.ThrottledInMemoryChannelLayer",
            "CONFIG": {"capacity": 1000},
        }
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Datetimes in admin (lists, read-only fields, history) carry their zone (dashboard/formats).
FORMAT_MODULE_PATH = ["dashboard.formats"]

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = SCROLL_DATA_DIR / "staticfiles"
# The embedded default has no web server in front, so the ASGI app serves static files.
SCROLL_SERVE_STATIC = _env_flag("SCROLL_SERVE_STATIC", True)

# A line per request, a traceback per 500, on stderr (see dashboard.logs).
LOGGING = logging_config(os.environ)

# Console forms (every POST outside /v1, the admin's too): past these Django refuses the
# request before any view parses it, and dashboard.limits answers 400 with the console's
# page. The gateway's /v1 bodies have their own cap, SCROLL_GATEWAY_MAX_BODY_MB.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440  # bytes of a form body (Django's default, stated)
DATA_UPLOAD_MAX_NUMBER_FIELDS = 1000
DATA_UPLOAD_MAX_NUMBER_FILES = 10

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
SCROLL_GRAFANA_URL = os.environ.get("SCROLL_GRAFANA_URL", "").rstrip("/")
# Span load generator for bench/console.py; never on unless the bench starts the server.
SCROLL_BENCH = _env_flag("SCROLL_BENCH", False)
SCROLL_SPAN_RETENTION = _env_int("SCROLL_SPAN_RETENTION", 50_000, minimum=1)
SCROLL_SPAN_RETENTION_BYTES = _env_int("SCROLL_SPAN_RETENTION_BYTES", 200_000_000, minimum=1)
# Spans that end while the console database is away wait on disk, in at most this many bytes.
SCROLL_LIVE_LINT_WAIT_MS = _env_int("SCROLL_LIVE_LINT_WAIT_MS", 1000, minimum=0)
SCROLL_SPAN_SPOOL_BYTES = _env_int("SCROLL_SPAN_SPOOL_BYTES", 64 * 1024 * 1024, minimum=1)
# How long the span sink waits after a span for more before it sends them (dashboard.telemetry
# .spans): a burst goes out as one frame per page, at the cost of this much latency.
SCROLL_SPAN_LINGER_MS = _env_int("SCROLL_SPAN_LINGER_MS", 20, minimum=0)
SCROLL_KERNEL_POOL = _env_int("SCROLL_KERNEL_POOL", 1, minimum=0)
SCROLL_RUNNER_WORKERS = _env_int("SCROLL_RUNNER_WORKERS", 4, minimum=1)
SCROLL_GATEWAY_THREADS = _env_int("SCROLL_GATEWAY_THREADS", 64, minimum=1)
SCROLL_GATEWAY_MAX_BODY_MB = _env_int("SCROLL_GATEWAY_MAX_BODY_MB", 64, minimum=1)
SCROLL_GATEWAY_CPU_SLOTS = _env_int("SCROLL_GATEWAY_CPU_SLOTS", 4, minimum=1)
SCROLL_GATEWAY_SESSION_WAIT_S = float(_env_int("SCROLL_GATEWAY_SESSION_WAIT_S", 30, minimum=0))
SCROLL_GATEWAY_SESSION_IDLE_S = float(_env_int("SCROLL_GATEWAY_SESSION_IDLE_S", 900, minimum=1))
SCROLL_GATEWAY_RESPONSE_DAYS = _env_int("SCROLL_GATEWAY_RESPONSE_DAYS", 30, minimum=1)

# Behind TLS: see the module docstring. Off by default, for the embedded plain-HTTP `make run`.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _env_flag("SCROLL_SECURE_COOKIES", False)
SECURE_HSTS_SECONDS = _env_int("SCROLL_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_flag("SCROLL_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = _env_flag("SCROLL_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = _env_flag("SCROLL_SSL_REDIRECT", False)
if _env_flag("SCROLL_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# The console's pages pass this policy (tests/browser/test_console_csp.py): every script is a
# file (static/scroll.js, htmx, Plotly's vendored bundle), every style is static/scroll.css or
# set through the CSSOM, and the live socket is same-origin ('self' covers ws:/wss: to the
# page's own host in CSP level 3 browsers).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
