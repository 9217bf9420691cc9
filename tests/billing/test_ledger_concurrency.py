"""The ledger under concurrency, through a real gunicorn server (3 processes x 4 threads)
on PostgreSQL: issuers racing for one customer never overlap, and usage uploaded while
an invoice is being issued is billed exactly once, on that invoice or the next."""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.db.models import Sum

from billing.models import Invoice, LedgerEntry, UsageRecord
from billing.reconciliation import ledger_reconcile
from tests.billing.conftest import hour, record

pytestmark = [
    pytest.mark.live,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent issuing: PostgreSQL"),
]

JAN, FEB, MAR = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2, 3))


def _call(url: str, path: str, body: dict, headers: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def _race(calls) -> list:
    start = threading.Barrier(len(calls))

    def fire(call):
        start.wait(timeout=30)
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(fire, calls))


def test_issuers_racing_for_one_customer_never_overlap(
    live_service, customer, make_batch, activate
):
    batch = make_batch(units=20, sku="VISION-PRO")
    for n in range(6):
        activate(batch, f"cam-{n}", at=JAN + dt.timedelta(days=3 * n + 1))
    admin = {"X-Admin-Key": live_service.admin_key}
    ends = [hour(FEB)] * 6 + [hour(JAN + dt.timedelta(days=15))] * 2

    def issuer(end):
        body = {"customer_id": customer.id, "period_days": 31, "period_end": end}
        return lambda: _call(live_service.url, "/v1/admin/invoices", body, admin)

    results = _race([issuer(end) for end in ends])
    created = [body for status, body in results if status == 201]
    refused = [body for status, body in results if status != 201]
    assert all(status in (201, 409) for status, _ in results), results
    assert 1 <= len(created) <= 2
    numbers = {body["number"] for body in created}
    assert all(any(n in body["detail"] for n in numbers) for body in refused), refused
    periods = sorted((i.period_start, i.period_end) for i in Invoice.objects.all())
    for (_, end), (start, _) in zip(periods, periods[1:], strict=False):
        assert start == end  # contiguous, never overlapping
    billed = LedgerEntry.objects.filter(kind="activation").aggregate(n=Sum("quantity"))["n"]
    assert billed == 6
    assert ledger_reconcile(customer_id=customer.id).ok


def test_usage_uploaded_while_issuing_is_billed_exactly_once(
    live_service, customer, make_batch, activate
):
    batch = make_batch(units=8, sku="API-METERED")
    units = [activate(batch, f"cam-{n}", at=JAN - dt.timedelta(days=5)) for n in range(4)]
    hours = [hour(JAN) + h * 3600 for h in range(31 * 24)]
    admin = {"X-Admin-Key": live_service.admin_key}

    def uploads(unit, seed):
        mine = hours[:]
        random.Random(seed).shuffle(mine)

        def go():
            results = []
            for k in range(0, len(mine), 93):
                body = {
                    "device_id": unit.device_id,
                    "records": [record(h, inferences=1000 + h % 7) for h in mine[k : k + 93]],
                }
                bearer = {"Authorization": f"Bearer {unit.token}"}
                results.append(_call(live_service.url, "/v1/usage", body, bearer))
            return results

        return go

    def issuer():
        body = {"customer_id": customer.id, "period_days": 31, "period_end": hour(FEB)}
        return _call(live_service.url, "/v1/admin/invoices", body, admin)

    calls = [uploads(unit, seed) for seed, unit in enumerate(units)]
    calls += [uploads(unit, seed + 10) for seed, unit in enumerate(units)]  # duplicates too
    calls.append(issuer)
    results = _race(calls)
    status, january = results[-1]
    assert status == 201, january
    for result in results[:-1]:
        assert all(code == 200 for code, _ in result), result
    stored = UsageRecord.objects.aggregate(n=Sum("inferences"))["n"]
    assert UsageRecord.objects.count() == 4 * len(hours)
    on_january = LedgerEntry.objects.filter(document_id=january["number"], kind="usage")
    # Typically part of the usage: the issue lands while uploads are committing.
    billed_first = on_january.aggregate(n=Sum("quantity"))["n"] or 0
    waiting = ledger_reconcile(customer_id=customer.id).totals().waiting
    assert billed_first + waiting == stored
    # Whatever the race left out lands on February's invoice, as late usage, once.
    status, february = _call(
        live_service.url,
        "/v1/admin/invoices",
        {"customer_id": customer.id, "period_end": hour(MAR)},
        admin,
    )
    assert status in (201, 400), february
    result = ledger_reconcile(customer_id=customer.id, deep=True)
    assert result.ok, result.problems
    billed = LedgerEntry.objects.filter(kind="usage").aggregate(n=Sum("quantity"))["n"]
    assert billed == stored and result.totals().waiting == 0
