"""Settings, read from the environment in this one module (see .env.example).

The defaults are the embedded demo: SQLite, the simulated cluster, DEBUG on. Production sets
DEBUG=false, SECRET_KEY, ALLOWED_HOSTS, DATABASE_URL and REDIS_URL, which also switches on the
secure-cookie and HSTS settings that `manage.py check --deploy` looks for.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import environ
from csp.constants import NONCE as CSP_NONCE
from csp.constants import NONE as CSP_NONE
from csp.constants import SELF as CSP_SELF

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=True)
SECRET_KEY = env.str("SECRET_KEY", default="insecure-local-demo-key-change-me" if DEBUG else "")
if not SECRET_KEY:
    raise environ.ImproperlyConfigured("SECRET_KEY must be set when DEBUG is false")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "portal.admin_site.PortalAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "knox",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "csp",
    "tenants",
    "scheduling",
    "runtime",
    "accounting",
    "portal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A workload's own host gets its callback (and, simulated, its placeholder), no portal page.
    "runtime.middleware.WorkloadHostMiddleware",
    # Outside the rest, so that whatever they answer under /api/ is in the API's error shape.
    "tenants.api.errors.ApiErrorShapeMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "tenants.middleware.SessionLimitsMiddleware",
    "tenants.middleware.DeniedAccessAuditMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "tenants.middleware.CacheOutageMiddleware",
]

# Static files come from WhiteNoise: collected ones in production, straight from the finders
# with DEBUG on (the ASGI server of `make run` has no static handler of its own).
MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

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
                "tenants.context_processors.roles",
                "tenants.context_processors.csp_nonce",
            ],
            "builtins": ["portal.templatetags.portal_format"],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'var' / 'portal.sqlite3'}"),
}
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=0))
# Persistent connections are checked before each request reuses them (a restarted PostgreSQL
# costs a reconnect, not a failed request).
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
# The web tier runs under ASGI, where every request has a thread of its own: a kept connection
# (CONN_MAX_AGE) would outlive its thread. There each process borrows connections from a pool
# of at most DATABASE_POOL_MAX_SIZE instead (psycopg's pool; 0: no pool, one per request).
DATABASE_POOL_MAX_SIZE = env.int("DATABASE_POOL_MAX_SIZE", default=0)
if DATABASE_POOL_MAX_SIZE and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DATABASE_POOL_MAX_SIZE,
        "timeout": env.float("DATABASE_POOL_TIMEOUT_SECONDS", default=10.0),
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The demo runs a web server, a worker and beat on one file. A deferred transaction cannot
    # upgrade its read lock to a write lock (it fails at once with "database is locked", whatever
    # the timeout), so every transaction takes the write lock when it begins and waits for it;
    # WAL lets readers go on meanwhile.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=20,
        transaction_mode="IMMEDIATE",
        init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    )
    (BASE_DIR / "var").mkdir(exist_ok=True)
    # A file, not memory, so that a real worker process in the tests sees the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "var" / "test-portal.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [
    ("vendor/bootstrap", BASE_DIR / "node_modules" / "bootstrap" / "dist"),
    ("vendor/chart.js", BASE_DIR / "node_modules" / "chart.js" / "dist"),
    ("vendor/chartjs-plugin-zoom", BASE_DIR / "node_modules" / "chartjs-plugin-zoom" / "dist"),
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- API -------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.api.authentication.NamedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON in, as the schema says: a form-encoded body cannot tell 1 from "1" or true.
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_PAGINATION_CLASS": "tenants.api.pagination.PortalPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "tenants.api.filters.PortalFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "tenants.api.schema.PortalAutoSchema",
    "EXCEPTION_HANDLER": "tenants.api.errors.portal_exception_handler",
    "DEFAULT_THROTTLE_RATES": {
        "login": env.str("LOGIN_RATE", default="10/minute"),
        "request-create": env.str("REQUEST_CREATE_RATE", default="120/minute"),
        "export": env.str("EXPORT_RATE", default="30/minute"),
    },
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
REST_KNOX = {
    "TOKEN_TTL": timedelta(hours=env.int("API_TOKEN_TTL_HOURS", default=720)),
    "AUTH_HEADER_PREFIX": "Token",
    "AUTO_REFRESH": False,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": "Request, approve, schedule and account for shared GPUs on Kubernetes.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No deep links: Swagger UI puts them as links inside each operation's toggle button, a
    # control inside a control that screen readers and keyboards cannot tell apart.
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    "SCHEMA_PATH_PREFIX": "/api/v1",
    # Request priorities and an approval rule's highest auto-approved one are the same choices.
    "ENUM_NAME_OVERRIDES": {
        "PriorityEnum": "scheduling.choices.Priority",
        # A flavor's kind and a workload's kind are both "kind".
        "FlavorKindEnum": "scheduling.choices.FlavorKind",
        "WorkloadKindEnum": "scheduling.choices.WorkloadKind",
        # A user's topics per channel are one set; so are the webhook formats of an organisation
        # webhook and a user's own.
        "NotificationTopicEnum": "tenants.choices.NotificationTopic",
        "WebhookFormatEnum": "tenants.choices.WebhookFormat",
    },
    # Requests get their own components: no read-only fields, required and non-blank as the
    # serializers validate them.
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "tenants.api.schema.document_request_constraints",
    ],
}

# Rate limits count in the cache: shared through Redis when there is one, per process otherwise.
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": env.str("REDIS_URL"),
        }
        if env.str("REDIS_URL", default="")
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    ),
    # Per-process answers that may be a few seconds old (the dashboard summary counters).
    "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "local"},
}
LOGIN_ATTEMPTS_PER_MINUTE = env.int("LOGIN_ATTEMPTS_PER_MINUTE", default=10)

# --- Celery ----------------------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=300)
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=240)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# An unacknowledged task (its worker died) is delivered again after this many seconds.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT_SECONDS", default=600)
}
CELERY_BEAT_SCHEDULE_FILENAME = env.str(
    "CELERY_BEAT_SCHEDULE_FILENAME", default=str(BASE_DIR / "var" / "celerybeat-schedule")
)

# --- Product ---------------------------------------------------------------------------------
CLUSTER_BACKEND = env.str("CLUSTER_BACKEND", default="simulated")
if CLUSTER_BACKEND not in {"simulated", "kubernetes"}:
    raise environ.ImproperlyConfigured("CLUSTER_BACKEND must be 'simulated' or 'kubernetes'")
# Who admits requests: the portal's own engine, or Kueue on the cluster (docs/kueue.md), which
# needs CLUSTER_BACKEND=kubernetes and runs batch jobs only.
SCHEDULER = env.str("SCHEDULER", default="portal")
if SCHEDULER not in {"portal", "kueue"}:
    raise environ.ImproperlyConfigured("SCHEDULER must be 'portal' or 'kueue'")
if SCHEDULER == "kueue" and CLUSTER_BACKEND != "kubernetes":
    raise environ.ImproperlyConfigured("SCHEDULER=kueue needs CLUSTER_BACKEND=kubernetes")
# How often the Kueue objects are checked against the portal's policy and re-applied.
KUEUE_POLICY_SECONDS = env.float("KUEUE_POLICY_SECONDS", default=60.0)
KUBECONFIG = env.str("KUBECONFIG", default="")
KUBE_CONTEXT = env.str("KUBE_CONTEXT", default="") or None
# The worker's Kubernetes username on the local cluster, which it binds its per-namespace role
# to (runtime/cluster/kubernetes_projects.py); empty: asked of the API server (SelfSubjectReview).
KUBERNETES_PORTAL_USERNAME = env.str("KUBERNETES_PORTAL_USERNAME", default="")
# Extra or overriding GPU product → model names (runtime/cluster/gpu_models.py), a JSON
# object, e.g. {"NVIDIA-A100-SXM4-80GB": "A100-80G"}.
GPU_MODEL_ALIASES: dict[str, str] = env.json("GPU_MODEL_ALIASES", default={})
# Connecting to notebooks and services (docs/security.md, "Workload origins"): request 812 is
# served on a host of its own, WORKLOAD_SCHEME://812.WORKLOAD_DOMAIN/ (host[:port]), never on the
# portal's host, so the portal's host-only cookies never reach it. The browser gets there through
# PORTAL_URL/connect/812/ (the portal's public origin), which hands it a short-lived link that
# the workload host turns into a cookie of its own. WORKLOAD_ROUTE "ingress" makes one Ingress
# per workload whose external auth asks PORTAL_INTERNAL_URL + /auth/workloads/<id>/; "none" makes
# no route (the URL is still shown, e.g. for a route made by hand).
if env.str("WORKLOAD_BASE_URL", default=""):
    raise environ.ImproperlyConfigured(
        "WORKLOAD_BASE_URL is gone: workloads are served on hosts of their own under "
        "WORKLOAD_DOMAIN (docs/security.md, 'Workload origins')"
    )
WORKLOAD_DOMAIN = env.str("WORKLOAD_DOMAIN", default="workloads.localhost:8000").strip(".").lower()
WORKLOAD_SCHEME = env.str("WORKLOAD_SCHEME", default="http" if DEBUG else "https")
if WORKLOAD_SCHEME not in {"http", "https"}:
    raise environ.ImproperlyConfigured("WORKLOAD_SCHEME must be 'http' or 'https'")
PORTAL_URL = env.str("PORTAL_URL", default="").rstrip("/")
# How long the link from /connect/ stays valid (used once), and the workload cookie it becomes.
WORKLOAD_LINK_SECONDS = env.int("WORKLOAD_LINK_SECONDS", default=60)
WORKLOAD_COOKIE_SECONDS = env.int("WORKLOAD_COOKIE_SECONDS", default=3600)
# Only pods of this namespace (the ingress controller's) may reach workloads' ports.
INGRESS_CONTROLLER_NAMESPACE = env.str("INGRESS_CONTROLLER_NAMESPACE", default="ingress-nginx")
if "*" not in ALLOWED_HOSTS:
    # The workload hosts' own path, /_portal/callback, is answered by the portal.
    ALLOWED_HOSTS.append("." + WORKLOAD_DOMAIN.split(":")[0])
WORKLOAD_ROUTE = env.str("WORKLOAD_ROUTE", default="ingress")
if WORKLOAD_ROUTE not in {"ingress", "httproute", "none"}:
    raise environ.ImproperlyConfigured("WORKLOAD_ROUTE must be 'ingress', 'httproute' or 'none'")
# WORKLOAD_ROUTE "httproute": one Gateway API HTTPRoute per workload attached to this Gateway
# (its listener WORKLOAD_GATEWAY_SECTION if set); the gateway enforces the auth check.
WORKLOAD_GATEWAY_NAME = env.str("WORKLOAD_GATEWAY_NAME", default="gpu-portal")
WORKLOAD_GATEWAY_NAMESPACE = env.str("WORKLOAD_GATEWAY_NAMESPACE", default="gpu-portal")
WORKLOAD_GATEWAY_SECTION = env.str("WORKLOAD_GATEWAY_SECTION", default="")
# Project secret values are sealed at rest with this key (default: derived from SECRET_KEY).
PROJECT_SECRETS_KEY = env.str("PROJECT_SECRETS_KEY", default="")
# Key rotation (scheduling/sealing.py): the current sealing key first, retired ones after it,
# comma-separated; overrides PROJECT_SECRETS_KEY. `manage.py rotate_sealed_secrets` re-seals.
SECRET_SEALING_KEYS = env.list("SECRET_SEALING_KEYS", default=[])
WORKLOAD_INGRESS_CLASS = env.str("WORKLOAD_INGRESS_CLASS", default="nginx")
# Every workload pod: seccomp RuntimeDefault, no privilege escalation, no capabilities, and its
# volumes owned by this group (100: `users`, which Jupyter images' user is in; empty: none).
_workload_fs_group = env.str("WORKLOAD_FS_GROUP", default="100")
WORKLOAD_FS_GROUP = int(_workload_fs_group) if _workload_fs_group else None
# Kinds whose images must run as a non-root user (runAsNonRoot): notebook images do (Jupyter
# docker-stacks and Kubeflow run as uid 1000); jobs and services often run as root.
WORKLOAD_NON_ROOT_KINDS = env.list("WORKLOAD_NON_ROOT_KINDS", default=["notebook"])
WORKLOAD_TLS_SECRET = env.str("WORKLOAD_TLS_SECRET", default="")
PORTAL_INTERNAL_URL = env.str("PORTAL_INTERNAL_URL", default="").rstrip("/")
# Logs through the worker (CLUSTER_BACKEND=kubernetes): how long the web waits for a read, how
# often `follow` asks again, and how long one followed stream may last.
WORKLOAD_LOG_WAIT_SECONDS = env.float("WORKLOAD_LOG_WAIT_SECONDS", default=10.0)
WORKLOAD_LOG_POLL_SECONDS = env.float("WORKLOAD_LOG_POLL_SECONDS", default=2.0)
WORKLOAD_LOG_FOLLOW_SECONDS = env.float("WORKLOAD_LOG_FOLLOW_SECONDS", default=300.0)
# Long-lived responses (a followed log) one user may hold open at a time, across every web
# process; one more is answered 429 (runtime/services/streams.py).
STREAMS_PER_USER = env.int("STREAMS_PER_USER", default=4)
# Simulated cluster: how much faster than real time simulated work starts and runs.
SIMULATION_SPEED = env.float("SIMULATION_SPEED", default=1.0)
# Fault injection for the tests: how long a simulated launch takes before the object exists.
SIMULATED_LAUNCH_DELAY_SECONDS = env.float("SIMULATED_LAUNCH_DELAY_SECONDS", default=0.0)
SCHEDULING_CYCLE_SECONDS = env.float("SCHEDULING_CYCLE_SECONDS", default=10.0)
# Queue policy (docs/engine.md): how long a request blocked by capacity waits before capacity is
# reserved for it (backfilling may then use its cards only for work that ends before it starts);
# seconds of waiting that raise a request's queue priority one class (0: no aging); whether a
# team's queue is shared fairly among its members (dominant share per member).
SCHEDULING_RESERVATION_WAIT_SECONDS = env.float(
    "SCHEDULING_RESERVATION_WAIT_SECONDS", default=600.0
)
SCHEDULING_PRIORITY_AGING_SECONDS = env.float("SCHEDULING_PRIORITY_AGING_SECONDS", default=3600.0)
SCHEDULING_FAIR_SHARE_IN_TEAM = env.bool("SCHEDULING_FAIR_SHARE_IN_TEAM", default=True)
WORKLOAD_SYNC_SECONDS = env.float("WORKLOAD_SYNC_SECONDS", default=5.0)
# Monitoring: GPU activity from Prometheus (DCGM exporter / HAMi metrics) on a real cluster; the
# simulated cluster reports its own figures. A cluster's own Prometheus address (set where
# clusters are edited) comes first; this one serves every cluster that names none.
PROMETHEUS_URL = env.str("PROMETHEUS_URL", default="")
PROMETHEUS_TIMEOUT_SECONDS = env.float("PROMETHEUS_TIMEOUT_SECONDS", default=10.0)
# Where the pod's labels are (docs/operations.md): `gpu-operator` keeps the exporter's `pod` and
# `namespace` (scraped with honorLabels: true); `dcgm-exporter` reads `exported_pod` and
# `exported_namespace` (scraped with honorLabels: false). Each label can be named alone.
PROMETHEUS_LABEL_LAYOUT = env.str("PROMETHEUS_LABEL_LAYOUT", default="gpu-operator")
if PROMETHEUS_LABEL_LAYOUT not in {"gpu-operator", "dcgm-exporter"}:
    raise environ.ImproperlyConfigured(
        "PROMETHEUS_LABEL_LAYOUT must be 'gpu-operator' or 'dcgm-exporter'"
    )
PROMETHEUS_POD_LABEL = env.str("PROMETHEUS_POD_LABEL", default="")  # empty: the layout's
PROMETHEUS_NAMESPACE_LABEL = env.str("PROMETHEUS_NAMESPACE_LABEL", default="")
PROMETHEUS_HOSTNAME_LABEL = env.str("PROMETHEUS_HOSTNAME_LABEL", default="Hostname")
PROMETHEUS_GPU_UUID_LABEL = env.str("PROMETHEUS_GPU_UUID_LABEL", default="UUID")
PROMETHEUS_GPU_MODEL_LABEL = env.str("PROMETHEUS_GPU_MODEL_LABEL", default="modelName")
# Percent 0-100 on every GPU; the profiling ratio (0-1) is preferred where it is exported (empty:
# never asked); frame-buffer memory in MiB (empty: not read).
PROMETHEUS_UTILISATION_METRIC = env.str(
    "PROMETHEUS_UTILISATION_METRIC", default="DCGM_FI_DEV_GPU_UTIL"
)
PROMETHEUS_PROFILING_METRIC = env.str(
    "PROMETHEUS_PROFILING_METRIC", default="DCGM_FI_PROF_GR_ENGINE_ACTIVE"
)
PROMETHEUS_MEMORY_METRIC = env.str("PROMETHEUS_MEMORY_METRIC", default="DCGM_FI_DEV_FB_USED")
_PROMETHEUS_NAMES = {
    # setting: (pattern, may be empty): a bad name would make every query fail, so it fails here.
    "PROMETHEUS_POD_LABEL": (r"[a-zA-Z_][a-zA-Z0-9_]*", True),
    "PROMETHEUS_NAMESPACE_LABEL": (r"[a-zA-Z_][a-zA-Z0-9_]*", True),
    "PROMETHEUS_HOSTNAME_LABEL": (r"[a-zA-Z_][a-zA-Z0-9_]*", False),
    "PROMETHEUS_GPU_UUID_LABEL": (r"[a-zA-Z_][a-zA-Z0-9_]*", False),
    "PROMETHEUS_GPU_MODEL_LABEL": (r"[a-zA-Z_][a-zA-Z0-9_]*", False),
    "PROMETHEUS_UTILISATION_METRIC": (r"[a-zA-Z_:][a-zA-Z0-9_:]*", False),
    "PROMETHEUS_PROFILING_METRIC": (r"[a-zA-Z_:][a-zA-Z0-9_:]*", True),
    "PROMETHEUS_MEMORY_METRIC": (r"[a-zA-Z_:][a-zA-Z0-9_:]*", True),
}
for _setting, (_pattern, _may_be_empty) in _PROMETHEUS_NAMES.items():
    _value = globals()[_setting]
    if not (_may_be_empty and not _value) and not re.fullmatch(_pattern, _value):
        raise environ.ImproperlyConfigured(f"{_setting}={_value!r} is not a Prometheus name")
SAMPLE_INTERVAL_SECONDS = env.float("SAMPLE_INTERVAL_SECONDS", default=60.0)
SAMPLE_RETENTION_SECONDS = env.int("SAMPLE_RETENTION_SECONDS", default=14 * 24 * 3600)
# A real cluster whose last GPU activity is older than this has no signal: idle reclaim pauses
# for its work (never reclaims on missing data), and the gap shows (docs/operations.md).
ACTIVITY_SIGNAL_MAX_AGE_SECONDS = env.float(
    "ACTIVITY_SIGNAL_MAX_AGE_SECONDS", default=3 * SAMPLE_INTERVAL_SECONDS
)
RECLAIM_INTERVAL_SECONDS = env.float("RECLAIM_INTERVAL_SECONDS", default=60.0)
# A reclaimed notebook or service is scaled to zero, not deleted, so it can be resumed; after
# this long without a resume its Deployment and Service are deleted (zombie cleanup).
SUSPENDED_WORKLOAD_RETENTION_SECONDS = env.int(
    "SUSPENDED_WORKLOAD_RETENTION_SECONDS", default=7 * 24 * 3600
)
# /metrics, /readyz: allowed with this bearer token, or from loopback/private addresses.
MONITORING_TOKEN = env.str("MONITORING_TOKEN", default="")
# The web tier has no cluster credentials by design, so its /readyz leaves the cluster out.
READYZ_CHECKS_CLUSTER = env.bool("READYZ_CHECKS_CLUSTER", default=True)
# Requests in admitted/launching longer than this are launched again (idempotently).
STUCK_TRANSITION_SECONDS = env.int("STUCK_TRANSITION_SECONDS", default=120)
# ... unless their launch is still waiting in the task queue, for up to this long since it was
# queued; only a launch that waited longer (a lost message) is queued again.
LAUNCH_QUEUE_PATIENCE_SECONDS = env.int("LAUNCH_QUEUE_PATIENCE_SECONDS", default=900)
# A gang (multi-node job) with a rank the cluster's scheduler has not placed this long after its
# launch is stopped and requeued whole, so no rank holds GPUs for a gang that cannot run
# (Kueue's waitForPodsReady). 0 turns it off.
GANG_READY_TIMEOUT_SECONDS = env.int("GANG_READY_TIMEOUT_SECONDS", default=300)
# Work on a node that stopped taking work is requeued only after the node stayed away this long
# (a control-plane outage makes every node NotReady for a minute or two).
NODE_LOST_GRACE_SECONDS = env.int("NODE_LOST_GRACE_SECONDS", default=300)
# A container that cannot pull its image keeps its request launching this long (from when sync
# first saw the error) before the request fails: a registry hiccup or a late pull secret heals.
IMAGE_PULL_GRACE_SECONDS = env.int("IMAGE_PULL_GRACE_SECONDS", default=300)
# A preempted workload's pods get SIGTERM and this long to checkpoint before SIGKILL, unless
# its tier sets its own (Tier.preemption_grace_seconds).
PREEMPTION_GRACE_SECONDS = env.int("PREEMPTION_GRACE_SECONDS", default=30)
# Crash-looping work is retried after CRASH_RETRY_BASE_SECONDS, doubling per crash of the same
# request up to CRASH_RETRY_MAX_SECONDS (its tier's max_attempts still bounds the tries).
CRASH_RETRY_BASE_SECONDS = env.int("CRASH_RETRY_BASE_SECONDS", default=60)
CRASH_RETRY_MAX_SECONDS = env.int("CRASH_RETRY_MAX_SECONDS", default=1800)
# How often the sweeper looks for them (beat).
STUCK_SWEEP_SECONDS = env.float("STUCK_SWEEP_SECONDS", default=30.0)
PORTAL_CURRENCY = env.str("PORTAL_CURRENCY", default="EUR")
# Billing months and days are cut in this zone (an IANA name; DST-safe through zoneinfo).
BILLING_TIME_ZONE = env.str("BILLING_TIME_ZONE", default="UTC")
USAGE_METERING_SECONDS = env.float("USAGE_METERING_SECONDS", default=60.0)
# How the chargeback report shares the fleet's idle capacity cost back to teams: "usage" (each
# pool's idle cost by the teams' share of its GPU-hours), "guarantee" (by their guaranteed
# GPU-equivalents in the pool) or "off" (idle stays a fleet line of its own).
IDLE_COST_SHARING = env.str("IDLE_COST_SHARING", default="usage")
if IDLE_COST_SHARING not in {"usage", "guarantee", "off"}:
    raise environ.ImproperlyConfigured("IDLE_COST_SHARING must be usage, guarantee or off")
# A webhook from the environment, besides those platform admins register in the portal, and the
# payload its receiver expects: json (the event as it is), slack or teams.
NOTIFICATION_WEBHOOK_URL = env.str("NOTIFICATION_WEBHOOK_URL", default="")
NOTIFICATION_WEBHOOK_FORMAT = env.str("NOTIFICATION_WEBHOOK_FORMAT", default="json")
if NOTIFICATION_WEBHOOK_FORMAT not in {"json", "slack", "teams"}:
    raise environ.ImproperlyConfigured("NOTIFICATION_WEBHOOK_FORMAT must be json, slack or teams")
# Each user may name a webhook of their own (their notification settings): https to a public
# address only. Hosts listed here are trusted receivers (an in-house relay, say): http and
# private addresses are allowed for them. A user's webhook gets one try with this timeout.
NOTIFICATION_WEBHOOK_ALLOWED_HOSTS = env.list("NOTIFICATION_WEBHOOK_ALLOWED_HOSTS", default=[])
PERSONAL_WEBHOOK_TIMEOUT_SECONDS = env.float("PERSONAL_WEBHOOK_TIMEOUT_SECONDS", default=5.0)
DEMO_PASSWORD = env.str("DEMO_PASSWORD", default="demo")
# The demo's past: `seed_demo` writes this many days of history once (0: none).
DEMO_HISTORY_DAYS = env.int("DEMO_HISTORY_DAYS", default=90)
# The demo's simulated users keep submitting work (`make run` turns it on; simulated cluster only),
# one step every DEMO_TRAFFIC_SECONDS, with at most DEMO_TRAFFIC_MAX_LIVE requests of theirs live.
DEMO_TRAFFIC = env.bool("DEMO_TRAFFIC", default=False)
DEMO_TRAFFIC_SECONDS = env.float("DEMO_TRAFFIC_SECONDS", default=15.0)
DEMO_TRAFFIC_MAX_LIVE = env.int("DEMO_TRAFFIC_MAX_LIVE", default=16)
# Outgoing email. EMAIL_URL names the server in one value (smtp://user:password@host:25,
# smtp+tls://…:587 for STARTTLS, smtp+ssl://…:465 for TLS from the start; django-environ's
# syntax); without it the standard Django settings are read one by one, and the default
# backend writes email to the log.
_email = env.email_url_config(env.str("EMAIL_URL")) if env.str("EMAIL_URL", default="") else {}
EMAIL_BACKEND = _email.get("EMAIL_BACKEND") or env.str(
    "EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend"
)
EMAIL_HOST = _email.get("EMAIL_HOST") or env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = _email.get("EMAIL_PORT") or env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = _email.get("EMAIL_HOST_USER") or env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = _email.get("EMAIL_HOST_PASSWORD") or env.str(
    "EMAIL_HOST_PASSWORD", default=""
)
EMAIL_USE_TLS = _email.get("EMAIL_USE_TLS", env.bool("EMAIL_USE_TLS", default=False))
EMAIL_USE_SSL = _email.get("EMAIL_USE_SSL", env.bool("EMAIL_USE_SSL", default=False))
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="gpu-portal@localhost")
SERVER_EMAIL = env.str("SERVER_EMAIL", default=DEFAULT_FROM_EMAIL)
# PORTAL_URL (above) also makes the links in webhook messages absolute; empty: no link.

# --- Single sign-on (off unless OIDC_RP_CLIENT_ID is set) ------------------------------------
OIDC_ENABLED = bool(env.str("OIDC_RP_CLIENT_ID", default=""))
if OIDC_ENABLED:
    INSTALLED_APPS.append("mozilla_django_oidc")
    # Accounts by `preferred_username`; memberships follow the provider's groups
    # (tenants.services.identity).
    AUTHENTICATION_BACKENDS.append("tenants.oidc.PortalOIDCBackend")
    OIDC_RP_CLIENT_ID = env.str("OIDC_RP_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = env.str("OIDC_RP_CLIENT_SECRET")
    OIDC_RP_SIGN_ALGO = env.str("OIDC_RP_SIGN_ALGO", default="RS256")
    OIDC_OP_AUTHORIZATION_ENDPOINT = env.str("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_OP_TOKEN_ENDPOINT = env.str("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = env.str("OIDC_OP_USER_ENDPOINT")
    # Where the provider publishes its signing keys (needed for RS256/ES256 ID tokens).
    OIDC_OP_JWKS_ENDPOINT = env.str("OIDC_OP_JWKS_ENDPOINT", default=None)
    OIDC_RP_SCOPES = env.str("OIDC_RP_SCOPES", default="openid email profile")
    # Which provider group gives which role (tenants.services.identity): `group=team-slug:role` or
    # `group=role`, comma-separated, or a JSON object of the same strings; the roles are developer,
    # team_lead, finance and platform_admin. On every sign-in the memberships in the teams and
    # organisation roles named here follow the groups in the OIDC_GROUPS_CLAIM claim.
    OIDC_GROUP_MAP = env.str("OIDC_GROUP_MAP", default="")
    OIDC_GROUPS_CLAIM = env.str("OIDC_GROUPS_CLAIM", default="groups")
    LOGIN_REDIRECT_URL_FAILURE = "/login/"

# --- Security --------------------------------------------------------------------------------
SESSION_COOKIE_AGE = env.int("SESSION_COOKIE_AGE", default=8 * 3600)
# A session ends after this long without a request, and at the latest this long after sign-in
# (tenants.middleware.SessionLimitsMiddleware; ASVS V7.3).
SESSION_IDLE_TIMEOUT_SECONDS = env.int("SESSION_IDLE_TIMEOUT_SECONDS", default=30 * 60)
SESSION_MAX_AGE_SECONDS = env.int("SESSION_MAX_AGE_SECONDS", default=SESSION_COOKIE_AGE)
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Scripts only from our own origin or carrying the per-response nonce: no inline script runs
# without it. Inline style attributes stay allowed (Bootstrap widths, htmx indicators).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [CSP_SELF],
        "script-src": [CSP_SELF, CSP_NONCE],
        "style-src": [CSP_SELF, "'unsafe-inline'"],
        "img-src": [CSP_SELF, "data:"],
        "font-src": [CSP_SELF],
        "connect-src": [CSP_SELF],
        "object-src": [CSP_NONE],
        "base-uri": [CSP_SELF],
        "form-action": [CSP_SELF],
        "frame-ancestors": [CSP_NONE],
    }
}
if not DEBUG:
    SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)
    CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    # ingress-nginx calls the workload auth check inside the cluster over plain HTTP (TLS ended
    # at the proxy); a redirect there would be an error for the browser. It answers no body.
    SECURE_REDIRECT_EXEMPT = [r"^auth/workloads/\d+/$"]
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# HSTS preload is a commitment for a whole domain, so it stays the operator's choice.
SILENCED_SYSTEM_CHECKS = [] if env.bool("SECURE_HSTS_PRELOAD", default=False) else ["security.W021"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
