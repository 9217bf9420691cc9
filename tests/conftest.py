"""Fixtures shared by every test: a temporary signing key for the session, API clients,
the seeded catalogue, and a real gunicorn server on the test database."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from rest_framework.test import APIClient

from billing.vat import vat_rates_seed
from config import clock
from licensing import revocations
from licensing.services import batch_issue, catalogue_seed, seen
from svccore.keyfile import write_private_key
from tests.factories import CustomerFactory
from tests.history import SWITCH


def _flush_as_a_declared_wipe() -> None:
    """Billing's tables refuse TRUNCATE on PostgreSQL (billing migration 0009) unless the
    transaction declares a deliberate wipe: a test database's flush between tests is
    one, so it says so first (in the flush's own transaction)."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    flush = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, **kwargs):
        statements = flush(self, style, tables, **kwargs)
        return [SWITCH % "'on'", *statements] if statements else statements

    DatabaseOperations.sql_flush = sql_flush


_flush_as_a_declared_wipe()


def _static_files_found_once() -> None:
    """Each test client builds the middleware anew, and WhiteNoise's finds and stats
    every static file (~500) each time: a tenth of the quick tests' time. A test process
    finds them once and hands each new middleware the same files (a server process
    builds its middleware once anyway)."""
    from whitenoise.middleware import WhiteNoiseMiddleware

    def found_once(method):
        found: dict[tuple, dict] = {}

        def adding(self, *args, **kwargs):
            key = (self.static_prefix, self.use_finders, *args, *sorted(kwargs.items()))
            if key not in found:
                before = set(self.files)
                method(self, *args, **kwargs)
                found[key] = {url: self.files[url] for url in self.files.keys() - before}
            self.files.update(found[key])

        return adding

    WhiteNoiseMiddleware.add_files = found_once(WhiteNoiseMiddleware.add_files)
    WhiteNoiseMiddleware.add_files_from_finders = found_once(
        WhiteNoiseMiddleware.add_files_from_finders
    )


_static_files_found_once()

REPO = Path(__file__).resolve().parent.parent


# What a test that touches the database requests, directly or through its fixtures.
DATABASE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_setup",
        "live_server",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
    }
)


def uses_database(item: pytest.Item) -> bool:
    return (
        item.get_closest_marker("django_db") is not None
        or item.get_closest_marker("every_database") is not None
        or bool(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))
    )


# Minutes of the suite, marked ``slow`` here (``make test-fast`` runs the rest): real
# servers (gunicorn, nginx, Redis, SoftHSM2, Chromium), fuzzing and scale, the README.
SLOW_MODULES = frozenset(
    {
        "tests/test_fuzz_api.py",
        "tests/test_replica.py",
        "tests/test_device_fuzz.py",
        "tests/test_payments_browser.py",
        "tests/test_revocation_scale.py",
        "tests/test_readme.py",
        "tests/test_leases_end_to_end.py",
        "tests/test_addons_end_to_end.py",
        "tests/test_identity_end_to_end.py",
        "tests/test_offline_end_to_end.py",
        "tests/portal/test_portal_offline_browser.py",
        "tests/test_trials_end_to_end.py",
        "tests/operators/test_browser_holds.py",
        "tests/operators/test_browser_addons.py",
        "tests/operators/test_browser_identity.py",
        "tests/test_key_rotation.py",
        "tests/test_sync_crash.py",
        "tests/test_cache_outage.py",
        "tests/test_edge.py",
        "tests/test_edge_status_cache.py",
        "tests/test_hsm_signer.py",
        "tests/test_tampering_proxy.py",
        "tests/test_end_to_end.py",
        "tests/test_database_connection.py",
        "tests/operators/test_browser.py",
        "tests/operators/test_console_layout.py",
        "tests/billing/test_rating_oracle.py",
        "tests/billing/test_addon_oracle.py",
        "tests/billing/test_trial_oracle.py",
        "tests/billing/test_document_pages.py",
        "tests/devices/test_device_crash.py",
        "tests/test_browser_walk.py",
    }
)
SERVER_FIXTURES = frozenset({"live_service", "live_server", "private_redis"})
# The slow modules that take longest (CI's durations, 2026-11-28: the API fuzz 236 s on
# PostgreSQL, now two tests over halves of the operations; the browser walk 66 s, the
# commit-order test 48 s, ...), run first, so that the other workers share the rest
# meanwhile (dealt to the workers in turn: _Lanes).
LONGEST_FIRST = (
    "tests/test_fuzz_api.py",
    "tests/test_browser_walk.py",
    "tests/events/test_commit_order.py",
    "tests/billing/test_rating_oracle.py",
    "tests/test_revocation_scale.py",
    "tests/test_readme.py",
    "tests/operators/test_lockout.py",
    "tests/test_device_fuzz.py",
    "tests/test_key_rotation.py",
    "tests/operators/test_console_layout.py",
)
# Slow tests that prove what cannot differ by database run in the SQLite pass only: the
# browser (what a page shows; the views' queries run on PostgreSQL in the fast tests),
# svcctl (its HTTP client and output), the device module under attack, kill -9 and a
# vendored key rotation (the camera's files and checks), the HSM signer (PKCS#11). The
# PostgreSQL pass keeps every slow test of concurrency, ingestion, billing and the edge.
ONE_DATABASE_MODULES = frozenset(
    {
        "tests/operators/test_browser.py",
        "tests/operators/test_browser_flows.py",
        "tests/operators/test_browser_holds.py",
        "tests/operators/test_browser_addons.py",
        "tests/operators/test_browser_identity.py",
        "tests/operators/test_console_layout.py",
        "tests/operators/test_enrolment_attacks.py",
        "tests/operators/test_second_factor.py",
        "tests/portal/test_portal_browser.py",
        "tests/portal/test_portal_offline_browser.py",
        "tests/test_browser_walk.py",
        "tests/operators/test_svcctl.py",
        "tests/operators/test_svcctl_fleet.py",
        "tests/operators/test_svcctl_keys.py",
        "tests/operators/test_svcctl_renew.py",
        "tests/operators/test_svcctl_trials.py",
        "tests/test_tampering_proxy.py",
        "tests/test_sync_crash.py",
        "tests/test_device_fuzz.py",
        "tests/test_key_rotation.py",
        "tests/test_hsm_signer.py",
    }
)


