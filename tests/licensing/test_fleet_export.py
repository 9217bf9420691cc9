"""The fleet as CSV (issue 15): ``GET /v1/admin/fleet.csv`` streams every unit the
filters select, in the fleet's order, a page at a time along the cursor (constant
memory whatever the fleet's size); ``svcctl fleet --csv FILE`` writes it."""

from __future__ import annotations

import csv
import io
import tracemalloc

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from licensing.exports import COLUMNS
from licensing.models import Activation
from svccore.timeunits import iso_utc
from tests.licensing.test_fleet_paging import SECOND, _at, bulk_units, expected_order
from tests.operators.test_svcctl import svcctl

pytestmark = pytest.mark.django_db


def export(client, query: str = "") -> tuple[list[list[str]], int]:
    """The export's rows (header first) and its size in bytes, read as streamed."""
    response = client.get(f"/v1/admin/fleet.csv{query}")
    assert response.status_code == 200, response.content
    assert response.streaming and response["Content-Type"] == "text/csv; charset=utf-8"
    body = b"".join(response.streaming_content)
    assert body.startswith("\ufeff".encode())
    return list(csv.reader(io.StringIO(body.decode("utf-8-sig"), newline=""))), len(body)


@pytest.fixture
def fleet(make_batch):
    """2500 units, 1200 of them at one instant (three pages split it)."""
    batch = make_batch(units=2500)
    bulk_units(
        batch,
        [_at(SECOND + 1 + n) for n in range(400)]
        + [_at(SECOND, 250_000)] * 1200
        + [_at(SECOND - 1 - n) for n in range(900)],
    )
    return batch


def test_export_lists_every_unit_once_in_fleet_order(admin_api, fleet, make_batch):
    other = make_batch(units=5)
    bulk_units(other, [_at(SECOND + 5000)], prefix="other")
    rows, _ = export(admin_api, f"?batch_id={fleet.id}")
    assert rows[0] == list(COLUMNS)
    devices = [row[0] for row in rows[1:]]
    assert devices == expected_order(batch=fleet) and len(set(devices)) == 2500
    first = dict(zip(COLUMNS, rows[1], strict=True))
    newest = Activation.objects.select_related("batch").get(device_id=devices[0])
    assert first == {
        "device_id": newest.device_id,
        "license_id": newest.license_id,
        "batch_id": fleet.id,
        "customer_id": fleet.customer_id,
        "sku": fleet.sku,
        "fingerprint_source": "",
        "weak_binding": "0",
        "sdk_version": "",
        "activated_at": iso_utc(SECOND + 400),  # for people, not Unix seconds
        "revoked": "0",
        "seat_released": "0",
        "transfer_of": "",
        "last_seen_at": "",  # loaded in bulk: never seen (an empty cell)
        "max_offline_days": "",  # no check-in lease (issue 42)
        "lease_end": "",
        "suspended": "0",
        "trial": "0",  # not on trial (issue 42)
        "trial_ends_at": "",
    }
    # Without filters: the whole fleet, the other batch's unit first (the newest).
    everything, _ = export(admin_api)
    assert [row[0] for row in everything[1:]] == expected_order()


def test_export_reads_a_page_at_a_time_along_the_cursor(admin_api, fleet):
    with CaptureQueriesContext(connection) as queries:
        rows, _ = export(admin_api, f"?batch_id={fleet.id}")
    assert len(rows) == 2501
    pages = [q["sql"] for q in queries if 'FROM "licensing_activation"' in q["sql"]]
    assert len(pages) == 3  # 1000 + 1000 + 500 units, each page one query
    assert all("OFFSET" not in sql and "LIMIT 1001" in sql for sql in pages)


def test_export_memory_does_not_grow_with_the_fleet(admin_api, make_batch):
    """The peak of memory allocated while streaming 5000 units is that of 1000: one
    page is held at a time."""
    small, large = make_batch(units=1000), make_batch(units=5000)
    bulk_units(small, [_at(SECOND - n) for n in range(1000)], prefix="small")
    bulk_units(large, [_at(SECOND - n) for n in range(5000)], prefix="large")

    def peak(batch) -> tuple[int, int]:
        response = admin_api.get(f"/v1/admin/fleet.csv?batch_id={batch.id}")
        tracemalloc.start()
        size = sum(len(chunk) for chunk in response.streaming_content)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top, size

    peak(small)  # warm: compiled queries and imports are not the export's memory
    small_peak, small_size = peak(small)
    large_peak, large_size = peak(large)
    assert large_size > 4.5 * small_size
    assert large_peak < 1.5 * small_peak, (small_peak, large_peak)


def test_export_filters_and_refusals(admin_api, client, fleet):
    Activation.objects.filter(device_id__in=["cam-00000", "cam-00001"]).update(weak_binding=True)
    rows, _ = export(admin_api, f"?customer_id={fleet.customer_id}&weak_binding=1")
    assert sorted(row[0] for row in rows[1:]) == ["cam-00000", "cam-00001"]
    unknown = admin_api.get("/v1/admin/fleet.csv?customer_id=CUST-NOBODY", HTTP_ACCEPT="text/csv")
    assert unknown.status_code == 404
    assert unknown.json()["detail"] == "customer CUST-NOBODY does not exist"
    refused = admin_api.get("/v1/admin/fleet.csv?weak_binding=maybe", HTTP_ACCEPT="text/csv")
    assert refused.status_code == 400 and "weak_binding" in refused.json()["detail"]
    assert client.get("/v1/admin/fleet.csv").status_code == 401


def test_export_quotes_cells_a_spreadsheet_would_run(admin_api, fleet):
    Activation.objects.filter(device_id="cam-00000").update(device_id="=HYPERLINK(1)")
    rows, _ = export(admin_api, f"?batch_id={fleet.id}")
    assert "'=HYPERLINK(1)" in [row[0] for row in rows]


@pytest.mark.live
def test_svcctl_fleet_csv_writes_the_whole_fleet(
    live_service, transactional_db, make_batch, tmp_path
):
    online = {"SVC_URL": live_service.url, "SVC_ADMIN_KEY": live_service.admin_key}
    batch = make_batch(units=2500)
    bulk_units(batch, [_at(SECOND, 250_000)] * 1200 + [_at(SECOND - 1 - n) for n in range(1300)])
    target = tmp_path / "fleet.csv"
    result = svcctl("fleet", "--batch", batch.id, "--csv", str(target), env=online)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("fleet: 2500 unit(s), ") and str(target) in result.stderr
    rows = list(csv.reader(io.StringIO(target.read_text("utf-8-sig"), newline="")))
    assert [row[0] for row in rows[1:]] == expected_order(batch=batch)
    assert not (tmp_path / "fleet.csv.part").exists()

    to_stdout = svcctl("fleet", "--batch", batch.id, "--weak", "--csv", "-", env=online)
    assert to_stdout.returncode == 0 and to_stdout.stdout.lstrip("\ufeff").startswith("device_id,")
    assert "fleet: 0 unit(s)" in to_stdout.stderr

    refused = svcctl("fleet", "--csv", str(target), "--all", env=online)
    assert refused.returncode != 0 and "not with --all" in refused.stderr
    unknown = svcctl("fleet", "--batch", "B-NOPE", "--csv", str(target), env=online)
    assert unknown.returncode != 0 and "B-NOPE" in unknown.stderr
