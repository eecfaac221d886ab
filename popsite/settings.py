"""POP settings: one module, configured only by the environment (docs/deploy.md).

Every variable read here is listed in `.env.example` and the README, and so is every POP_*
setting the code reads with `getattr(settings, ...)`: some of those (callback backoff and
batching, cron misfire grace) are not read from the environment here, and the README says so.
tests/popsite/test_docs_env.py fails when one is missing from either file.
"""

from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY is required unless DEBUG=true")
    SECRET_KEY = "insecure-development-key-only-for-debug"  # noqa: S105
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    # Kept for accounts' migration that moves its plain-text keys into accounts.ApiToken.
    "rest_framework.authtoken",
    "knox",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "core",
    "accounts",
    "popsite",
    "resourcepools",
    "agendas",
    "scheduling",
    "triggers",
    "audit",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "popsite.middleware.CorrelationIdMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "audit.middleware.AuditRequestMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last: turns a login refused by django-axes into the lockout answer (popsite/login_lockout.py).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "popsite.urls"
WSGI_APPLICATION = "popsite.wsgi.application"

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
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, cluster and worker share one file: queue for the write lock instead of failing
    # with "database is locked", and let readers run beside the writer (WAL).
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    POP_PREPARED_STATEMENTS = "off"
else:
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # Django's backend with a health check that needs no round trip while the connection's
        # socket has nothing to read (core/postgresql_backend/base.py).
        DATABASES["default"]["ENGINE"] = "core.postgresql_backend"
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=60))
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
    if env.int("DATABASE_POOL_MAX_SIZE", default=0) > 0:
        # A bounded psycopg pool per process (web nodes only: a pool's connections must not
        # cross a fork, and the cluster forks its workers after Django starts). Every thread
        # shares at most this many connections; one that waits longer than the timeout for one
        # answers 503 (docs/deploy.md "Connection budget").
        DATABASES["default"]["CONN_MAX_AGE"] = 0
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": env.int("DATABASE_POOL_MAX_SIZE"),
            "timeout": env.float("DATABASE_POOL_TIMEOUT", default=5.0),
            "max_idle": 60.0,
        }
    if not env.bool("DATABASE_JIT", default=False):
        # POP's queries are short and read by index; PostgreSQL's JIT compiles a plan whenever
        # its row estimate is large (a count over a long history) and spent 1.2 s of a 1.2 s
        # page doing so. Through PgBouncer (no startup options) set it on the role instead:
        # ALTER ROLE pop SET jit = off (docs/deploy.md).
        options = DATABASES["default"].setdefault("OPTIONS", {})
        options["options"] = f"{options.get('options', '')} -c jit=off".strip()
    # Where parameters are bound and which statements psycopg prepares is
    # POP_PREPARED_STATEMENTS (core/prepared_statements.py, docs/decisions.md): "hot" (the
    # default) the pull's and reports' statements from their sixth run on a connection (never
    # a list's or a fill's), parameters bound on the server; "off" client-side binding and
    # nothing prepared (PgBouncer before 1.21 in transaction mode); "all" every statement
    # (generic plans made lists over a long history 26% slower).
    POP_PREPARED_STATEMENTS = env.str("DATABASE_PREPARED_STATEMENTS", default="hot").lower()
    # The switch was a boolean before "hot" existed.
    POP_PREPARED_STATEMENTS = {"true": "all", "false": "off"}.get(
        POP_PREPARED_STATEMENTS, POP_PREPARED_STATEMENTS
    )
    if POP_PREPARED_STATEMENTS not in ("hot", "all", "off"):
        raise ImproperlyConfigured("DATABASE_PREPARED_STATEMENTS must be hot, all or off")
    if POP_PREPARED_STATEMENTS != "off":
        options = DATABASES["default"].setdefault("OPTIONS", {})
        options.setdefault("server_side_binding", True)
        options.setdefault("prepare_threshold", 5 if POP_PREPARED_STATEMENTS == "all" else None)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# Request bodies above 1 MiB are refused with 413 (docs/design.md §5.1).
POP_MAX_BODY_BYTES = env.int("POP_MAX_BODY_BYTES", default=1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = POP_MAX_BODY_BYTES
# JSON bodies nested deeper than this are refused with 400 before they are parsed.
POP_MAX_JSON_DEPTH = env.int("POP_MAX_JSON_DEPTH", default=64)

EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="pop@localhost")

