"""Migration 0010 widens a usage record's identity to (licence, device, period) without
losing a record: every row held under the old key is there after it, with its counts,
and a second licence on the same camera and hour can then be stored (on PostgreSQL, on
the partitioned table)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from billing.models import UsageRecord
from billing.usage_store import store_portable, store_postgresql

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("billing", "0009_guard_what_billing_reads")]
HOUR = 3600
FIRST = int(dt.datetime(2026, 10, 1, tzinfo=dt.UTC).timestamp())


def migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def test_every_record_survives_the_new_identity(customer, direct):
    one = direct("API-METERED", "cam-1")
    two = direct("API-METERED", "cam-1")
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()  # every app: all it undid
    migrate(BEFORE)
    try:
        apps = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        record = apps.get_model("billing", "UsageRecord")
        received = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
        for n in range(50):
            start = FIRST + n * HOUR
            record.objects.create(license_id=one.id, customer_id=customer.id,
                                  sku="API-METERED", device_id=f"cam-{n % 3}",
                                  received_at=received, period_start=start,
                                  period_end=start + HOUR, inferences=n, frames=1,
                                  stream_seconds=2, events=3)  # fmt: skip
    finally:
        migrate(latest)
    held = sorted(UsageRecord.objects.values_list("device_id", "period_start", "inferences"))
    assert held == sorted((f"cam-{n % 3}", FIRST + n * HOUR, n) for n in range(50))
    # The same camera and hour under another licence is a record of its own now.
    store = store_postgresql if connection.vendor == "postgresql" else store_portable
    row = (FIRST, FIRST + HOUR, 7, 0, 0, 0)
    arguments = {"customer_id": customer.id, "sku": "API-METERED", "rows": [row]}
    assert store(license_id=two.id, device_id="cam-0", **arguments) == 1
    assert store(license_id=one.id, device_id="cam-0", **arguments) == 0  # still held once
    assert UsageRecord.objects.filter(device_id="cam-0", period_start=FIRST).count() == 2
