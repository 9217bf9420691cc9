"""The one settings file. Everything configurable comes from the environment (contract §1).

Production fails closed: no default secret, DEBUG off. Development defaults come from
``make run``, not from here: it writes them to ``var/dev.env``, which this file reads
when it exists (``SVC_ENV_FILE``), so ``manage.py`` run by hand uses the dev server's.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
import re
import tempfile
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from devices import token as codec
from svccore.rates import parse_rate

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def _read_env_file() -> None:
    """Load ``SVC_ENV_FILE`` (default ``var/dev.env``, which ``make run`` writes) into the
    environment; variables already set win, and an empty value reads no file. Without
    the file (production) nothing changes; a file named explicitly must exist."""
    named = os.environ.get("SVC_ENV_FILE")
    if named is not None and not named.strip():
        return
    path = Path(named.strip() if named else "var/dev.env")
    if not path.is_absolute():
        path = BASE_DIR / path
    if not path.is_file():
        if named:
            raise ImproperlyConfigured(f"SVC_ENV_FILE names {path}, which is not a file")
        return
    environ.Env.read_env(path, overwrite=False)


_read_env_file()

FLAG_WORDS = {
    **dict.fromkeys(("1", "true", "yes", "on"), True),
    **dict.fromkeys(("0", "false", "no", "off"), False),
}


def _flag(name: str, default: bool) -> bool:
    """A yes/no variable: 1/true/yes/on or 0/false/no/off (any case); unset or empty is
    the default. Anything else stops start-up: a typo never silently means "no"."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value not in FLAG_WORDS:
        raise ImproperlyConfigured(
            f"{name} must be 1 or 0 (true/false, yes/no, on/off), not {value!r}"
        )
    return FLAG_WORDS[value]