# API tokens (accounts.ApiToken, django-rest-knox): only their hash is stored. A new token
# lives this many days unless its creator says otherwise; 0: no expiry by default.
POP_TOKEN_TTL_DAYS = env.int("POP_TOKEN_TTL_DAYS", default=90)
KNOX_TOKEN_MODEL = "accounts.ApiToken"
REST_KNOX = {"TOKEN_MODEL": KNOX_TOKEN_MODEL, "AUTH_HEADER_PREFIX": "Token"}
# knox's own AuthToken is swapped out for accounts.ApiToken, but knox's migrations would still
# create its table (one that `flush` then cannot truncate: it references auth_user). Without
# migrations, the swapped model gets no table at all.
MIGRATION_MODULES = {"knox": None}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.Pagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PARSER_CLASSES": ["core.parsers.LimitedJSONParser"],
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": [
        "core.throttling.AnonRateThrottle",
        "core.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env.str("POP_THROTTLE_ANON", default="60/minute"),
        "user": env.str("POP_THROTTLE_USER", default="100000/minute"),
        # The token-less trigger fire endpoint (triggers/api/views.py): per trigger, and per
        # client address across triggers.
        "trigger_fire": env.str("POP_THROTTLE_TRIGGER_FIRE", default="600/minute"),
        "trigger_fire_address": env.str("POP_THROTTLE_TRIGGER_FIRE_ADDRESS", default="1200/minute"),
    },
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "POP — Priority Operation Processing",
    "DESCRIPTION": "Fair multi-tenant scheduling of agendas onto resource pools.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Several models have a `state`; name their choice sets instead of hashing them.
    "ENUM_NAME_OVERRIDES": {
        "AgendaStateEnum": "agendas.models.AgendaProgress.State",
        "OperationStateEnum": "agendas.models.OperationProgress.State",
    },
    # The docs list the tags in this order: as a user meets them, agendas first.
    "TAGS": [
        {
            "name": "agendas",
            "description": "Submit agendas, one or in bulk; read them with their progress; "
            "abort, pause, resume or rerun them.",
        },
        {
            "name": "templates",
            "description": "Agenda bodies with @<…> references, run with a payload.",
        },
        {
            "name": "progress",
            "description": "Agendas' and operations' progress, and the combined state of "
            "every agenda sharing a link id.",
        },
        {"name": "schedules", "description": "Cron schedules that run a template."},
        {
            "name": "pullers",
            "description": "For workers: lease queued agendas of an insight, report their "
            "progress and outcome (lease token in X-POP-Lease).",
        },
        {
            "name": "triggers",
            "description": "Inbound triggers: a signed event (HMAC, no token) runs a template.",
        },
        {
            "name": "resource pools",
            "description": "Pools and their insights (queues): mappers, algorithm, limits.",
        },
        {
            "name": "queues",
            "description": "Per insight: queue depth, ready and executing agendas, rate limit.",
        },
        {"name": "callbacks", "description": "The callback outbox of your agendas."},
        {"name": "alerts", "description": "Alerts raised by your customers' alert rules."},
        {"name": "customers", "description": "Customers, their members, roles and tokens."},
        {
            "name": "auth",
            "description": "API tokens: get one with a username and password; list, revoke.",
        },
        {"name": "audit", "description": "Who did what: logins, submissions, changes."},
    ],
}

# --- Proxies, caches, login throttling ----------------------------------------------------
# How many reverse proxies in front of the web nodes append to X-Forwarded-For. 0 (default):
# the header is ignored and the client is REMOTE_ADDR, so a caller cannot pick its own address
# for the throttles and the login lockout; N: the N-th address from the right is the client,
# and X-Forwarded-Proto from the proxy says whether the request came over HTTPS.
POP_NUM_PROXIES = env.int("POP_NUM_PROXIES", default=0)
if POP_NUM_PROXIES < 0:
    raise ImproperlyConfigured("POP_NUM_PROXIES must be 0 or more")
REST_FRAMEWORK["NUM_PROXIES"] = POP_NUM_PROXIES
if POP_NUM_PROXIES:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Throttle counters must be shared by every process and node: a database table by default
# (created by popsite/migrations/0001_cache_table.py), Redis when POP_CACHE_URL names one.
POP_CACHE_TABLE = "pop_cache"
POP_CACHE_URL = env.str("POP_CACHE_URL", default="")
if POP_CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": POP_CACHE_URL,
        }
    }
elif POP_CACHE_URL:
    raise ImproperlyConfigured("POP_CACHE_URL must be a redis:// or rediss:// URL (or empty)")
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": POP_CACHE_TABLE,
        }
    }

