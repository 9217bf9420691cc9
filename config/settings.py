"""The one settings file. Everything configurable comes from the environment (contract §1).

Production fails closed: no default secret, DEBUG off. Development defaults come from
``make run``, not from here: it writes them to ``var/dev.env``, which this file reads
when it exists (``SVC_ENV_FILE``), so ``manage.py`` run by hand uses the dev server's.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from config.seller import seller_settings
from config.settings_checks import (
    BASE_DIR,
    cidrs,
    database,
    email_addresses,
    email_settings,
    env,
    flag,
    number,
    path,
    read_env_file,
    reminder_days,
    replica_database,
    root_keys,
    seat_release_policy,
    signer_checked,
    style_hash,
    test_clock_file,
)
from devices import token as codec
from svccore.rates import parse_rate

read_env_file()

DEBUG = flag("SVC_DEBUG", default=False)
SECRET_KEY = env.str("SVC_SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SVC_SECRET_KEY is not set. Set it to a long random string in production "
            "(`make run` generates one for development)."
        )
    SECRET_KEY = "insecure-development-only-secret"  # noqa: S105 - only with SVC_DEBUG=1

ALLOWED_HOSTS = env.list("SVC_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "customers",
    "signing",
    "licensing",
    "billing",
    "audit",
    "operators",
    "ratelimits",
    "events",
    "portal",
    "console",  # no models: its admin.py registers the customer pages (they read the apps)
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "csp",
    # Session idle timeout and lifetime: a login starts a session's lifetime (signal).
    "config.sessions.SessionLimits",
]

MIDDLEWARE = [
    "config.middleware.RetryAfterMiddleware",
    "config.metrics.ResponseCountMiddleware",
    # Outside everything that reads the database: an answer it does again on the primary
    # goes through the rest of the chain again.
    "config.replica.ReplicaReadsMiddleware",
    "config.middleware.NulByteMiddleware",
    "config.middleware.UntrustedForwardingMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.sessions.SessionLimitsMiddleware",
    "django_otp.middleware.OTPMiddleware",
    "console.second_factor.SecondFactorMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "audit.middleware.AuditActorMiddleware",
    "axes.middleware.AxesMiddleware",
]

# Console and portal logins: django-axes locks out, for SVC_LOGIN_COOLOFF_MINUTES
# (answered 429), an account from an address after SVC_LOGIN_FAILURE_LIMIT wrong
# passwords or codes, an account from everywhere after SVC_LOGIN_ACCOUNT_FAILURE_LIMIT,
# an address for every account after SVC_LOGIN_ADDRESS_FAILURE_LIMIT, and an account
# after SVC_LOGIN_FAILURE_LIMIT wrong codes from anywhere (operators.lockout);
# `manage.py axes_reset` lifts every lockout, `axes_reset_username NAME` one account's.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = number("SVC_LOGIN_FAILURE_LIMIT", 5, low=1, high=1000)
SVC_LOGIN_ACCOUNT_FAILURE_LIMIT = number("SVC_LOGIN_ACCOUNT_FAILURE_LIMIT", 20, low=1, high=10_000)
SVC_LOGIN_ADDRESS_FAILURE_LIMIT = number("SVC_LOGIN_ADDRESS_FAILURE_LIMIT", 20, low=1, high=10_000)
AXES_HANDLER = "operators.lockout.LockoutHandler"
AXES_COOLOFF_TIME = (
    number("SVC_LOGIN_COOLOFF_MINUTES", 15.0, low=0.1, high=10_080, whole=False) / 60
)  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_CLIENT_IP_CALLABLE = "config.clientip.client_ip"
# Console logins take a second factor (TOTP, console.second_factor) when this is on: the
# production default; `make run` (SVC_DEBUG=1) leaves it off.
SVC_REQUIRE_2FA = flag("SVC_REQUIRE_2FA", default=not DEBUG)
OTP_TOTP_ISSUER = "Licensing authority"
# A right password alone must not wipe the wrong codes counted against an account: with
# a second factor, failures are reset only once the code is right too.
AXES_RESET_ON_SUCCESS = not SVC_REQUIRE_2FA
AXES_VERBOSE = False

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

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
            # Dates, periods and moments as svccore.dates writes them, on every page.
            "builtins": ["config.templatetags.dates"],
        },
    },
]


DATABASES = {"default": database(env.str("DATABASE_URL", default="sqlite:///var/db.sqlite3"))}
# A PostgreSQL streaming replica for the reads that tolerate seconds of lag
# (config.replica): unset, there is no "replica" database and every read is the primary's.
SVC_DATABASE_REPLICA_URL = env.str("SVC_DATABASE_REPLICA_URL", default="").strip()
if SVC_DATABASE_REPLICA_URL:
    DATABASES["replica"] = replica_database(SVC_DATABASE_REPLICA_URL, primary=DATABASES["default"])
    DATABASE_ROUTERS = ["config.replica.ReplicaRouter"]
# A replica further behind than this (by the server's clock) is not read; its lag is
# checked once per process every SVC_REPLICA_CHECK_SECONDS.
SVC_REPLICA_MAX_LAG_SECONDS = number(
    "SVC_REPLICA_MAX_LAG_SECONDS", 5.0, low=0, high=86_400, whole=False
)
SVC_REPLICA_CHECK_SECONDS = number("SVC_REPLICA_CHECK_SECONDS", 1.0, low=0, high=60, whole=False)

# Tests only (config.clock): a file holding an offset in seconds that the server's clock
# adds, so a live server can be moved through a renewal. Honoured only on a test
# database (Django's test_ prefix, or the SQLite test file named above): a production
# server refuses to start with it.
SVC_TEST_CLOCK_FILE = test_clock_file(
    env.str("SVC_TEST_CLOCK_FILE", default=""), database_name=DATABASES["default"]["NAME"]
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHES = {"default": env.cache_url("CACHE_URL", default="locmemcache://svc")}
if "redis" in CACHES["default"]["BACKEND"].lower():
    # A Redis that stops answering must not hold requests: they go on without it
    # (config.sharedcache); CACHE_URL's own options win.
    CACHES["default"].setdefault("OPTIONS", {})
    CACHES["default"]["OPTIONS"].setdefault("socket_connect_timeout", 0.5)
    CACHES["default"]["OPTIONS"].setdefault("socket_timeout", 0.5)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Production serves every file pre-compressed (gzip and Brotli, made once by
    # collectstatic on each host); development (``make run``) copies them as they are:
    # compressing ~500 files costs 20-40 s on a 2-core machine at every start.
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = True
# The console's and the portal's own stylesheets and script (static/svc/).
STATICFILES_DIRS = [BASE_DIR / "static"]

# Largest request body (bytes): 413 past it. The largest legitimate body is a usage
# upload of 1000 records (MAX_RECORDS_PER_CALL), about 170 KB compact with every counter
# at its bound and about 230 KB indented; 512 KiB leaves room for both.
DATA_UPLOAD_MAX_MEMORY_SIZE = 512 * 1024

REST_FRAMEWORK = {
    # Every view is an operator's (X-Admin-Key) unless it declares otherwise: the device
    # endpoints say `authentication_classes = ()` and `AllowAny` where they are written.
    "DEFAULT_AUTHENTICATION_CLASSES": ["operators.authentication.OperatorKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["operators.permissions.IsOperator"],
    "UNAUTHENTICATED_USER": None,
    # DRF's JSON renderer writing each Decimal as its exact JSON number: money goes out
    # with its currency's decimals (630.00), never through a float (config.api.renderers).
    "DEFAULT_RENDERER_CLASSES": ["config.api.renderers.ExactJSONRenderer"],
    # DRF's JSON parser behind a nesting limit (config.api.parsers.JSON_MAX_DEPTH, 32).
    "DEFAULT_PARSER_CLASSES": ["config.api.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "config.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Money is a JSON number (spec §2.7), not a string.
    "COERCE_DECIMAL_TO_STRING": False,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Licensing authority API",
    "DESCRIPTION": "Signed licence tokens, batch activation, usage metering and invoices.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its viewers are public when SVC_PUBLIC_DOCS is on (not behind a key).
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The views state their bodies and answers (extend_schema); config.api.schema adds the
    # string rules they reference and the X-Admin-Key / Bearer security schemes.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.api.schema.add_components",
    ],
    "ENUM_NAME_OVERRIDES": {
        "CustomerKindEnum": "customers.serializers.CUSTOMER_KINDS",
        "InvoiceKindEnum": "billing.models.Invoice.Kind",
        "InvoiceLineKindEnum": "billing.models.InvoiceLine.Kind",
    },
}

# --- The licensing authority (contract §1) -------------------------------------------
SVC_SIGNING_KEY_FILE = path(env.str("SVC_SIGNING_KEY_FILE", default="var/signing-key.pem"))

# --- Where the signing key lives (signing.signers) ------------------------------------
# file: SVC_SIGNING_KEY_FILE. pkcs11: a key that never leaves a PKCS#11 token (HSM). The
# PIN is read from SVC_PKCS11_PIN_FILE or the environment's SVC_PKCS11_PIN when the
# service logs in; it is never kept here (Django's error reports show settings).
SVC_SIGNER = env.str("SVC_SIGNER", default="file").strip().lower()
SVC_PKCS11_MODULE = env.str("SVC_PKCS11_MODULE", default="").strip()
SVC_PKCS11_TOKEN_LABEL = env.str("SVC_PKCS11_TOKEN_LABEL", default="").strip()
SVC_PKCS11_KEY_LABEL = env.str("SVC_PKCS11_KEY_LABEL", default="svc-signing").strip()
SVC_PKCS11_TIMEOUT = number("SVC_PKCS11_TIMEOUT", 3.0, low=0.001, high=60, whole=False)
SVC_PKCS11_SESSIONS = number("SVC_PKCS11_SESSIONS", 4, low=1, high=64)
SVC_PKCS11_PIN_FILE = signer_checked(
    SVC_SIGNER,
    module=SVC_PKCS11_MODULE,
    token_label=SVC_PKCS11_TOKEN_LABEL,
    key_label=SVC_PKCS11_KEY_LABEL,
    pin_file=env.str("SVC_PKCS11_PIN_FILE", default="").strip(),
    timeout=SVC_PKCS11_TIMEOUT,
    sessions=SVC_PKCS11_SESSIONS,
)

SVC_ADMIN_KEY = env.str("SVC_ADMIN_KEY", default="")
SVC_ISSUER = env.str("SVC_ISSUER", default=codec.DEFAULT_ISSUER)
SVC_PUBLIC_DOCS = flag("SVC_PUBLIC_DOCS", default=False)
SVC_ACTIVATION_RATE = env.str("SVC_ACTIVATION_RATE", default="20/10s")
try:
    parse_rate(SVC_ACTIVATION_RATE)
except ValueError as exc:
    raise ImproperlyConfigured(f"{exc} (e.g. 20/10s: 20 activations per 10 seconds)") from None
SVC_SEAT_RELEASE_POLICY = seat_release_policy(env.str("SVC_SEAT_RELEASE_POLICY", default="5%/30d"))
SVC_ACTIVATION_ALLOWLIST = cidrs("SVC_ACTIVATION_ALLOWLIST")
# E-mail alerts (events.alerts): batch thresholds, terms ending, disabled webhooks, as one
# digest per recipient per SVC_ALERT_INTERVAL_MINUTES at most, to SVC_ALERT_EMAILS and,
# with SVC_ALERT_CUSTOMERS=1, to each customer's contact about its own. Sent by
# SVC_EMAIL_URL (smtp://user:password@host:587, smtp+tls://, smtp+ssl://); without it
# they are written to the log (Django's console backend), as in development.
SVC_ALERT_EMAILS = email_addresses("SVC_ALERT_EMAILS")
SVC_ALERT_CUSTOMERS = flag("SVC_ALERT_CUSTOMERS", default=False)
SVC_ALERT_INTERVAL_MINUTES = number("SVC_ALERT_INTERVAL_MINUTES", 60, low=1, high=10_080)
DEFAULT_FROM_EMAIL = os.environ.get("SVC_EMAIL_FROM", "").strip() or "licensing@localhost"
globals().update(email_settings("SVC_EMAIL_URL"))
EMAIL_TIMEOUT = 10

# GET /metrics answers these addresses (the monitoring network) without a key.
SVC_METRICS_ALLOWLIST = cidrs("SVC_METRICS_ALLOWLIST")
# Several worker processes (gunicorn): their metrics meet in this directory, emptied when
# the server starts (deploy/gunicorn.conf.py, make run). prometheus-client reads
# PROMETHEUS_MULTIPROC_DIR when it is first imported, which is after the settings.
SVC_METRICS_DIR = os.environ.get("SVC_METRICS_DIR", "").strip()
if SVC_METRICS_DIR:
    os.makedirs(SVC_METRICS_DIR, exist_ok=True)
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", SVC_METRICS_DIR)
SVC_TRUSTED_PROXIES = cidrs("SVC_TRUSTED_PROXIES")
# Wrong X-Admin-Key requests one address may make in 60 s before it gets 429.
SVC_ADMIN_KEY_FAILURES = number("SVC_ADMIN_KEY_FAILURES", 10, low=1, high=1_000_000)
# Requests one customer API key may make a minute (/v1/customer/*; its own limit).
SVC_CUSTOMER_API_RATE = number("SVC_CUSTOMER_API_RATE", 120, low=1, high=1_000_000)
# How long a process reuses the revocation list's head it read (seconds; 0: every
# request reads it). A revocation reaches devices polling other processes this late.
# Webhooks (events app, contract §9): endpoints are https:// and public unless allowed
# (development, tests, a receiver on the private network); an endpoint failing for
# SVC_WEBHOOK_RETRY_HOURS is disabled; each attempt waits SVC_WEBHOOK_TIMEOUT seconds.
SVC_WEBHOOK_ALLOW_HTTP = flag("SVC_WEBHOOK_ALLOW_HTTP", default=False)
SVC_WEBHOOK_ALLOW_PRIVATE = flag("SVC_WEBHOOK_ALLOW_PRIVATE", default=False)
SVC_WEBHOOK_RETRY_HOURS = number("SVC_WEBHOOK_RETRY_HOURS", 72, low=0.001, high=720, whole=False)
SVC_WEBHOOK_TIMEOUT = number("SVC_WEBHOOK_TIMEOUT", 10.0, low=0.1, high=60, whole=False)
SVC_WEBHOOK_SECRET_OVERLAP_HOURS = number(
    "SVC_WEBHOOK_SECRET_OVERLAP_HOURS", 24, low=0, high=720, whole=False
)

# Invoice documents (billing.documents): the seller block every invoice and credit note
# prints, and the payment terms that set an invoice's due date.
# The seller (config.seller): name, address, VAT id, registration, bank account and
# contact, checked with python-stdnum; production start-up refuses one that is incomplete.
globals().update(seller_settings(debug=DEBUG))
SVC_PAYMENT_TERMS_DAYS = number("SVC_PAYMENT_TERMS_DAYS", 30, low=0, high=365)
# Payment reminders (billing.reminders): days past due of the first, second and final
# reminder e-mailed to the customer's contact, each once per invoice; "off": none.
SVC_REMINDER_DAYS = reminder_days("SVC_REMINDER_DAYS", "7,21,35")

# Last seen (issue 42): a unit's last_seen_at is written at most once per this many
# minutes (per unit; at most one UPDATE per process in that time, none in between), and
# the console's dashboard counts units not seen for more than SVC_SILENT_DAYS days.
SVC_LAST_SEEN_MINUTES = number("SVC_LAST_SEEN_MINUTES", 15, low=1, high=1440)
SVC_SILENT_DAYS = number("SVC_SILENT_DAYS", 7, low=1, high=3660)

# Signed licence statuses (issue 46): each is made once per window (or per change of
# what it says) and served with Cache-Control: public, max-age of at most
# SVC_STATUS_MAX_AGE seconds (never beyond the window's end), so nginx or a CDN answers
# the rest; a revocation reaches a device through a cache within that many seconds.
SVC_STATUS_WINDOW_SECONDS = number("SVC_STATUS_WINDOW_SECONDS", 3600, low=60, high=86400)
SVC_STATUS_MAX_AGE = number("SVC_STATUS_MAX_AGE", 300, low=0, high=86400)
# Rebinding after a repair (issue 45, licensing.identity): a unit's licence follows at
# most SVC_REBIND_MAX_CHANGES changed identity components per SVC_REBIND_DAYS days, so a
# slow walk through parts cannot move a licence to another camera.
SVC_REBIND_MAX_CHANGES = number("SVC_REBIND_MAX_CHANGES", 1, low=0, high=16)
SVC_REBIND_DAYS = number("SVC_REBIND_DAYS", 30, low=1, high=3660)
# Bit-for-bit clones (licensing.identity): a unit whose identical component set comes
# back to the address it left less than this many seconds ago (A, then B, then A again)
# is flagged, something one camera moving network does not do.
SVC_CLONE_ADDRESS_WINDOW_SECONDS = number(
    "SVC_CLONE_ADDRESS_WINDOW_SECONDS", 900, low=60, high=86400
)

SVC_LIST_HEAD_SECONDS = number("SVC_LIST_HEAD_SECONDS", 1.0, low=0, high=60, whole=False)
if not 0 <= SVC_LIST_HEAD_SECONDS <= 60:
    raise ImproperlyConfigured(
        f"SVC_LIST_HEAD_SECONDS must be between 0 and 60 seconds, not {SVC_LIST_HEAD_SECONDS}"
    )


SVC_ROOT_KEYS = root_keys(env.str("SVC_ROOT_KEYS", default=""))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("SVC_LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- Content-Security-Policy (django-csp 4, csp.middleware.CSPMiddleware) -------------
# The console and the portal load scripts, styles and images from this origin only: no
# inline script at all, no inline style but one (below), no plugin, no framing, forms
# posted here only. Their own looks and behaviour are static files (static/svc/).
# The one inline style allowed, by its hash: an invoice document's stylesheet
# (templates/billing/document_style.html), which must travel inside the document (the
# PDF renderer reads it; the portal shows the document in a sandboxed srcdoc frame,
# which inherits this policy). Its text is constant, so its hash is computed here.


DOCUMENT_STYLE_HASH = style_hash(BASE_DIR / "templates" / "billing" / "document_style.html")
CONTENT_SECURITY_POLICY = {
    # JSON, CSV, PDF and metrics answers are not pages: no policy on them. The public
    # API viewers (/docs, /redoc with SVC_PUBLIC_DOCS) are drf-spectacular's pages, which
    # start Swagger UI and ReDoc with inline scripts.
    "EXCLUDE_URL_PREFIXES": ["/v1/", "/healthz", "/metrics", "/openapi", "/docs", "/redoc"],
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", DOCUMENT_STYLE_HASH],
        "img-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# --- Console and portal sessions (config.sessions) --------------------------------------
# A signed-in session ends after SVC_SESSION_IDLE_SECONDS without a request and
# SVC_SESSION_MAX_SECONDS after it signed in (Django's default was 14 days, never idle).
SVC_SESSION_IDLE_SECONDS = number("SVC_SESSION_IDLE_SECONDS", 1800, low=60, high=86_400)
SVC_SESSION_MAX_SECONDS = number("SVC_SESSION_MAX_SECONDS", 43_200, low=300, high=30 * 86_400)
if SVC_SESSION_IDLE_SECONDS > SVC_SESSION_MAX_SECONDS:
    raise ImproperlyConfigured(
        f"SVC_SESSION_IDLE_SECONDS ({SVC_SESSION_IDLE_SECONDS}) must not exceed "
        f"SVC_SESSION_MAX_SECONDS ({SVC_SESSION_MAX_SECONDS})"
    )
# The cookie itself expires with the session's lifetime.
SESSION_COOKIE_AGE = SVC_SESSION_MAX_SECONDS

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    CSRF_COOKIE_HTTPONLY = True
    X_FRAME_OPTIONS = "DENY"
    SECURE_CONTENT_TYPE_NOSNIFF = True

# --- TLS (production defaults; `make run` and the tests serve plain HTTP and say so) ---
# Behind a TLS-terminating proxy (deploy/nginx), the proxy's X-Forwarded-Proto says
# whether the client used HTTPS; it is believed only from SVC_TRUSTED_PROXIES
# (config.middleware.UntrustedForwardingMiddleware drops it from anyone else).
_proxy_header = env.str("SVC_PROXY_SSL_HEADER", default="X-Forwarded-Proto").strip()
if _proxy_header:
    SECURE_PROXY_SSL_HEADER = (f"HTTP_{_proxy_header.upper().replace('-', '_')}", "https")
SECURE_SSL_REDIRECT = flag("SVC_SSL_REDIRECT", default=not DEBUG)
# Load balancers probe, and Prometheus scrapes each node (both pools), over plain HTTP on
# the private network; /metrics keeps its own rule (SVC_METRICS_ALLOWLIST or the key).
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SESSION_COOKIE_SECURE = flag("SVC_SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = number(
    "SVC_HSTS_SECONDS", 0 if DEBUG else 31_536_000, low=0, high=10 * 31_536_000
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = flag("SVC_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = flag("SVC_HSTS_PRELOAD", default=False)
# The admin console's forms post from these origins (scheme://host); by default every
# SVC_ALLOWED_HOSTS name over HTTPS.
CSRF_TRUSTED_ORIGINS = env.list(
    "SVC_CSRF_TRUSTED_ORIGINS",
    default=[f"https://{host}" for host in ALLOWED_HOSTS if host and not host.startswith(".")],
)
# Preloading HSTS is a commitment made with the browser vendors, not a default: the
# check that asks for it stays quiet unless SVC_HSTS_PRELOAD is set.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Covering indexes (INCLUDE columns) are a PostgreSQL read optimisation; SQLite, the
    # embedded default, builds the same indexes without them, which is all it needs.
    SILENCED_SYSTEM_CHECKS.append("models.W040")
