"""Concurrent uploads of the same records through a real gunicorn server (3 processes x
4 threads) on the test database: PostgreSQL in `make test-pg`, SQLite in `make test`.
`accepted` and `duplicates` must be exact, and the rollups must match the records."""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db.models import Sum

from billing.models import UsageDaily, UsageRecord
from tests.billing.conftest import record

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

T0 = 1_767_225_600
# The cameras activate a month before their usage (a record lies within its licence's life).
ACTIVATED = dt.datetime.fromtimestamp(T0, dt.UTC) - dt.timedelta(days=30)


def _post(url: str, token: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/v1/usage",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def _race(live_service, calls: list[tuple[str, dict]]) -> list[tuple[int, dict]]:
    start = threading.Barrier(len(calls))

    def fire(call):
        start.wait(timeout=30)
        return _post(live_service.url, *call)

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(fire, calls))


def test_same_records_in_concurrent_calls_are_stored_once(live_service, make_batch, activate):
    unit = activate(make_batch(units=2), "cam-race", at=ACTIVATED)
    records = [record(T0 + i * 3600, inferences=i + 1) for i in range(300)]
    calls = []
    for n in range(12):
        mine = records[:]
        random.Random(n).shuffle(mine)  # every call sends them in another order
        calls.append((unit.token, {"device_id": "cam-race", "records": mine[: 200 + n * 8]}))
    results = _race(live_service, calls)
    assert all(status == 200 for status, _ in results), results
    assert all(body["conflicts"] == body["refused"] == [] for _, body in results)
    sent = sum(len(body["records"]) for _, body in calls)
    accepted = sum(body["accepted"] for _, body in results)
    duplicates = sum(body["duplicates"] for _, body in results)
    distinct = {(r["period_start"], r["period_end"]) for _, b in calls for r in b["records"]}
    assert accepted == len(distinct) == UsageRecord.objects.count()
    assert accepted + duplicates == sent
    totals = UsageDaily.objects.aggregate(records=Sum("records"), inferences=Sum("inferences"))
    assert totals == {
        "records": len(distinct),
        "inferences": UsageRecord.objects.aggregate(n=Sum("inferences"))["n"],
    }


def test_overlapping_calls_from_many_devices(live_service, make_batch, activate):
    batch = make_batch(units=4)
    units = [activate(batch, f"cam-{n}", at=ACTIVATED) for n in range(4)]
    calls = []
    for n in range(16):
        unit = units[n % 4]
        first = (n // 4) * 50  # calls of one device overlap by half
        records = [record(T0 + i * 3600, inferences=1) for i in range(first, first + 100)]
        calls.append((unit.token, {"device_id": unit.device_id, "records": records}))
    results = _race(live_service, calls)
    assert all(status == 200 for status, _ in results), results
    assert all(body["conflicts"] == body["refused"] == [] for _, body in results)
    assert sum(body["accepted"] for _, body in results) == 4 * 250
    assert sum(body["duplicates"] for _, body in results) == 16 * 100 - 4 * 250
    assert UsageRecord.objects.count() == 1000
    assert UsageDaily.objects.aggregate(n=Sum("records"))["n"] == 1000