# Failed logins (POST /api/v1/auth/token/, /accounts/login/, /admin/login/) are counted by
# django-axes in the database, per username and per client address separately: either one
# reaching the limit refuses further attempts until the cool-off has passed.
INSTALLED_APPS += ["axes", "csp"]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("POP_LOGIN_FAILURE_LIMIT", default=5)
POP_LOGIN_COOLOFF_MINUTES = env.float("POP_LOGIN_COOLOFF_MINUTES", default=15.0)
AXES_COOLOFF_TIME = POP_LOGIN_COOLOFF_MINUTES / 60  # hours
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_CLIENT_IP_CALLABLE = "core.client_ip.client_ip"
AXES_LOCKOUT_CALLABLE = "popsite.login_lockout.lockout_response"
AXES_HTTP_RESPONSE_CODE = 429
AXES_RESET_ON_SUCCESS = False  # a caller's own good login must not clear its address's count
AXES_VERBOSE = False
AXES_ENABLE_ACCESS_FAILURE_LOG = True  # each failure, for the operator in the admin

# --- HTTPS and browser security headers (`manage.py check --deploy`) ------------------------
# POP_TLS_UPSTREAM=true: the site is served over HTTPS (TLS ends at the load balancer or at
# gunicorn). With DEBUG off, that turns on secure cookies, the redirect to HTTPS and HSTS;
# each can be set on its own.
POP_TLS_UPSTREAM = env.bool("POP_TLS_UPSTREAM", default=False)
_https = POP_TLS_UPSTREAM and not DEBUG
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("POP_SECURE_COOKIES", default=_https)
SECURE_SSL_REDIRECT = env.bool("POP_SSL_REDIRECT", default=_https)
# Probes and scrapers talk to the pods directly over HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^healthz/scheduler$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("POP_HSTS_SECONDS", default=31536000 if _https else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("POP_HSTS_INCLUDE_SUBDOMAINS", default=_https)
SECURE_HSTS_PRELOAD = env.bool("POP_HSTS_PRELOAD", default=_https)
if SECURE_SSL_REDIRECT and POP_TLS_UPSTREAM and not POP_NUM_PROXIES:
    raise ImproperlyConfigured(
        "POP_TLS_UPSTREAM with the HTTPS redirect needs POP_NUM_PROXIES >= 1: without a "
        "trusted X-Forwarded-Proto every request looks like plain HTTP and redirects forever"
    )
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy (django-csp): scripts only from our own static files, never inline.
# Inline style *attributes* stay allowed (progress bar widths, chart sizes); the API docs
# pages widen the policy for their own bundles in popsite/urls.py.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# --- POP knobs (docs/design.md §8, docs/deploy.md) ------------------------------------------------
POP_FILL_INTERVAL = env.float("POP_FILL_INTERVAL", default=2.0)
POP_PROMOTE_INTERVAL = env.float("POP_PROMOTE_INTERVAL", default=2.0)
POP_RECLAIM_INTERVAL = env.float("POP_RECLAIM_INTERVAL", default=15.0)
POP_TIMEOUT_INTERVAL = env.float("POP_TIMEOUT_INTERVAL", default=60.0)
POP_REAP_INTERVAL = env.float("POP_REAP_INTERVAL", default=3600.0)
POP_CALLBACK_INTERVAL = env.float("POP_CALLBACK_INTERVAL", default=2.0)
POP_CRON_INTERVAL = env.float("POP_CRON_INTERVAL", default=10.0)
POP_ALERT_INTERVAL = env.float("POP_ALERT_INTERVAL", default=30.0)
POP_ACTIONS_INTERVAL = env.float("POP_ACTIONS_INTERVAL", default=30.0)
POP_CALLBACK_ALLOW_PRIVATE = env.bool("POP_CALLBACK_ALLOW_PRIVATE", default=False)
POP_CALLBACK_TIMEOUT = env.float("POP_CALLBACK_TIMEOUT", default=5.0)
POP_CALLBACK_MAX_ATTEMPTS = env.int("POP_CALLBACK_MAX_ATTEMPTS", default=8)
# Inbound triggers (docs/design.md §5.4): firings kept per trigger (older ones are deleted as
# new ones arrive), and how much of each event a firing stores.
POP_TRIGGER_FIRINGS_KEPT = env.int("POP_TRIGGER_FIRINGS_KEPT", default=1000)
POP_TRIGGER_EVENT_EXCERPT_BYTES = env.int("POP_TRIGGER_EVENT_EXCERPT_BYTES", default=4096)
# Callback delivery: backoff (doubling, capped), batch size, threads per batch, round budget.
POP_CALLBACK_BACKOFF_SECONDS = env.float("POP_CALLBACK_BACKOFF_SECONDS", default=10.0)
POP_CALLBACK_BACKOFF_CAP_SECONDS = env.float("POP_CALLBACK_BACKOFF_CAP_SECONDS", default=3600.0)
POP_CALLBACK_BATCH_SIZE = env.int("POP_CALLBACK_BATCH_SIZE", default=50)
POP_CALLBACK_CONCURRENCY = env.int("POP_CALLBACK_CONCURRENCY", default=8)
POP_CALLBACK_RUN_SECONDS = env.float("POP_CALLBACK_RUN_SECONDS", default=30.0)
# How late a cron occurrence may still fire as on time (default: max(60, 3 x POP_CRON_INTERVAL)).
POP_CRON_MISFIRE_GRACE_SECONDS = env.float(
    "POP_CRON_MISFIRE_GRACE_SECONDS", default=max(60.0, 3 * POP_CRON_INTERVAL)
)
POP_RETRY_DELAY_CAP_SECONDS = env.int("POP_RETRY_DELAY_CAP_SECONDS", default=600)
POP_REAP_BATCH_SIZE = env.int("POP_REAP_BATCH_SIZE", default=1000)
# Days an audit event is kept; unset keeps the trail for ever (the reaper removes older ones).
POP_AUDIT_RETENTION_DAYS = env.int("POP_AUDIT_RETENTION_DAYS", default=None)
# The task a fill nudge enqueues (named here so the state machine never names the scheduler).
POP_FILL_NUDGE_TASK = "scheduling.tasks.insight_fill"
# Runs a job of actions on a set of agendas (agendas/bulk_actions.py) once it is recorded.
POP_ACTIONS_TASK = "scheduling.tasks.agenda_actions"
# How a fill is nudged: a notification the ticker listens for (notify; PostgreSQL only, read as
# async elsewhere), a django-q2 task (async), the fill in the request's on_commit hook (sync),
# or not at all (off).
POP_FILL_NUDGE = env.str("POP_FILL_NUDGE", default="notify")
# The ticker fills a nudged insight (POP_FILL_NUDGE=notify) at most once within this many
# seconds; a nudge inside the window is filled at its end.
POP_FILL_LISTEN_INTERVAL = env.float("POP_FILL_LISTEN_INTERVAL", default=0.05)
# A fill adds to the queue's room what pulls took from it since the previous fill, at most
# this many seconds of it at their rate (scheduling.fill.fill_pace; 0: the room is queue_size).
POP_FILL_PACE_SECONDS = env.float("POP_FILL_PACE_SECONDS", default=0.1)
# At most one fill nudge per insight and process within this many seconds.
POP_FILL_NUDGE_MIN_INTERVAL = env.float("POP_FILL_NUDGE_MIN_INTERVAL", default=0.02)
# Sub-minute processes run in a ticker task of links this long (scheduling/recurring.py).
POP_TICKER_LINK_SECONDS = env.float("POP_TICKER_LINK_SECONDS", default=10.0)
# First pause between long-poll checks of a pull; doubles up to 0.5 s.
POP_PULL_POLL_SECONDS = env.float("POP_PULL_POLL_SECONDS", default=0.05)
# When set, GET /metrics wants `Authorization: Bearer <token>`. Unset, /metrics answers 401
# unless DEBUG or POP_METRICS_PUBLIC=true (an explicit opt-in, e.g. for a demo).
POP_METRICS_TOKEN = env.str("POP_METRICS_TOKEN", default="")
POP_METRICS_PUBLIC = env.bool("POP_METRICS_PUBLIC", default=False)
# Label the queue levels per customer too (names every customer to whoever scrapes).
POP_METRICS_PER_CUSTOMER = env.bool("POP_METRICS_PER_CUSTOMER", default=False)

Q_CLUSTER = {
    "name": "pop",
    "orm": "default",
    # One worker is always busy with the ticker (scheduling/recurring.py); keep others free
    # for fill nudges and the minute-level processes.
    "workers": env.int("POP_Q_WORKERS", default=4),
    "timeout": 300,
    "retry": 360,
    "max_attempts": 1,
    "catch_up": False,
    "poll": 0.2,
    "guard_cycle": 0.5,
    "ack_failures": True,
    "save_limit": 250,
    "label": "Tasks",
    # Rides out a database restart in ~1 s instead of django-q2's 10 s (scheduling/q_broker.py).
    "broker_class": "scheduling.q_broker.OutageTolerantORM",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # django-q2 logs as "django-q" (with a hyphen): its INFO lines (every task) are noise.
    "loggers": {"django-q": {"level": env.str("POP_Q_LOG_LEVEL", default="WARNING")}},
}
