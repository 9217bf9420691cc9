"""What the invoice preview reads (issue 46, "finance reads keep up"): a partial day at a
window's edge is read from its smaller side, so a preview ending late in a day reads
that day's rollup and not its activations or usage records; the customer's currencies
are read without a join; and the sums stay exact to the second whichever side is read.
Figures at 10^6 activations: bench/bench_scale.py, docs/development.md."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.services import invoice_rate
from tests.billing.conftest import hour, record

pytestmark = pytest.mark.django_db

DAY_START = dt.datetime(2026, 3, 31, tzinfo=dt.UTC)
LATE = DAY_START + dt.timedelta(hours=21)  # a preview late in the day: 21 h of it before now
pg_only = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="EXPLAIN ANALYZE")


def rows_read(sql: str, table: str) -> int:
    """Rows PostgreSQL's plan of ``sql`` read from ``table`` (any of its scans, each loop;
    the partitions of a partitioned table too)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    found, nodes = 0, [plan[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        name = node.get("Relation Name", "")
        if name == table or name.startswith(f"{table}_y"):
            found += node["Actual Rows"] * node["Actual Loops"]
        nodes += node.get("Plans", [])
    return found


def preview(customer_id: str, now: dt.datetime) -> tuple[dict, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        rated = invoice_rate(customer_id=customer_id, period_days=30, now=now)
    return rated, [q["sql"] for q in queries]


@pg_only
def test_a_preview_late_in_the_day_reads_that_day_from_the_rollups(
    customer, make_batch, activate, direct, upload
):
    """20 activations and 20 hours of usage before 21:00: the preview at 21:00 bills all
    of them and reads none of those rows (the day's rollup minus the rows after 21:00).
    Reading the rows of the day's 21 hours instead, as before issue 46, fails here."""
    batch = make_batch(units=40)
    for n in range(20):
        activate(batch, f"cam-{n}", at=DAY_START + dt.timedelta(hours=n, minutes=30))
    metered = direct("API-METERED", "meter-1", at=DAY_START - dt.timedelta(days=40))
    records = [record(hour(DAY_START) + n * 3600, inferences=1000) for n in range(20)]
    assert upload(metered, records).status_code == 200
    rated, sql = preview(customer.id, LATE)
    billed = {line["kind"]: line["quantity"] for line in rated["lines"]}
    assert billed["unit_activation"] == 20
    assert billed["metered_overage"] == Decimal("10.000")  # 20 000 - A = 10 000 for N = 1
    activations = [s for s in sql if '"licensing_activation"' in s]
    usage = [s for s in sql if '"billing_usagerecord"' in s]
    assert activations and usage
    assert sum(rows_read(s, "licensing_activation") for s in activations) == 0
    assert sum(rows_read(s, "billing_usagerecord") for s in usage) == 0


def test_the_preview_reads_currencies_without_a_join(customer, make_batch, direct, upload):
    """Each DISTINCT is of a column alone: a model's ordering in it joined the usage
    rollups to every licence with usage (2.1 s at 10^7 usage records)."""
    make_batch(units=5)
    metered = direct("API-METERED", "meter-1", at=LATE - dt.timedelta(days=40))
    assert upload(metered, [record(hour(LATE) - 7200, inferences=5)]).status_code == 200
    _, sql = preview(customer.id, LATE)
    distinct = [s for s in sql if s.upper().startswith("SELECT DISTINCT")]
    assert distinct and not [s for s in distinct if " JOIN " in s.upper()], distinct


@pytest.mark.parametrize("hours", [3, 12, 20])
def test_usage_edges_are_exact_to_the_second_at_any_hour(customer, direct, upload, hours):
    """Records at the window's start count, at its end do not, whether a partial day is
    read as records inside the window (3 h or 12 h of it) or as the day's rollup minus
    the records outside it (21 h, 20 h)."""
    now = DAY_START + dt.timedelta(hours=hours)
    meter = direct("API-METERED", "edges", at=now - dt.timedelta(days=40))
    s, e = hour(now - dt.timedelta(days=30)), hour(now)
    records = [
        record(s - 1, length=1, inferences=1),
        record(s, length=1, inferences=10_000),
        record(s + 1, length=1, inferences=100),
        record(s + 3600, inferences=7),  # later the same day
        record(e - 3600 * hours, length=1, inferences=50),  # the last day's midnight
        record(e - 1, length=1, inferences=20),
        record(e, length=1, inferences=4),
        record(e + 60, length=1, inferences=300),
    ]
    assert upload(meter, records).status_code == 200
    rated = invoice_rate(customer_id=customer.id, period_days=30, now=now)
    # U = 10 000 + 100 + 7 + 50 + 20 = 10 177; A = 10 000 for N = 1 and P = 30.
    assert [(line["kind"], line["quantity"]) for line in rated["lines"]] == [
        ("metered_overage", Decimal("0.177"))
    ]
