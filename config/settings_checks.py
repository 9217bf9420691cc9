"""How :mod:`config.settings` reads the environment: each kind of value (a flag, a
number in a range, networks, a database URL, root keys, a policy) parsed and checked,
so a bad value stops start-up naming its variable, never a request. No settings live
here; ``DJANGO_SETTINGS_MODULE`` stays ``config.settings``.
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

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def read_env_file() -> None:
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


FLAG_WORDS = {
    **dict.fromkeys(("1", "true", "yes", "on"), True),
    **dict.fromkeys(("0", "false", "no", "off"), False),
}


def flag(name: str, default: bool) -> bool:
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


def number(name: str, default: float, *, low: float, high: float, whole: bool = True):
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


def prepare_threshold(pooled: bool) -> int | None:
    value = env.str("SVC_DB_PREPARE_THRESHOLD", default="off" if pooled else "5").strip().lower()
    if value == "off":
        return None
    if not value.isdigit():
        raise ImproperlyConfigured(
            f"SVC_DB_PREPARE_THRESHOLD must be a whole number of runs or 'off', not {value!r}"
        )
    return int(value)


def database(url: str) -> dict:
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
        db.setdefault("CONN_MAX_AGE", number("SVC_DB_CONN_MAX_AGE", 60, low=0, high=86_400))
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
        pooled = flag("SVC_DB_TRANSACTION_POOLING", False)
        db["DISABLE_SERVER_SIDE_CURSORS"] = pooled
        db.setdefault("OPTIONS", {}).update(
            server_side_binding=True, prepare_threshold=prepare_threshold(pooled)
        )
    return db


def replica_database(url: str, *, primary: dict) -> dict:
    """``SVC_DATABASE_REPLICA_URL``: a PostgreSQL streaming replica of ``DATABASE_URL``'s
    database, connected as the primary is (pooling, prepared statements), through
    :mod:`config.db.replica` (which reports its failures to the router), read-only, and
    given up on after 3 s of trying to connect. In tests it is the primary (a mirror)."""
    if primary["ENGINE"] != "config.db.postgresql":
        raise ImproperlyConfigured(
            "SVC_DATABASE_REPLICA_URL is set, but DATABASE_URL is not PostgreSQL: a replica "
            "is a PostgreSQL streaming replica of the primary"
        )
    try:
        db = database(url)
    except Exception as exc:  # noqa: BLE001 - django-environ's own messages name no variable
        raise ImproperlyConfigured(
            f"SVC_DATABASE_REPLICA_URL is not a database URL: {exc}"
        ) from None
    if db["ENGINE"] != "config.db.postgresql":
        raise ImproperlyConfigured(
            "SVC_DATABASE_REPLICA_URL must be a postgres:// URL (a streaming replica of "
            "DATABASE_URL's database)"
        )
    db["ENGINE"] = "config.db.replica"
    options = db["OPTIONS"]
    options.setdefault("connect_timeout", 3)
    read_only = "-c default_transaction_read_only=on"
    options["options"] = (
        f"{options['options']} {read_only}" if options.get("options") else read_only
    )
    db["TEST"] = {"MIRROR": "default"}
    return db


def seat_release_policy(value: str) -> tuple[float, int]:
    """``<percent>%/<days>d``: a batch may release that share of its purchased units (at
    least one) per rolling window of that many days."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)%/(\d+)d\s*", value)
    if not match or not 0 < float(match[1]) <= 100 or not 1 <= int(match[2]) <= 3660:
        raise ImproperlyConfigured(
            f"SVC_SEAT_RELEASE_POLICY must look like 5%/30d (a share of a batch's units, "
            f"0-100 %, per window of 1-3660 days), not {value!r}"
        )
    return float(match[1]), int(match[2])


def cidrs(name: str) -> list[str]:
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


def root_keys(value: str) -> list[str]:
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