def _number(name: str, default: float, *, low: float, high: float, whole: bool = True):
    """A number variable within [low, high]; a bad value names the variable and its range."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if value is None or value != value or not low <= value <= high:
        kind = "a whole number" if whole else "a number"
        raise ImproperlyConfigured(f"{name} must be {kind} from {low} to {high}, not {text!r}")
    return value


DEBUG = _flag("SVC_DEBUG", default=False)
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
AXES_FAILURE_LIMIT = _number("SVC_LOGIN_FAILURE_LIMIT", 5, low=1, high=1000)
SVC_LOGIN_ACCOUNT_FAILURE_LIMIT = _number("SVC_LOGIN_ACCOUNT_FAILURE_LIMIT", 20, low=1, high=10_000)
SVC_LOGIN_ADDRESS_FAILURE_LIMIT = _number("SVC_LOGIN_ADDRESS_FAILURE_LIMIT", 20, low=1, high=10_000)
AXES_HANDLER = "operators.lockout.LockoutHandler"
AXES_COOLOFF_TIME = (
    _number("SVC_LOGIN_COOLOFF_MINUTES", 15.0, low=0.1, high=10_080, whole=False) / 60
)  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_CLIENT_IP_CALLABLE = "config.clientip.client_ip"
# Console logins take a second factor (TOTP, console.second_factor) when this is on: the
# production default; `make run` (SVC_DEBUG=1) leaves it off.
SVC_REQUIRE_2FA = _flag("SVC_REQUIRE_2FA", default=not DEBUG)
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
        },
    },
]


def _prepare_threshold(pooled: bool) -> int | None:
    value = env.str("SVC_DB_PREPARE_THRESHOLD", default="off" if pooled else "5").strip().lower()
    if value == "off":
        return None
    if not value.isdigit():
        raise ImproperlyConfigured(
            f"SVC_DB_PREPARE_THRESHOLD must be a whole number of runs or 'off', not {value!r}"
        )
    return int(value)


def _database(url: str) -> dict:
    db = environ.Env.db_url_config(url)
    if db["ENGINE"] == "django.db.backends.sqlite3":
        name = db["NAME"]
        if name and name != ":memory:" and not Path(name).is_absolute():
            db["NAME"] = str(BASE_DIR / name)
        # Concurrent writers queue on the write lock (IMMEDIATE transactions + busy
        # timeout) instead of failing with "database is locked"; WAL lets reads proceed.
        db["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # Tests run against a file (one per test process, so runs never collide) that a
        # real server process can share.
        db["TEST"] = {"NAME": str(Path(tempfile.gettempdir()) / f"svc-test-{os.getpid()}.sqlite3")}
    else:
        db.setdefault("CONN_MAX_AGE", _number("SVC_DB_CONN_MAX_AGE", 60, low=0, high=86_400))
        # Persistent connections are checked before each request reuses them, by a
        # check that needs no round trip while the connection is healthy.
        db["CONN_HEALTH_CHECKS"] = True
        if db["ENGINE"] == "django.db.backends.postgresql":
            db["ENGINE"] = "config.db.postgresql"
        # Parameters bound by the server, and a statement a connection runs again and
        # again prepared (from its SVC_DB_PREPARE_THRESHOLD-th run): the hot paths are
        # planned once per connection, not once per request.
        # Behind a pooler in transaction mode (SVC_DB_TRANSACTION_POOLING, PgBouncer's
        # pool_mode = transaction) consecutive transactions may run on different server
        # connections: a statement prepared on one is unknown on the next ("prepared
        # statement _pg3_0 does not exist"), and a cursor held open across transactions
        # is lost. So no statement is prepared by name unless SVC_DB_PREPARE_THRESHOLD
        # says so (PgBouncer 1.21+ with max_prepared_statements keeps them), and
        # QuerySet.iterator() reads in chunks instead of through a server-side cursor.
        pooled = _flag("SVC_DB_TRANSACTION_POOLING", False)
        db["DISABLE_SERVER_SIDE_CURSORS"] = pooled
        db.setdefault("OPTIONS", {}).update(
            server_side_binding=True, prepare_threshold=_prepare_threshold(pooled)
        )
    return db


DATABASES = {"default": _database(env.str("DATABASE_URL", default="sqlite:///var/db.sqlite3"))}

# Tests only (config.clock): a file holding an offset in seconds that the server's clock
# adds, so a live server can be moved through a renewal. Honoured only on a test
# database (Django's test_ prefix, or the SQLite test file named above): a production
# server refuses to start with it.
SVC_TEST_CLOCK_FILE = env.str("SVC_TEST_CLOCK_FILE", default="")
if SVC_TEST_CLOCK_FILE and not Path(str(DATABASES["default"]["NAME"])).name.startswith(
    ("test_", "svc-test-")
):
    raise ImproperlyConfigured(
        "SVC_TEST_CLOCK_FILE moves the server's clock and is for tests only: it is refused "
        "unless the database is a test database (name starting test_); unset it"
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
    # with its currency's decimals (630.00), never through a float (config.renderers).
    "DEFAULT_RENDERER_CLASSES": ["config.renderers.ExactJSONRenderer"],
    # DRF's JSON parser behind a nesting limit (config.parsers.JSON_MAX_DEPTH, 32).
    "DEFAULT_PARSER_CLASSES": ["config.parsers.JSONParser"],
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
    # The views state their bodies and answers (extend_schema); config.schema adds the
    # string rules they reference and the X-Admin-Key / Bearer security schemes.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.schema.add_components",
    ],
    "ENUM_NAME_OVERRIDES": {
        "CustomerKindEnum": "customers.serializers.CUSTOMER_KINDS",
        "InvoiceKindEnum": "billing.models.Invoice.Kind",
        "InvoiceLineKindEnum": "billing.models.InvoiceLine.Kind",
    },
}

# --- The licensing authority (contract §1) -------------------------------------------
SVC_SIGNING_KEY_FILE = Path(env.str("SVC_SIGNING_KEY_FILE", default="var/signing-key.pem"))
if not SVC_SIGNING_KEY_FILE.is_absolute():
    SVC_SIGNING_KEY_FILE = BASE_DIR / SVC_SIGNING_KEY_FILE

# --- Where the signing key lives (signing.signers) ------------------------------------
# file: SVC_SIGNING_KEY_FILE. pkcs11: a key that never leaves a PKCS#11 token (HSM). The
# PIN is read from SVC_PKCS11_PIN_FILE or the environment's SVC_PKCS11_PIN when the
# service logs in; it is never kept here (Django's error reports show settings).
SVC_SIGNER = env.str("SVC_SIGNER", default="file").strip().lower()
SVC_PKCS11_MODULE = env.str("SVC_PKCS11_MODULE", default="").strip()
SVC_PKCS11_TOKEN_LABEL = env.str("SVC_PKCS11_TOKEN_LABEL", default="").strip()
SVC_PKCS11_KEY_LABEL = env.str("SVC_PKCS11_KEY_LABEL", default="svc-signing").strip()
SVC_PKCS11_PIN_FILE = env.str("SVC_PKCS11_PIN_FILE", default="").strip()
SVC_PKCS11_TIMEOUT = _number("SVC_PKCS11_TIMEOUT", 3.0, low=0.001, high=60, whole=False)
SVC_PKCS11_SESSIONS = _number("SVC_PKCS11_SESSIONS", 4, low=1, high=64)
if SVC_SIGNER not in ("file", "pkcs11"):
    raise ImproperlyConfigured(f"SVC_SIGNER must be file or pkcs11, not {SVC_SIGNER!r}")
if SVC_SIGNER == "pkcs11":
    if not SVC_PKCS11_MODULE or not Path(SVC_PKCS11_MODULE).is_file():
        raise ImproperlyConfigured(
            "SVC_PKCS11_MODULE must name the token's PKCS#11 module (a .so file), not "
            f"{SVC_PKCS11_MODULE!r}"
        )
    if not SVC_PKCS11_TOKEN_LABEL or not SVC_PKCS11_KEY_LABEL:
        raise ImproperlyConfigured(
            "SVC_SIGNER=pkcs11 needs SVC_PKCS11_TOKEN_LABEL and SVC_PKCS11_KEY_LABEL"
        )
    if bool(SVC_PKCS11_PIN_FILE) == bool(os.environ.get("SVC_PKCS11_PIN")):
        raise ImproperlyConfigured(
            "SVC_SIGNER=pkcs11 needs the token's user PIN from exactly one of "
            "SVC_PKCS11_PIN_FILE (a mode 600 file) or SVC_PKCS11_PIN"
        )
    if SVC_PKCS11_PIN_FILE and not Path(SVC_PKCS11_PIN_FILE).is_absolute():
        SVC_PKCS11_PIN_FILE = str(BASE_DIR / SVC_PKCS11_PIN_FILE)
    if not 0 < SVC_PKCS11_TIMEOUT <= 60 or not 1 <= SVC_PKCS11_SESSIONS <= 64:
        raise ImproperlyConfigured(
            "SVC_PKCS11_TIMEOUT must be 0-60 seconds and SVC_PKCS11_SESSIONS 1-64, not "
            f"{SVC_PKCS11_TIMEOUT} and {SVC_PKCS11_SESSIONS}"
        )

SVC_ADMIN_KEY = env.str("SVC_ADMIN_KEY", default="")
SVC_ISSUER = env.str("SVC_ISSUER", default=codec.DEFAULT_ISSUER)
SVC_PUBLIC_DOCS = _flag("SVC_PUBLIC_DOCS", default=False)
SVC_ACTIVATION_RATE = env.str("SVC_ACTIVATION_RATE", default="20/10s")
try:
    parse_rate(SVC_ACTIVATION_RATE)
except ValueError as exc:
    raise ImproperlyConfigured(f"{exc} (e.g. 20/10s: 20 activations per 10 seconds)") from None


def _seat_release_policy(value: str) -> tuple[float, int]:
    """``<percent>%/<days>d``: a batch may release that share of its purchased units (at
    least one) per rolling window of that many days."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)%/(\d+)d\s*", value)
    if not match or not 0 < float(match[1]) <= 100 or not 1 <= int(match[2]) <= 3660:
        raise ImproperlyConfigured(
            f"SVC_SEAT_RELEASE_POLICY must look like 5%/30d (a share of a batch's units, "
            f"0-100 %, per window of 1-3660 days), not {value!r}"
        )
    return float(match[1]), int(match[2])