# Modules that CI runs on both databases though they are no browser: the journeys of the
# embedded default (`make run` serves SQLite), a camera's first boot to its invoice and
# the README's commands.
BOTH_DATABASES_MODULES = frozenset(
    {
        "tests/test_end_to_end.py",
        "tests/test_readme.py",
    }
)
# The tests of the code that takes a path of its own on SQLite (a branch on
# connection.vendor, or SQL that differs): activation's rows one by one
# (config.rows), writers queueing on SQLite's lock, the activation rollups' triggers,
# usage ingestion's portable store, the event log's, the rate counters', exact counts
# and collation in the console and the fleet's paging, the snapshot rating reads in,
# the partitions SQLite does without, the statements each hot path runs. CI's SQLite
# pass keeps them (SVC_TEST_POSTGRESQL_FOLLOWS).
SQLITE_PATHS = (
    "tests/licensing/test_activation.py",
    "tests/licensing/test_concurrency.py",
    "tests/licensing/test_fleet_paging.py",
    "tests/licensing/test_last_seen.py",
    "tests/billing/test_activation_rollups.py",
    "tests/billing/test_usage_api.py",
    "tests/billing/test_usage_identity.py",
    "tests/billing/test_usage_identity_migration.py",
    "tests/billing/test_rating.py",
    "tests/billing/test_reconcile.py",
    "tests/billing/test_partitions.py",
    "tests/events/test_event_log.py",
    "tests/ratelimits/",
    "tests/operators/test_console_search.py",
    "tests/operators/test_admin_scale.py",
    "tests/test_query_counts.py",
)


def is_slow(item: pytest.Item) -> bool:
    module = item.nodeid.split("::", 1)[0]
    return (
        module in SLOW_MODULES
        or item.get_closest_marker("live") is not None
        or bool(SERVER_FIXTURES & set(getattr(item, "fixturenames", ())))
    )


