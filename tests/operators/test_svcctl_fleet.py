"""``svcctl fleet`` paging against a live server: --all follows next_cursor to the last
unit, --cursor goes on from a printed cursor, --json carries next_cursor."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from svccore import dates
from tests.licensing.test_fleet_paging import SECOND, _at, bulk_units, expected_order
from tests.operators.test_svcctl import _json, svcctl


@pytest.fixture
def online(live_service):
    return {"SVC_URL": live_service.url, "SVC_ADMIN_KEY": live_service.admin_key}


@pytest.fixture
def provisioned(transactional_db, make_batch):
    """2500 units, 1200 of them at one instant: three pages of 1000 that split it."""
    batch = make_batch(units=2500)
    bulk_units(
        batch,
        [_at(SECOND + 1 + n) for n in range(400)]
        + [_at(SECOND, 250_000)] * 1200
        + [_at(SECOND - 1 - n) for n in range(900)],
    )
    return batch


@pytest.mark.live
def test_fleet_all_lists_every_unit_once(online, provisioned):
    batch = provisioned.id
    result = svcctl("fleet", "--batch", batch, "--all", "--json", env=online)
    body = _json(result)
    devices = [u["device_id"] for u in body["units"]]
    assert body["count"] == len(devices) == len(set(devices)) == 2500
    assert devices == expected_order(batch=provisioned)
    assert body["next_cursor"] is None
    # Progress on stderr, one line per page read and the total.
    progress = result.stderr.splitlines()
    assert progress == [
        "fleet: 1000 unit(s) in 1 page(s), reading on",
        "fleet: 2000 unit(s) in 2 page(s), reading on",
        "fleet: 2500 unit(s) in 3 page(s), done",
    ]

    table = svcctl("fleet", "--batch", batch, "--all", "--limit", "700", env=online)
    assert table.returncode == 0, table.stderr
    assert "\n2500 unit(s)\n" in table.stdout and "more:" not in table.stdout
    assert sum(line.startswith("cam-") for line in table.stdout.split()) == 2500
    assert "in 4 page(s), done" in table.stderr


@pytest.mark.live
def test_fleet_cursor_goes_on_from_the_printed_cursor(online, provisioned):
    batch = provisioned.id
    first = svcctl("fleet", "--batch", batch, env=online)
    assert first.returncode == 0, first.stderr
    assert "\n1000 unit(s)\n" in first.stdout and not first.stderr
    cursor = re.search(
        r"^more: the same command with --cursor (\S+) \(or --all\)$", first.stdout, re.M
    )[1]
    as_json = _json(svcctl("fleet", "--batch", batch, "--json", env=online))
    assert as_json["next_cursor"] == cursor and as_json["count"] == 1000

    devices = [u["device_id"] for u in as_json["units"]]
    while cursor is not None:
        body = _json(svcctl("fleet", "--batch", batch, "--cursor", cursor, "--json", env=online))
        devices += [u["device_id"] for u in body["units"]]
        cursor = body["next_cursor"]
    assert devices == expected_order(batch=provisioned)

    # From a cursor to the end, in one command.
    rest = _json(
        svcctl(
            "fleet",
            "--batch",
            batch,
            "--cursor",
            as_json["next_cursor"],
            "--all",
            "--json",
            env=online,
        )
    )
    assert [u["device_id"] for u in rest["units"]] == devices[1000:]


@pytest.mark.live
def test_fleet_bad_cursor_fails_with_the_services_detail(online, transactional_db):
    result = svcctl("fleet", "--cursor", "not-a-cursor", env=online)
    assert result.returncode == 1
    assert "svcctl: error: cursor: not a cursor of this listing" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--cursor", "abc", "--before", "1"],
        ["--limit", "0"],
        ["--limit", "1001"],
        ["--limit", "many"],
    ],
)
def test_fleet_paging_usage_errors_exit_2(args):
    result = svcctl("fleet", *args, env={"SVC_ADMIN_KEY": "k", "SVC_URL": "http://127.0.0.1:9"})
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""


@pytest.mark.live
def test_fleet_not_seen_days_lists_the_silent_units_with_their_last_seen(
    online, transactional_db, make_batch
):
    from config import clock
    from licensing.models import Activation

    batch = make_batch(units=3)
    bulk_units(batch, [_at(SECOND + n) for n in range(3)], prefix="seen")
    now = clock.now().replace(microsecond=0)
    Activation.objects.filter(device_id="seen-00000").update(
        last_seen_at=now - dt.timedelta(days=1)
    )
    Activation.objects.filter(device_id="seen-00001").update(
        last_seen_at=now - dt.timedelta(days=20)
    )
    # seen-00002: never seen since last-seen times were recorded.

    body = _json(
        svcctl("fleet", "--batch", batch.id, "--not-seen-days", "10", "--json", env=online)
    )
    body_devices = sorted(u["device_id"] for u in body["units"])
    assert body_devices == ["seen-00001", "seen-00002"]

    table = svcctl("fleet", "--batch", batch.id, "--not-seen-days", "10", env=online)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    rows = {device: [line for line in lines if device in line] for device in body_devices}
    twenty_days = dates.moment(now - dt.timedelta(days=20))
    assert twenty_days in rows["seen-00001"][0] and len(rows["seen-00001"]) == 1
    assert "never" in rows["seen-00002"][0] and len(rows["seen-00002"]) == 1
    assert "\n2 unit(s)\n" in table.stdout

    refused = svcctl("fleet", "--not-seen-days", "-1", env=online)
    assert refused.returncode == 2 and "--not-seen-days" in refused.stderr