SVC_SEAT_RELEASE_POLICY = _seat_release_policy(env.str("SVC_SEAT_RELEASE_POLICY", default="5%/30d"))


def _cidrs(name: str) -> list[str]:
    """``name``: comma-separated networks (``10.0.0.0/8``, ``2001:db8::/32``; a bare
    address is one host; host bits are ignored, as the throttle reads them). A value that
    is not one stops start-up naming the variable and the value, rather than failing
    every request that reads it."""
    values = [item.strip() for item in env.list(name, default=[]) if item.strip()]
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"{name}: {value!r} is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32 ({exc})"
            ) from None
    return values


SVC_ACTIVATION_ALLOWLIST = _cidrs("SVC_ACTIVATION_ALLOWLIST")
# E-mail alerts (events.alerts): batch thresholds, terms ending, disabled webhooks, as one
# digest per recipient per SVC_ALERT_INTERVAL_MINUTES at most, to SVC_ALERT_EMAILS and,
# with SVC_ALERT_CUSTOMERS=1, to each customer's contact about its own. Sent by
# SVC_EMAIL_URL (smtp://user:password@host:587, smtp+tls://, smtp+ssl://); without it
# they are written to the log (Django's console backend), as in development.
SVC_ALERT_EMAILS = [
    a.strip() for a in os.environ.get("SVC_ALERT_EMAILS", "").split(",") if a.strip()
]
for _address in SVC_ALERT_EMAILS:
    if not re.fullmatch(r"[^@\s,]+@[^@\s,]+\.[^@\s,]+", _address):
        raise ImproperlyConfigured(f"SVC_ALERT_EMAILS holds {_address!r}, not an e-mail address")
