"""A revocation list of 1,000,000 entries, end to end: the list is filled with one SQL
statement, and a camera whose list file was lost walks it from sequence 0 through the
live gunicorn service, page by page, with bounded memory, and learns that its own
licence (revoked after the million) is revoked. Nothing has a size cliff: no answer
comes near the device's read limit and the device keeps only its own licence's entry."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest
from django.db import connection

import devices
from devices.client import MAX_RESPONSE_BYTES
from licensing.models import Revocation, RevocationHead

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

ENTRIES = 1_000_000
MEMORY_LIMIT = 24 << 20  # bytes the walk may allocate at its peak, whatever the list size

FILL = {
    "postgresql": """
        INSERT INTO {table} (seq, license_id, revoked_at, usable_until)
        SELECT g, 'LIC-FILL' || lpad(g::text, 12, '0'), now(), 0
        FROM generate_series(1, %s) AS g
    """,
    "sqlite": """
        INSERT INTO {table} (seq, license_id, revoked_at, usable_until)
        WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < %s)
        SELECT n, 'LIC-FILL' || substr('000000000000' || n, -12), datetime('now'), 0 FROM g
    """,
}


def test_a_million_entry_list_syncs_with_bounded_memory(
    live_service, customer, signing_key, tmp_path
):
    table = connection.ops.quote_name(Revocation._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(FILL[connection.vendor].format(table=table), [ENTRIES])  # noqa: S608
    RevocationHead.objects.update_or_create(pk=1, defaults={"seq": ENTRIES})

    batch = live_service.admin(
        "POST",
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 1},
    )
    state = tmp_path / "camera"
    devices.activate(
        live_service.url, batch["batch_token"], state, device_id="cam-1m", allow_http=True
    )
    key = devices.token.public_key_b64url(signing_key.public_key())
    engine = devices.Engine(state, public_key=key, device_id="cam-1m")
    assert engine.start() == "active"
    assert engine.sync(live_service.url, allow_http=True)["list_seq"] == ENTRIES  # a 304
    license_id = engine.license_id
    live_service.admin("POST", "/v1/admin/revoke", {"license_id": license_id, "reason": "1M"})
    engine.close()

    (state / "crl.json").unlink()  # the list is lost: only a walk from 0 can rebuild it
    engine = devices.Engine(state, public_key=key, device_id="cam-1m")
    with pytest.raises(devices.SyncRequired):
        engine.start()
    tracemalloc.start()
    started = time.perf_counter()
    try:
        summary = engine.sync(live_service.url, allow_http=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    seconds = time.perf_counter() - started
    print(f"walked {ENTRIES + 1} entries in {seconds:.1f} s, peak {peak / 2**20:.1f} MiB")
    assert summary["revoked"] is True and summary["list_seq"] == ENTRIES + 1
    assert peak < MEMORY_LIMIT < MAX_RESPONSE_BYTES * 16
    held = json.loads((state / "crl.json").read_text())
    assert held["revoked"] == {license_id: held["revoked"][license_id]}
    assert len((state / "crl.json").read_bytes()) < 600_000  # one page as proof, one entry
    engine.close()
    with pytest.raises(devices.Revoked):
        devices.Engine(state, public_key=key, device_id="cam-1m").start()
