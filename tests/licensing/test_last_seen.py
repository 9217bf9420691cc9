"""Last seen (issue 42): a unit's last status fetch, usage upload or re-activation is
recorded, at most once per unit per SVC_LAST_SEEN_MINUTES, and the console, the portal
and the API show it and filter the units not seen for more than D days. Time moves on
the server's clock only (``server_clock``)."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from config import clock
from config.admin.display import utc_time_html
from licensing.models import Activation, License
from licensing.services import seen, unit_activate
from tests.licensing.test_fleet_paging import SECOND, _at, bulk_units
from tests.portal.conftest import make_world

pytestmark = pytest.mark.django_db

MINUTE = 60
HOUR = 3600
DAY = 86400


def seen_at(license_id: str) -> dt.datetime | None:
    return Activation.objects.get(license_id=license_id).last_seen_at


def near(moment: dt.datetime | None, expected: dt.datetime) -> bool:
    """Within the few seconds a test takes: the clock moves on while it runs."""
    return moment is not None and abs((moment - expected).total_seconds()) < 30


def reactivate(device_api, batch, device_id: str):
    response = device_api.post(
        "/v1/activate",
        {"batch_token": batch.license.token, "device_id": device_id},
        format="json",
    )
    assert response.status_code == 200 and response.json()["reactivated"] is True
    return response


def fetch_status(client, license_id: str, device_id: str):
    response = client.get(
        "/v1/revocations/status", {"license_id": license_id, "device_id": device_id}
    )
    assert response.status_code == 200, response.content
    return response


def upload_usage(device_api, unit: License, start: int):
    record = {
        "period_start": start,
        "period_end": start + 600,
        "inferences": 1200,
        "frames": 36_000,
        "stream_seconds": 600,
        "events": 3,
    }
    response = device_api.post(
        "/v1/usage",
        {"device_id": unit.device_id, "license_id": unit.id, "records": [record]},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {unit.token}",
    )
    assert response.status_code == 200 and response.json()["accepted"] == 1, response.content
    return response


@pytest.fixture
def unit(make_batch, server_clock, settings):
    """A batch and one unit activated on it now (server clock), seen by its activation."""
    settings.SVC_LAST_SEEN_MINUTES = 15
    batch = make_batch(units=10)
    license_id = unit_activate(
        batch_token=batch.license.token, device_id="cam-7F3A9C0B21D4"
    ).license_id
    return batch, License.objects.get(pk=license_id)


def test_a_new_activation_is_seen_in_its_own_row(unit):
    _, lic = unit
    assert near(seen_at(lic.id), clock.now())


def test_each_of_the_three_paths_records_the_unit_seen(device_api, client, unit, server_clock):
    batch, lic = unit
    activated = seen_at(lic.id)
    server_clock(HOUR)
    reactivate(device_api, batch, lic.device_id)
    after_reactivation = seen_at(lic.id)
    assert near(after_reactivation, activated + dt.timedelta(hours=1))
    server_clock(2 * HOUR)
    fetch_status(client, lic.id, lic.device_id)
    after_status = seen_at(lic.id)
    assert near(after_status, activated + dt.timedelta(hours=2))
    server_clock(3 * HOUR)
    upload_usage(device_api, lic, int(lic.issued_at.timestamp()))
    assert near(seen_at(lic.id), activated + dt.timedelta(hours=3))


def test_at_most_one_write_per_unit_per_interval(device_api, client, unit, server_clock):
    batch, lic = unit
    server_clock(HOUR)
    reactivate(device_api, batch, lic.device_id)
    first = seen_at(lic.id)
    # Ten minutes later, on every path: no query to record it, and the time stays.
    server_clock(HOUR + 10 * MINUTE)
    with CaptureQueriesContext(connection) as queries:
        reactivate(device_api, batch, lic.device_id)
        fetch_status(client, lic.id, lic.device_id)
        upload_usage(device_api, lic, int(lic.issued_at.timestamp()))
    assert not [q for q in queries if "last_seen_at" in q["sql"]]
    assert seen_at(lic.id) == first
    # Another process, which never saw the unit, sends its UPDATE; the row holds it back.
    seen.forget()
    with CaptureQueriesContext(connection) as queries:
        reactivate(device_api, batch, lic.device_id)
    assert len([q for q in queries if "last_seen_at" in q["sql"]]) == 1
    assert seen_at(lic.id) == first
    # Past the interval (counted in each process from its own last UPDATE), the next
    # call writes again.
    server_clock(HOUR + 26 * MINUTE)
    reactivate(device_api, batch, lic.device_id)
    assert near(seen_at(lic.id), first + dt.timedelta(minutes=26))


def test_the_interval_is_the_setting(device_api, unit, server_clock, settings):
    batch, lic = unit
    settings.SVC_LAST_SEEN_MINUTES = 60
    activated = seen_at(lic.id)
    server_clock(30 * MINUTE)
    reactivate(device_api, batch, lic.device_id)
    assert seen_at(lic.id) == activated
    server_clock(61 * MINUTE)
    reactivate(device_api, batch, lic.device_id)
    assert near(seen_at(lic.id), activated + dt.timedelta(minutes=61))


def test_a_status_fetch_naming_another_device_moves_nothing(client, unit, server_clock):
    _, lic = unit
    activated = seen_at(lic.id)
    server_clock(HOUR)
    fetch_status(client, lic.id, "cam-SOMEONE-ELSE")
    assert seen_at(lic.id) == activated
    # ... and does not stop the real device's fetch from being recorded.
    fetch_status(client, lic.id, lic.device_id)
    assert near(seen_at(lic.id), activated + dt.timedelta(hours=1))


def test_a_failed_write_never_fails_the_answer(device_api, unit, server_clock, monkeypatch):
    from django.db import DatabaseError

    batch, lic = unit
    activated = seen_at(lic.id)
    monkeypatch.setattr(seen, "SEEN_SQL", "UPDATE no_such_table SET x = %s %s %s %s")
    server_clock(HOUR)
    if connection.vendor == "postgresql":
        # PostgreSQL aborts the test's own transaction on an error: in production the
        # UPDATE runs in autocommit, so check the logic in a savepoint of its own.
        from django.db import transaction

        with pytest.raises(DatabaseError), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("UPDATE no_such_table SET x = 1")
        return
    reactivate(device_api, batch, lic.device_id)
    assert seen_at(lic.id) == activated
    # Not remembered as sent: the next call tries again.
    monkeypatch.undo()
    reactivate(device_api, batch, lic.device_id)
    assert near(seen_at(lic.id), activated + dt.timedelta(hours=1))


# --- the filter "not seen for more than D days" on every surface ------------------------


@pytest.fixture
def silent_fleet(device_api, make_batch, server_clock, settings):
    """Three units of one customer: one seen now (10 days after activation), one last
    seen 10 days ago (at its activation), one never seen since last seen was recorded
    (loaded in bulk, as units activated before the feature)."""
    settings.SVC_LAST_SEEN_MINUTES = 15
    batch = make_batch(units=10)
    recent = unit_activate(batch_token=batch.license.token, device_id="cam-RECENT-0001")
    quiet = unit_activate(batch_token=batch.license.token, device_id="cam-QUIET-0002")
    bulk_units(batch, [_at(SECOND)], prefix="cam-NEVER")
    server_clock(10 * DAY)
    reactivate(device_api, batch, "cam-RECENT-0001")
    return batch, recent.license_id, quiet.license_id


@pytest.fixture
def admin_client(silent_fleet, admin_user):
    """The console signed in after the clock moved (a session ages on the server's
    clock: one signed in ten days earlier has ended)."""
    client = Client()
    client.force_login(admin_user)
    return client


def test_the_api_shows_last_seen_and_filters_units_not_seen(admin_api, silent_fleet):
    batch, recent, quiet = silent_fleet
    units = admin_api.get("/v1/admin/fleet").json()["units"]
    by_device = {u["device_id"]: u for u in units}
    assert by_device["cam-NEVER-00000"]["last_seen_at"] is None
    assert by_device["cam-RECENT-0001"]["last_seen_at"] == int(seen_at(recent).timestamp())
    answer = admin_api.get("/v1/admin/fleet", {"not_seen_days": 7}).json()
    assert {u["device_id"] for u in answer["units"]} == {"cam-QUIET-0002", "cam-NEVER-00000"}
    assert answer["count"] == 2
    # More than 11 days: only the unit never seen.
    answer = admin_api.get("/v1/admin/fleet", {"not_seen_days": 11}).json()
    assert [u["device_id"] for u in answer["units"]] == ["cam-NEVER-00000"]
    for bad in ("seven", "-1", "3661", "", "7.5"):
        response = admin_api.get("/v1/admin/fleet", {"not_seen_days": bad})
        assert response.status_code == 400, bad
        assert response.json()["detail"].startswith("not_seen_days"), response.json()
    # The export filters alike, times for people, the never-seen unit's cell empty.
    response = admin_api.get(f"/v1/admin/fleet.csv?batch_id={batch.id}&not_seen_days=7")
    text = b"".join(response.streaming_content).decode("utf-8-sig")
    rows = {row["device_id"]: row for row in csv.DictReader(io.StringIO(text))}
    assert set(rows) == {"cam-QUIET-0002", "cam-NEVER-00000"}
    assert rows["cam-QUIET-0002"]["last_seen_at"] == seen_at(quiet).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert rows["cam-NEVER-00000"]["last_seen_at"] == ""


def test_the_console_fleet_shows_last_seen_and_filters(admin_client, silent_fleet):
    _, recent, quiet = silent_fleet
    url = reverse("admin:licensing_activation_changelist")
    body = admin_client.get(url).content.decode()
    assert "Last seen" in body and "never" in body
    assert utc_time_html(seen_at(recent)) in body
    body = admin_client.get(url + "?not_seen_days=7").content.decode()
    assert "cam-QUIET-0002" in body and "cam-NEVER-00000" in body
    assert "cam-RECENT-0001" not in body
    assert "By last seen" in body and "more than 7 days ago, or never" in body
    # A hand-typed value is the admin's "?e=1" page, never a 500.
    response = admin_client.get(url + "?not_seen_days=banana")
    assert response.status_code == 302 and "e=1" in response["Location"]


def test_the_dashboard_counts_units_not_seen_for_the_set_days(admin_client, silent_fleet, settings):
    settings.SVC_SILENT_DAYS = 7
    body = admin_client.get(reverse("console-dashboard")).content.decode()
    assert "Units not seen for more than 7 days" in body
    assert "?not_seen_days=7&amp;license__revoked_at__isnull=True" in body
    tile = body[body.index('id="silent-units"') :]
    assert ">2</a>" in tile[:800]
    settings.SVC_SILENT_DAYS = 30
    body = admin_client.get(reverse("console-dashboard")).content.decode()
    tile = body[body.index('id="silent-units"') :]
    assert "more than 30 days" in tile[:800] and ">1</a>" in tile[:800]


def test_the_dashboard_counts_silent_units_up_to_its_bound(
    admin_client, silent_fleet, settings, monkeypatch
):
    """A fleet upgraded from before last-seen times is silent whole: the tile counts up
    to its bound and says "more than" (its link lists them all)."""
    from console import views

    settings.SVC_SILENT_DAYS = 7
    monkeypatch.setattr(views, "DASHBOARD_COUNT_BOUND", 1)
    body = admin_client.get(reverse("console-dashboard")).content.decode()
    tile = body[body.index('id="silent-units"') :]
    assert ">more than 1</a>" in tile[:800]
    from licensing.selectors import silent_units_count

    assert silent_units_count(days=7) == 2 and silent_units_count(days=7, up_to=1) == 1


def test_a_revoked_unit_is_not_counted_silent(admin_client, silent_fleet, settings):
    from licensing.services import license_revoke

    _, _, quiet = silent_fleet
    settings.SVC_SILENT_DAYS = 7
    license_revoke(license_id=quiet, reason="camera scrapped")
    body = admin_client.get(reverse("console-dashboard")).content.decode()
    tile = body[body.index('id="silent-units"') :]
    assert ">1</a>" in tile[:800]
    # Its link lists the same units: the silent ones not revoked.
    fleet = reverse("admin:licensing_activation_changelist")
    body = admin_client.get(f"{fleet}?not_seen_days=7&license__revoked_at__isnull=True")
    assert "cam-NEVER-00000" in body.content.decode()
    assert "cam-QUIET-0002" not in body.content.decode()


def test_the_portal_fleet_shows_last_seen_and_filters(device_api, server_clock, settings, db):
    settings.SVC_LAST_SEEN_MINUTES = 15
    settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
    world = make_world(server_clock, "Seen")
    server_clock(10 * DAY)
    first = Activation.objects.get(license_id=world.units[0])
    reactivate(device_api, world.batch, first.device_id)
    client = world.client()
    body = client.get(reverse("portal-fleet")).content.decode()
    assert "Last seen (UTC)" in body
    assert utc_time_html(seen_at(first.license_id)) in body
    body = client.get(reverse("portal-fleet") + "?not_seen_days=7").content.decode()
    assert "Seen-cam-001" not in body and "HYPERLINK" in body
    assert 'value="7" selected' in body and "not_seen_days=7" in body  # the export keeps it
    body = client.get(reverse("portal-fleet") + "?q=cam&not_seen_days=7").content.decode()
    assert "No units not seen for more than 7 days whose device id holds" in body
    # An unknown value is no filter, not an error.
    assert client.get(reverse("portal-fleet") + "?not_seen_days=abc").status_code == 200
    # The customer API: the same parameter and field as the admin's.
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {world.key}")
    units = api.get("/v1/customer/fleet", {"not_seen_days": 7}).json()["units"]
    assert [u["license_id"] for u in units] == [world.units[1]]
    assert units[0]["last_seen_at"] is not None