SVC_ALERT_CUSTOMERS = _flag("SVC_ALERT_CUSTOMERS", default=False)
SVC_ALERT_INTERVAL_MINUTES = _number("SVC_ALERT_INTERVAL_MINUTES", 60, low=1, high=10_080)
DEFAULT_FROM_EMAIL = os.environ.get("SVC_EMAIL_FROM", "").strip() or "licensing@localhost"
if os.environ.get("SVC_EMAIL_URL", "").strip():
    try:
        globals().update(environ.Env.email_url_config(os.environ["SVC_EMAIL_URL"].strip()))
    except Exception as exc:  # a malformed URL names the variable, never its password
        raise ImproperlyConfigured(
            "SVC_EMAIL_URL must be smtp://user:password@host:port (or smtp+tls://, "
            f"smtp+ssl://): {type(exc).__name__}"
        ) from None
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
EMAIL_TIMEOUT = 10

# GET /metrics answers these addresses (the monitoring network) without a key.
SVC_METRICS_ALLOWLIST = _cidrs("SVC_METRICS_ALLOWLIST")
# Several worker processes (gunicorn): their metrics meet in this directory, emptied when
# the server starts (deploy/gunicorn.conf.py, make run). prometheus-client reads
# PROMETHEUS_MULTIPROC_DIR when it is first imported, which is after the settings.
SVC_METRICS_DIR = os.environ.get("SVC_METRICS_DIR", "").strip()
if SVC_METRICS_DIR:
    os.makedirs(SVC_METRICS_DIR, exist_ok=True)
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", SVC_METRICS_DIR)
SVC_TRUSTED_PROXIES = _cidrs("SVC_TRUSTED_PROXIES")
# Wrong X-Admin-Key requests one address may make in 60 s before it gets 429.
SVC_ADMIN_KEY_FAILURES = _number("SVC_ADMIN_KEY_FAILURES", 10, low=1, high=1_000_000)
# Requests one customer API key may make a minute (/v1/customer/*; its own limit).
SVC_CUSTOMER_API_RATE = _number("SVC_CUSTOMER_API_RATE", 120, low=1, high=1_000_000)
# How long a process reuses the revocation list's head it read (seconds; 0: every
# request reads it). A revocation reaches devices polling other processes this late.
# Webhooks (events app, contract §9): endpoints are https:// and public unless allowed
# (development, tests, a receiver on the private network); an endpoint failing for
# SVC_WEBHOOK_RETRY_HOURS is disabled; each attempt waits SVC_WEBHOOK_TIMEOUT seconds.
SVC_WEBHOOK_ALLOW_HTTP = _flag("SVC_WEBHOOK_ALLOW_HTTP", default=False)
SVC_WEBHOOK_ALLOW_PRIVATE = _flag("SVC_WEBHOOK_ALLOW_PRIVATE", default=False)
SVC_WEBHOOK_RETRY_HOURS = _number("SVC_WEBHOOK_RETRY_HOURS", 72, low=0.001, high=720, whole=False)
SVC_WEBHOOK_TIMEOUT = _number("SVC_WEBHOOK_TIMEOUT", 10.0, low=0.1, high=60, whole=False)
SVC_WEBHOOK_SECRET_OVERLAP_HOURS = _number(
    "SVC_WEBHOOK_SECRET_OVERLAP_HOURS", 24, low=0, high=720, whole=False
)