def _run_order(item: pytest.Item) -> tuple[bool, int]:
    """The slow tests first, the longest of them (:data:`LONGEST_FIRST`) before the rest."""
    module = item.nodeid.split("::", 1)[0]
    rank = LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)
    return item.get_closest_marker("slow") is None, rank


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in :data:`SLOW_MODULES` or on a real server is marked ``slow``.

    ``SVC_TEST_POSTGRESQL_FOLLOWS=1`` (CI, whose ``make test-pg`` follows ``make test``):
    the SQLite pass leaves the database tests to the PostgreSQL pass, production's
    database, but the browser's, the embedded default's journeys and the tests of its
    own paths (:func:`_left_to_postgresql`), so that each runs once.

    ``SVC_TEST_DATABASE_ONLY=1`` (``make test-pg``, after ``make test`` in CI): only the
    tests that touch the database run, but the slow ones of :data:`ONE_DATABASE_MODULES`.
    The rest (the device module, svcctl offline, the README against its own SQLite
    ``make run``) cannot behave differently on another database, and the SQLite run has
    just run them.

    The slow tests run first, the longest of them first: on several workers
    (``--dist worksteal``), a worker that is done steals the short ones from the end of
    another's queue, so that no core idles while the last long test runs."""
    for item in items:
        if is_slow(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=_run_order)  # stable: within a rank, as collected
    if os.environ.get("SVC_TEST_POSTGRESQL_FOLLOWS") == "1" and connection.vendor == "sqlite":
        _deselect(config, items, lambda item: not _left_to_postgresql(item))
    if os.environ.get("SVC_TEST_DATABASE_ONLY") != "1":
        return
    _deselect(config, items, _runs_on_postgresql)


def _runs_on_postgresql(item: pytest.Item) -> bool:
    """A test that ``make test-pg`` runs: it touches the database, and it is not one of
    the slow ones of :data:`ONE_DATABASE_MODULES` (the browser's, svcctl's...)."""
    module = item.nodeid.split("::", 1)[0]
    return uses_database(item) and not (is_slow(item) and module in ONE_DATABASE_MODULES)


def _left_to_postgresql(item: pytest.Item) -> bool:
    """A test of the PostgreSQL pass (:func:`_runs_on_postgresql`) that the SQLite pass
    therefore leaves to it under ``SVC_TEST_POSTGRESQL_FOLLOWS``, but the embedded
    default's journeys (:data:`BOTH_DATABASES_MODULES`) and the tests of its own paths
    (:data:`SQLITE_PATHS`)."""
    module = item.nodeid.split("::", 1)[0]
    return (
        _runs_on_postgresql(item)
        and module not in BOTH_DATABASES_MODULES
        and not module.startswith(SQLITE_PATHS)
    )


def _deselect(config: pytest.Config, items: list[pytest.Item], wanted) -> None:
    keep = [item for item in items if wanted(item)]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not wanted(item)])
        items[:] = keep


