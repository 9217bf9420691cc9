"""A revocation list of 1,000,000 entries, end to end: the list is filled with one SQL
statement. A camera whose status file was lost learns that its own licence (revoked
after the million) is revoked from one signed status of a few hundred bytes, through
the live gunicorn service; firmware that walks the list still can, page by page, and no
page comes near the device's read limit."""

from __future__ import annotations

import json
import time

import pytest
from django.db import connection

import devices
from devices.client import MAX_RESPONSE_BYTES
from licensing.models import Revocation, RevocationHead

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

ENTRIES = 1_000_000

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


def test_a_million_entry_list_costs_a_device_one_small_status(
    live_service, customer, signing_key, tmp_path, monkeypatch
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

    (state / "status.json").unlink()  # the evidence is lost: the device must ask again
    engine = devices.Engine(state, public_key=key, device_id="cam-1m")
    with pytest.raises(devices.SyncRequired):
        engine.start()
    calls = []
    call = devices.client.call

    def counted(method, url, **kwargs):
        answer = call(method, url, **kwargs)
        calls.append((url.split("?")[0].removeprefix(live_service.url), len(json.dumps(answer[1]))))
        return answer

    monkeypatch.setattr(devices.client, "call", counted)
    started = time.perf_counter()
    with pytest.raises(devices.Revoked) as revoked:
        engine.sync(live_service.url, allow_http=True)
    seconds = time.perf_counter() - started
    summary = revoked.value.summary
    assert summary["revoked"] is True and summary["list_seq"] == ENTRIES + 1
    statuses = [size for path, size in calls if path == "/v1/revocations/status"]
    assert len(statuses) == 1 and statuses[0] < 2000
    assert not [path for path, _ in calls if path == "/v1/revocations"]
    print(f"first sync against {ENTRIES + 1} entries: {seconds:.2f} s, status {statuses[0]} B")
    engine.close()
    with pytest.raises(devices.Revoked):
        devices.Engine(state, public_key=key, device_id="cam-1m").start()

    # Firmware that walks the list: page by page, every page well under the read limit.
    monkeypatch.undo()
    since, pages, found, biggest = 0, 0, False, 0
    while True:
        status, body, _ = devices.client.fetch_revocation_page(
            live_service.url, since, allow_http=True
        )
        assert status == 200
        page = devices.documents.parse_revocation_page(body["revocations"], key)
        biggest = max(biggest, len(json.dumps(body)))
        found = found or any(entry[0] == license_id for entry in page.revoked)
        pages, since = pages + 1, page.seq
        if not page.more:
            break
    assert found and since == ENTRIES + 1 and pages == ENTRIES // 10_000 + 1
    assert biggest < MAX_RESPONSE_BYTES // 2
