"""Times people read are ISO 8601 UTC, never raw Unix seconds (issue 41): the fleet CSV's
``activated_at`` read 1795777899, and ``svcctl events`` printed ``expires_at`` so. The
JSON API keeps its documented Unix seconds."""

from __future__ import annotations

import csv
import io
import re
from types import SimpleNamespace

import pytest

from licensing.services import unit_activate
from svccore.timeunits import iso_utc
from svcctl.commands import webhooks

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
UNIX = re.compile(r"(?<![\d.])1\d{9}(?!\d)")  # a Unix second of 2001..2286


def test_iso_utc_writes_a_second_as_people_read_it():
    assert iso_utc(1795777899) == "2026-11-27T11:11:39Z"
    assert iso_utc(0) == "never" and iso_utc(None, zero="-") == "-"


@pytest.mark.django_db
def test_the_fleet_csv_writes_activation_times_as_iso_utc(admin_api, make_batch):
    batch = make_batch(units=3)
    for n in range(3):
        unit_activate(batch_token=batch.license.token, device_id=f"cam-{n}")
    response = admin_api.get(f"/v1/admin/fleet.csv?batch_id={batch.id}")
    text = b"".join(response.streaming_content).decode("utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert len(rows) == 3 and all(ISO.fullmatch(row["activated_at"]) for row in rows)
    assert not UNIX.search(text), text
    # The JSON fleet keeps Unix seconds (docs/api.md).
    units = admin_api.get(f"/v1/admin/fleet?batch_id={batch.id}").json()["units"]
    assert {iso_utc(u["activated_at"]) for u in units} == {r["activated_at"] for r in rows}


def test_svcctl_events_prints_times_in_event_data_as_iso_utc(monkeypatch, capsys):
    page = {
        "events": [
            {
                "id": "evt_1",
                "type": "license.renewed",
                "customer_id": "CUST-A",
                "created_at": 1795777899,
                "data": {"license_id": "LIC-1", "expires_at": 1827313899, "previous_expires_at": 0},
            }
        ],
        "next_cursor": None,
    }
    client = SimpleNamespace(get=lambda *args, **kwargs: page)
    monkeypatch.setattr(webhooks, "connect", lambda args: client)
    args = SimpleNamespace(type=None, customer=None, limit=50, cursor=None, json=False)
    assert webhooks.cmd_events(args) == 0
    out = capsys.readouterr().out
    assert "expires_at=2027-11-27T11:11:39Z" in out and "previous_expires_at=never" in out
    assert not UNIX.search(out), out
