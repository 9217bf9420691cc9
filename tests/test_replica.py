"""Reads from a real streaming replica (config.replica; docs/deployment.md): a primary
and its replica of the test's own (tests/pgcluster.py) behind a real gunicorn.

Lag is made on demand, never waited for: the replica's replay is paused
(``pg_wal_replay_pause()``) while the primary takes a write, and the server's clock
(``SVC_TEST_CLOCK_FILE``) is put an hour behind (the replica's lag reads 0: within the
bound) or an hour ahead (an hour: beyond it). The router checks the lag at every
request here (``SVC_REPLICA_CHECK_SECONDS=0``). Which database answered is read from the
answer itself: while replay is paused, the replica does not hold the primary's write.
PostgreSQL only: the copy of the migrated test database is a PostgreSQL dump.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from billing.vat import vat_rates_seed
from config import clock
from licensing.services import catalogue_seed
from tests.conftest import start_gunicorn, stop_gunicorn, tool_missing
from tests.conftest import test_database_url as shared_database_url
from tests.pgcluster import Pair, ToolsMissing

# The test database is only copied (at the module's start): the tests write to the
# pair's primary, through the server, so nothing of theirs is there to flush.
pytestmark = [pytest.mark.live, pytest.mark.django_db]
_CUSTOMERS = itertools.count(1)
MAX_LAG = 5  # SVC_REPLICA_MAX_LAG_SECONDS of the server under test
HOUR = 3600.0


@pytest.fixture(scope="module")
def replicated(django_db_setup, django_db_blocker, signing_key_file, tmp_path_factory):
    """(pair, live server, clock file): gunicorn on the primary with the replica."""
    with django_db_blocker.unblock():
        if connection.vendor != "postgresql":
            pytest.skip("a PostgreSQL streaming replica; this run is on SQLite")
        catalogue_seed()  # the copy's catalogue and VAT rates, as every test's
        vat_rates_seed()
        source = shared_database_url()
    logs = tmp_path_factory.mktemp("replica")
    try:
        pair = Pair()
    except ToolsMissing as missing:
        tool_missing(str(missing))
    live = None
    started = time.monotonic()
    try:
        pair.start(source)
        print(f"\nprimary and replica up in {time.monotonic() - started:.1f} s")
        clock_file = logs / "server-clock"
        clock.shift_to(clock_file, 0)
        live = start_gunicorn(
            logs,
            DATABASE_URL=pair.primary.url,
            SVC_DATABASE_REPLICA_URL=pair.replica.url,
            SVC_REPLICA_MAX_LAG_SECONDS=str(MAX_LAG),
            SVC_REPLICA_CHECK_SECONDS="0",
            SVC_TEST_CLOCK_FILE=str(clock_file),
            SVC_DB_CONN_MAX_AGE="60",  # production's: held connections to both
            SVC_LIST_HEAD_SECONDS="0",
        )
        print(f"server up in {time.monotonic() - started:.1f} s")
        yield pair, live, clock_file
    finally:
        started = time.monotonic()
        if live is not None:
            stop_gunicorn(live)
        print(f"\nserver stopped in {time.monotonic() - started:.1f} s")
        pair.stop()
        print(f"pair stopped in {time.monotonic() - started:.1f} s")


def _get(live, path: str, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"{live.url}{path}", headers={"X-Admin-Key": live.admin_key, **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as answer:
        return answer.code, answer.read()


def _post(live, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{live.url}{path}",
        method="POST",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def _fleet_count(live, batch_id: str) -> int:
    status, body = _get(live, f"/v1/admin/fleet?batch_id={batch_id}")
    assert status == 200, body[:300]
    return json.loads(body)["count"]


def _metric(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} (\S+)$"
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else 0.0


def _scrape(live) -> str:
    status, body = _get(live, "/metrics")
    assert status == 200
    return body.decode()


def _admin(live, path: str, body: dict) -> dict:
    try:
        return live.admin("POST", path, body)
    except urllib.error.HTTPError as answer:
        raise AssertionError(f"{path}: {answer.code} {answer.read()[:300]!r}") from None


def _batch(live, units: int = 50) -> dict:
    name = f"Replica Test {next(_CUSTOMERS)} GmbH"
    customer = _admin(
        live,
        "/v1/admin/customers",
        {"name": name, "kind": "oem", "contact": "ops@replica.example"},
    )
    return _admin(
        live,
        "/v1/admin/batches",
        {
            "customer_id": customer["customer_id"],
            "sku": "VISION-PRO",
            "units": units,
            "term_days": 30,
        },
    )


def _activate(live, batch: dict, device_id: str) -> dict:
    return _post(
        live, "/v1/activate", {"batch_token": batch["batch_token"], "device_id": device_id}
    )


def test_reads_go_to_the_replica_within_the_lag_bound_and_to_the_primary_beyond(replicated):
    pair, live, clock_file = replicated
    batch = _batch(live)
    _activate(live, batch, "cam-replica-1")
    pair.await_replayed()
    before = _scrape(live)
    assert _fleet_count(live, batch["batch_id"]) == 1

    pair.replica.value("SELECT pg_wal_replay_pause()")
    try:
        _activate(live, batch, "cam-replica-2")  # on the primary; the replica holds it back
        pair.await_replayed(what="receive")  # received, not replayed: the lag shows
        clock.shift_to(clock_file, -HOUR)  # the replica's lag reads 0: within the bound
        assert _fleet_count(live, batch["batch_id"]) == 1  # the replica's answer
        clock.shift_to(clock_file, HOUR)  # an hour's lag: beyond the bound
        assert _fleet_count(live, batch["batch_id"]) == 2  # the primary's
        lagging = _scrape(live)
    finally:
        clock.shift_to(clock_file, 0)
        pair.replica.value("SELECT pg_wal_replay_resume()")
    pair.await_replayed()
    assert _fleet_count(live, batch["batch_id"]) == 2  # caught up: the replica again
    after = _scrape(live)

    lag = _metric(lagging, "svc_replica_lag_seconds")
    print(f"\nreplica lag exported while paused, the clock an hour ahead: {lag:.1f} s")
    assert HOUR - 120 < lag < HOUR + 120
    assert _metric(lagging, "svc_replica_up") == 1
    assert _metric(lagging, "svc_replica_max_lag_seconds") == MAX_LAG
    assert _metric(after, "svc_replica_lag_seconds") < MAX_LAG
    fallbacks = 'svc_replica_fallbacks_total{reason="lag"}'
    assert _metric(after, fallbacks) - _metric(before, fallbacks) == 1
    reads = "svc_replica_reads_total"
    assert (
        _metric(after, reads, 'database="replica"') - _metric(before, reads, 'database="replica"')
        == 3
    )
    assert (
        _metric(after, reads, 'database="primary"') - _metric(before, reads, 'database="primary"')
        == 1
    )


def test_a_refresh_that_writes_is_answered_from_the_primary(replicated):
    """Read-your-writes: the licence refresh reads the replica, finds the renewed batch
    and re-signs the unit, a write; the request is then done on the primary, which
    answers the token it stored. The refresh with that token then reads the replica and
    answers 304."""
    pair, live, _ = replicated
    batch = _batch(live)
    unit = _activate(live, batch, "cam-renewed")
    _admin(
        live,
        "/v1/admin/renew",
        {"batch_id": batch["batch_id"], "idempotency_key": "replica-renewal"},
    )
    pair.await_replayed()
    before = _scrape(live)

    bearer = {"Authorization": f"Bearer {unit['unit_token']}"}
    status, body = _get(live, "/v1/license?device_id=cam-renewed", bearer)
    assert status == 200, body[:300]
    renewed = json.loads(body)["token"]
    assert renewed != unit["unit_token"]
    stored = pair.primary.value(
        "SELECT token FROM licensing_license WHERE id = %s", (unit["license_id"],)
    )
    assert renewed == stored

    pair.await_replayed()
    status, _ = _get(
        live, "/v1/license?device_id=cam-renewed", {"Authorization": f"Bearer {renewed}"}
    )
    assert status == 304
    after = _scrape(live)
    fallbacks = 'svc_replica_fallbacks_total{reason="wrote"}'
    assert _metric(after, fallbacks) - _metric(before, fallbacks) == 1
    reads = 'svc_replica_reads_total{database="replica"}'
    assert _metric(after, reads) - _metric(before, reads) == 1


CLIENTS = 4
ROUNDS_AFTER_KILL = 60  # answers per client after the kill


def test_a_replica_killed_mid_load_costs_no_answer(replicated):
    """Clients read the fleet (admin API) and the revocation list's status of a unit
    (device API) in a loop; the replica's postmaster is killed with SIGKILL under them.
    Every answer is a 200 with the right content: reads caught by the kill are done
    again on the primary, later ones go there while the replica is down."""
    pair, live, _ = replicated
    batch = _batch(live)
    unit = _activate(live, batch, "cam-under-load")
    pair.await_replayed()
    status_path = f"/v1/revocations/status?license_id={unit['license_id']}&device_id=cam-under-load"
    answers: list[tuple[str, int, bytes]] = []
    lock = threading.Lock()
    killed = threading.Event()
    enough = threading.Event()

    def client(n: int) -> None:
        after_kill = 0
        while after_kill < ROUNDS_AFTER_KILL:
            for path in (f"/v1/admin/fleet?batch_id={batch['batch_id']}", status_path):
                code, body = _get(live, path)
                with lock:
                    answers.append((path, code, body))
                    if len(answers) >= 40:
                        enough.set()
            if killed.is_set():
                after_kill += 1

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        running = [pool.submit(client, n) for n in range(CLIENTS)]
        assert enough.wait(60)
        pid = pair.replica.postmaster_pid()
        os.kill(pid, signal.SIGKILL)
        killed.set()
        for future in running:
            future.result()

    codes = Counter(code for _, code, _ in answers)
    metrics = _scrape(live)
    failed, down = (
        _metric(metrics, "svc_replica_fallbacks_total", f'reason="{reason}"')
        for reason in ("failed", "down")
    )
    up = _metric(metrics, "svc_replica_up")
    print(
        f"\nreplica killed mid-load: {len(answers)} answers {dict(codes)}; fallbacks "
        f"failed={failed:.0f} down={down:.0f}; replica up: {up}"
    )
    assert set(codes) == {200}, [(p, c, b[:200]) for p, c, b in answers if c != 200][:5]
    for path, _, body in answers:
        document = json.loads(body)
        if path.startswith("/v1/admin/fleet"):
            assert document["count"] == 1
        else:
            assert document["revoked"] is False
    assert _metric(metrics, "svc_replica_up") == 0
    assert down > 0