def style_hash(template: Path) -> str:
    text = template.read_text(encoding="utf-8")
    body = text[text.index("<style>") + len("<style>") : text.index("</style>")]
    digest = hashlib.sha256(body.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


def test_clock_file(value: str, *, database_name: object) -> str:
    """``SVC_TEST_CLOCK_FILE`` (config.clock), refused unless the database is a test one
    (Django's test_ prefix, or the SQLite test file :func:`database` names)."""
    if value and not Path(str(database_name)).name.startswith(("test_", "svc-test-")):
        raise ImproperlyConfigured(
            "SVC_TEST_CLOCK_FILE moves the server's clock and is for tests only: it is refused "
            "unless the database is a test database (name starting test_); unset it"
        )
    return value


def signer_checked(
    signer: str,
    *,
    module: str,
    token_label: str,
    key_label: str,
    pin_file: str,
    timeout: float,
    sessions: int,
) -> str:
    """``SVC_SIGNER`` and, for ``pkcs11``, everything the token needs; returns
    ``SVC_PKCS11_PIN_FILE`` made absolute (relative to the project directory)."""
    if signer not in ("file", "pkcs11"):
        raise ImproperlyConfigured(f"SVC_SIGNER must be file or pkcs11, not {signer!r}")
    if signer != "pkcs11":
        return pin_file
    if not module or not Path(module).is_file():
        raise ImproperlyConfigured(
            f"SVC_PKCS11_MODULE must name the token's PKCS#11 module (a .so file), not {module!r}"
        )
    if not token_label or not key_label:
        raise ImproperlyConfigured(
            "SVC_SIGNER=pkcs11 needs SVC_PKCS11_TOKEN_LABEL and SVC_PKCS11_KEY_LABEL"
        )
    if bool(pin_file) == bool(os.environ.get("SVC_PKCS11_PIN")):
        raise ImproperlyConfigured(
            "SVC_SIGNER=pkcs11 needs the token's user PIN from exactly one of "
            "SVC_PKCS11_PIN_FILE (a mode 600 file) or SVC_PKCS11_PIN"
        )
    if pin_file and not Path(pin_file).is_absolute():
        pin_file = str(BASE_DIR / pin_file)
    if not 0 < timeout <= 60 or not 1 <= sessions <= 64:
        raise ImproperlyConfigured(
            "SVC_PKCS11_TIMEOUT must be 0-60 seconds and SVC_PKCS11_SESSIONS 1-64, not "
            f"{timeout} and {sessions}"
        )
    return pin_file


def path(value: str) -> Path:
    """A file setting: relative paths are relative to the project directory."""
    found = Path(value)
    return found if found.is_absolute() else BASE_DIR / found


def reminder_days(name: str, default: str) -> tuple[int, ...]:
    """``name``: days past due of the payment reminders, first to final, comma-separated
    and increasing (``7,21,35``), at most three; ``off`` (or empty): no reminders."""
    text = env.str(name, default=default).strip().lower()
    if text in ("", "off", "0"):
        return ()
    try:
        days = tuple(int(part) for part in text.split(","))
    except ValueError:
        days = ()
    if (
        not 1 <= len(days) <= 3
        or any(not 1 <= day <= 3660 for day in days)
        or list(days) != sorted(set(days))
    ):
        raise ImproperlyConfigured(
            f"{name} must be up to three increasing whole numbers of days past due from 1 to "
            f"3660 (first, second, final reminder; e.g. 7,21,35), or off, not {text!r}"
        )
    return days


def email_addresses(name: str) -> list[str]:
    """``name``: comma-separated e-mail addresses; one that is not stops start-up."""
    addresses = [a.strip() for a in os.environ.get(name, "").split(",") if a.strip()]
    for address in addresses:
        if not re.fullmatch(r"[^@\s,]+@[^@\s,]+\.[^@\s,]+", address):
            raise ImproperlyConfigured(f"{name} holds {address!r}, not an e-mail address")
    return addresses


def email_settings(name: str) -> dict[str, object]:
    """Django's ``EMAIL_*`` settings from the URL in ``name`` (smtp://, smtp+tls://,
    smtp+ssl://); without one, the console backend (mail written to the log)."""
    url = os.environ.get(name, "").strip()
    if not url:
        return {"EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend"}
    try:
        return environ.Env.email_url_config(url)
    except Exception as exc:  # a malformed URL names the variable, never its password
        raise ImproperlyConfigured(
            f"{name} must be smtp://user:password@host:port (or smtp+tls://, "
            f"smtp+ssl://): {type(exc).__name__}"
        ) from None