class _Lanes:
    """Deals the ordered tests round-robin to the workers of a ``--dist worksteal`` run.

    worksteal hands each worker a contiguous share of the list, so the longest tests,
    first in the order, would all start on one worker; dealt (the first to worker 0, the
    second to worker 1, ...) each worker starts with its own longest. The two halves of
    the API fuzz run side by side this way. Runs after ``-m`` has deselected."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]):
        workers = getattr(config, "workerinput", {}).get("workercount", 1)
        if workers < 2 or config.getoption("dist", "no") != "worksteal":
            return
        items[:] = [item for lane in range(workers) for item in items[lane::workers]]


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Lanes(), "svc-lanes")


@pytest.fixture(autouse=True)
def _rate_log_purge_pinned(monkeypatch):
    """The database rate limiter purges expired logs on a random one call in 200: a test
    that counts queries would count that DELETE by chance. Pinned to never here;
    tests/ratelimits/test_counters.py sets it to every call where it tests the purge."""
    from ratelimits import counters

    monkeypatch.setattr(counters, "PURGE_ONE_IN", 0)


@pytest.fixture
def caches_held(settings, monkeypatch):
    """What a process holds for a while (the revocation list's head for
    SVC_LIST_HEAD_SECONDS, the signing keys for keyring.REFRESH_SECONDS, a passed database
    check of /healthz for health.DB_CHECK_REUSE_SECONDS) is held for the whole test,
    whatever the time a busy core takes between a warm-up and a counted request: a count
    is that of a request inside that time, as in production. A test that means the time
    to have passed says so (sets the setting to 0)."""
    from licensing import health
    from signing import keyring

    settings.SVC_LIST_HEAD_SECONDS = 60
    monkeypatch.setattr(keyring, "REFRESH_SECONDS", 3600.0)
    monkeypatch.setattr(health, "DB_CHECK_REUSE_SECONDS", 3600.0)


@pytest.fixture(autouse=True)
def _counted_queries_hold_caches(request):
    """A test that counts a request's queries (``django_assert_num_queries``, ``..._max_``)
    counts them with the process's caches held (:func:`caches_held`): on a busy core, five
    seconds between a warm-up and the counted request re-read the signing keys inside
    the count (CI, 2026-12-07: a re-activation counted 2 queries on PostgreSQL)."""
    if {"django_assert_num_queries", "django_assert_max_num_queries"} & set(request.fixturenames):
        request.getfixturevalue("caches_held")


@pytest.fixture(scope="session", autouse=True)
def signing_key_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "signing-key.pem"
    write_private_key(path)
    settings.SVC_SIGNING_KEY_FILE = path
    return path


@pytest.fixture(scope="session")
def signing_key(signing_key_file):
    from signing.keyring import signing_key as load

    return load()


@pytest.fixture(autouse=True)
def _isolation(request, settings):
    """Loopback is a provisioning line (no activation throttle) unless a test says
    otherwise; the cache (throttle counters) starts empty; and any test that touches the
    database sees the seeded catalogue, even after a transactional test flushed it."""
    settings.SVC_ACTIVATION_ALLOWLIST = ["127.0.0.0/8", "::1/128"]
    if not is_slow(request.node):
        # A quick test hashes a password in one step, as Django's testing guide advises:
        # production's PBKDF2 (0.2 s a hash) was half the time of the console's tests.
        # The slow tests (a real server, production settings) hash as production does.
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    revocations.answers_forget()  # the shared cache too
    seen.forget()  # no unit remembered as recently seen by this process
    marker = request.node.get_closest_marker("django_db")
    names = set(request.fixturenames)
    if marker is not None or names & {"db", "transactional_db"}:
        transactional = "transactional_db" in names or (
            marker is not None and marker.kwargs.get("transaction")
        )
        request.getfixturevalue("transactional_db" if transactional else "db")
        catalogue_seed()
        vat_rates_seed()


@pytest.fixture
def admin_api() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=settings.SVC_ADMIN_KEY)
    return client


@pytest.fixture
def device_api() -> APIClient:
    return APIClient()


@pytest.fixture
def customer(db):
    return CustomerFactory()


@pytest.fixture
def make_batch(customer):
    def make(units: int = 10, sku: str = "VISION-PRO", term_days: int | None = None, owner=None):
        return batch_issue(
            customer_id=(owner or customer).id, sku=sku, units=units, term_days=term_days
        )

    return make


@pytest.fixture
def server_clock(settings, tmp_path):
    """Move the server's clock (``config.clock``): ``server_clock(seconds)`` sets its
    offset from the real time; ``with server_clock.at(moment):`` stops it at ``moment``
    for what the block does (an activation ten days ago, an invoice last month) and puts
    it back; ``server_clock.path`` is the file a live server is given as
    ``SVC_TEST_CLOCK_FILE`` to follow the same clock."""
    path = tmp_path / "server-clock"
    settings.SVC_TEST_CLOCK_FILE = str(path)

    def move(seconds: float) -> None:
        clock.shift_to(path, seconds)

    @contextlib.contextmanager
    def at(moment: dt.datetime):
        before = path.read_text()
        clock.stop_at(path, moment)
        try:
            yield
        finally:
            path.write_text(before)

    move.path = path
    move.at = at
    move(0)
    return move


# --- a real server ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    """DATABASE_URL of the database the tests run on, for a server process to share."""
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


@dataclass
class LiveService:
    url: str
    admin_key: str
    process: subprocess.Popen
    log: Path | None = None
    killed: bool = False  # a test killed it on purpose: its end is not a failure

    def admin(self, method: str, path: str, body: dict | None = None) -> dict:
        """One admin API call with the operator key; the parsed JSON answer."""
        request = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"X-Admin-Key": self.admin_key, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)


def start_gunicorn(
    log_dir: Path,
    *,
    healthy: bool = True,
    app: str = "config.wsgi",
    preload: bool = True,
    **environment: str,
) -> LiveService:
    """gunicorn (3 workers x 4 threads) serving ``app`` (the full application, or
    ``config.device_wsgi``) on the test database, with ``environment`` on top of the
    test settings; stop it with :func:`stop_gunicorn`. It is up once /healthz answers 200
    (or, with ``healthy=False``, 503). ``preload``: the master imports the application
    once and forks it (tests/gunicorn_test.conf.py); off, each worker imports it, as
    production's nodes do."""
    port = _free_port()
    log = log_dir / f"server-{port}.log"
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "SVC_SIGNING_KEY_FILE": str(settings.SVC_SIGNING_KEY_FILE),
        "SVC_ADMIN_KEY": settings.SVC_ADMIN_KEY,
        "SVC_SECRET_KEY": settings.SECRET_KEY,
        "SVC_DEBUG": "0",
        "SVC_ACTIVATION_ALLOWLIST": "127.0.0.0/8",
        "SVC_DB_CONN_MAX_AGE": "0",
        # Plain HTTP on loopback, as `make run` serves.
        "SVC_SSL_REDIRECT": "0",
        "SVC_SECURE_COOKIES": "0",
        "SVC_LOG_LEVEL": "WARNING",
        # Each server's workers meet in their own metrics directory (multiprocess mode).
        "SVC_METRICS_DIR": str(log_dir / f"metrics-{port}"),
        **environment,
    }
    command = [
        sys.executable, "-m", "gunicorn", app,
        *(["--config", str(REPO / "tests" / "gunicorn_test.conf.py")] if preload else []),
        "--bind", f"127.0.0.1:{port}",
        "--workers", "3", "--threads", "4", "--worker-class", "gthread",
        "--timeout", "60", "--graceful-timeout", "5",
    ]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                if response.status == 200:
                    break
        except urllib.error.HTTPError as answer:
            if answer.code == 503 and not healthy:
                break  # serving, and failing its health check as the test wants
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"gunicorn did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return LiveService(url=url, admin_key=env["SVC_ADMIN_KEY"], process=process, log=log)