# Invoice documents (billing.documents): the seller block every invoice and credit note
# prints, and the payment terms that set an invoice's due date.
SVC_SELLER_NAME = os.environ.get("SVC_SELLER_NAME", "").strip() or "Licensing authority"
# Lines separated by "\n" (written as \n in the environment value) or by " | ".
SVC_SELLER_ADDRESS = [
    line.strip()
    for line in os.environ.get("SVC_SELLER_ADDRESS", "").replace("\\n", "\n").replace(" | ", "\n")
    .splitlines()
    if line.strip()
]  # fmt: skip
SVC_SELLER_TAX_ID = os.environ.get("SVC_SELLER_TAX_ID", "").strip()
SVC_SELLER_EMAIL = os.environ.get("SVC_SELLER_EMAIL", "").strip()
SVC_PAYMENT_TERMS_DAYS = _number("SVC_PAYMENT_TERMS_DAYS", 30, low=0, high=365)

SVC_LIST_HEAD_SECONDS = _number("SVC_LIST_HEAD_SECONDS", 1.0, low=0, high=60, whole=False)
if not 0 <= SVC_LIST_HEAD_SECONDS <= 60:
    raise ImproperlyConfigured(
        f"SVC_LIST_HEAD_SECONDS must be between 0 and 60 seconds, not {SVC_LIST_HEAD_SECONDS}"
    )


def _root_keys(value: str) -> list[str]:
    """``SVC_ROOT_KEYS``: the root public keys that endorse the authority's signing keys
    (comma-separated; each a file holding a PEM or base64url public key, relative to the
    project directory, or the unpadded base64url of the raw 32-byte key itself). The
    same roots are compiled into the firmware; their private keys live offline and never
    on this server. Returned as base64url raw keys. Empty: no root (development and
    legacy), tokens still carry ``kid`` but key certificates are optional."""
    keys = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        text = item
        if not re.fullmatch(r"[A-Za-z0-9_-]{43}", item):
            path = Path(item) if Path(item).is_absolute() else BASE_DIR / item
            try:
                text = path.read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError) as exc:
                raise ImproperlyConfigured(
                    f"SVC_ROOT_KEYS: {item!r} is neither a base64url Ed25519 public key nor a "
                    f"readable public key file ({type(exc).__name__})"
                ) from None
        try:
            keys.append(codec.public_key_b64url(text))
        except ValueError as exc:
            hint = (
                " (a root's private key never belongs on the server)" if "PRIVATE" in text else ""
            )
            raise ImproperlyConfigured(
                f"SVC_ROOT_KEYS: {item!r} is not an Ed25519 public key: {exc}{hint}"
            ) from None
    return keys


SVC_ROOT_KEYS = _root_keys(env.str("SVC_ROOT_KEYS", default=""))

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


def _style_hash(template: Path) -> str:
    text = template.read_text(encoding="utf-8")
    body = text[text.index("<style>") + len("<style>") : text.index("</style>")]
    digest = hashlib.sha256(body.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


DOCUMENT_STYLE_HASH = _style_hash(BASE_DIR / "templates" / "billing" / "document_style.html")
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
SVC_SESSION_IDLE_SECONDS = _number("SVC_SESSION_IDLE_SECONDS", 1800, low=60, high=86_400)
SVC_SESSION_MAX_SECONDS = _number("SVC_SESSION_MAX_SECONDS", 43_200, low=300, high=30 * 86_400)
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
SECURE_SSL_REDIRECT = _flag("SVC_SSL_REDIRECT", default=not DEBUG)
# Load balancers probe, and Prometheus scrapes each node (both pools), over plain HTTP on
# the private network; /metrics keeps its own rule (SVC_METRICS_ALLOWLIST or the key).
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SESSION_COOKIE_SECURE = _flag("SVC_SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = _number(
    "SVC_HSTS_SECONDS", 0 if DEBUG else 31_536_000, low=0, high=10 * 31_536_000
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _flag("SVC_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = _flag("SVC_HSTS_PRELOAD", default=False)
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