def stop_gunicorn(service: LiveService) -> None:
    """Stop the server; one that had already exited fails the teardown with the end of
    its log (a server dying under a test shows why, not only "connection refused")."""
    code = service.process.poll()
    if code is not None and service.log is not None and not service.killed:
        pytest.fail(
            f"gunicorn at {service.url} exited by itself (code {code}) before the end:\n"
            f"{service.log.read_text(errors='replace')[-3000:]}"
        )
    service.process.terminate()
    try:
        service.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        service.process.kill()


@pytest.fixture(scope="session")
def live_service(django_db_setup, django_db_blocker, signing_key_file, tmp_path_factory):
    """gunicorn (3 workers x 4 threads) serving the test database. Tests that use it
    must commit their data: request ``transactional_db``."""
    service = start_gunicorn(tmp_path_factory.mktemp("gunicorn"))
    try:
        yield service
    finally:
        stop_gunicorn(service)


@pytest.fixture
def moved_service(server_clock, transactional_db, tmp_path):
    """A gunicorn of the test's own whose clock follows ``server_clock``'s file: a test
    moves the service's clock with its cameras' (usage must lie within its licence's
    life by the service's clock)."""
    logs = tmp_path / "gunicorn"
    logs.mkdir()
    live = start_gunicorn(logs, SVC_TEST_CLOCK_FILE=str(server_clock.path))
    try:
        yield live
    finally:
        stop_gunicorn(live)


# --- a private Redis ------------------------------------------------------------------


@dataclass
class PrivateRedis:
    """A redis-server of the test's own on a free port (never the machine's shared one),
    which the test may stop and start again: on the same port, empty, as after a crash."""

    directory: Path
    port: int
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        command = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(self.directory),
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail("redis-server did not start")
                time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


def tool_missing(reason: str) -> None:
    """A tool a test needs is not on this machine: the test is skipped on a developer's
    machine, and fails in CI (``CI`` set), where ``.ci/run`` installs every one of them,
    so that a test never passes there by not running."""
    if os.environ.get("CI"):
        pytest.fail(f"cannot run in CI: {reason}")
    pytest.skip(reason)


def start_private_redis(directory: Path) -> PrivateRedis:
    """A running :class:`PrivateRedis` (without redis-server, see :func:`tool_missing`);
    stop it with its ``stop()``."""
    if shutil.which("redis-server") is None:
        tool_missing("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    redis = PrivateRedis(directory=directory, port=_free_port())
    redis.start()
    return redis


@pytest.fixture(scope="session")
def private_redis(tmp_path_factory):
    """A private Redis for the session. Tests that use it must not rely on its being
    empty: they use their own keys, or flush it."""
    redis = start_private_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield redis
    finally:
        redis.stop()
