"""Paging the fleet (GET /v1/admin/fleet) with its stable cursor: every unit exactly
once, in the total order (activated_at, then activation id, newest first), however many
units a provisioning line activated in one second; ``before`` (whole seconds, contract §4)
still works and is shown to skip the rest of a second."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import random
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from licensing import selectors
from licensing.models import Activation, License

pytestmark = pytest.mark.django_db

FLEET = "/v1/admin/fleet"
# A second in which a provisioning line activated 1500 units: 1000 of them at one and
# the same microsecond (only the activation id orders them), 250 before and 250 after.
SECOND = int(dt.datetime(2026, 3, 2, 9, 30, tzinfo=dt.UTC).timestamp())
NEWER, SAME_INSTANT, SAME_SECOND_SPREAD, OLDER = 300, 1000, 500, 700
UNITS = NEWER + SAME_INSTANT + SAME_SECOND_SPREAD + OLDER  # 2500


def _at(seconds: int, microseconds: int = 0) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC) + dt.timedelta(microseconds=microseconds)


def bulk_units(batch, times: list[dt.datetime], *, prefix: str = "cam") -> None:
    """One unit licence and activation per time, written in bulk and in a shuffled order,
    so that activation ids say nothing about activation times."""
    order = list(range(len(times)))
    random.Random(13).shuffle(order)
    licenses = [
        License(
            id=f"LIC-{prefix}-{n:05d}",
            kind=License.Kind.UNIT,
            customer_id=batch.customer_id,
            sku=batch.sku,
            device_id=f"{prefix}-{n:05d}",
            activation=License.Activation.REQUIRED,
            batch=batch,
            issued_at=times[n],
            claims={},
            token=f"SVC1.{prefix}{n}.x",
            token_sha256=hashlib.sha256(f"{prefix}{n}".encode()).hexdigest(),
        )
        for n in order
    ]
    License.objects.bulk_create(licenses)
    Activation.objects.bulk_create(
        Activation(
            batch=batch,
            device_id=f"{prefix}-{n:05d}",
            license_id=f"LIC-{prefix}-{n:05d}",
            activated_at=times[n],
        )
        for n in order
    )


def expected_order(**filters) -> list[str]:
    """Device ids in the fleet's total order, read without the API."""
    records = Activation.objects.filter(**filters).values_list("activated_at", "id", "device_id")
    return [device for _, _, device in sorted(records, reverse=True)]


@pytest.fixture
def provisioned(make_batch):
    """2500 units, 1500 of them activated in SECOND, 1000 at the very same instant; the
    first page of 1000 ends among those 1000."""
    batch = make_batch(units=UNITS)
    spread = SAME_SECOND_SPREAD // 2
    times = (
        [_at(SECOND + 1 + n) for n in range(NEWER)]
        + [_at(SECOND, 500_000 + n * 997) for n in range(spread)]
        + [_at(SECOND, 250_000)] * SAME_INSTANT
        + [_at(SECOND, 1 + n * 997) for n in range(spread)]
        + [_at(SECOND - 1 - n, 999_999) for n in range(OLDER)]
    )
    bulk_units(batch, times)
    return batch


def page(admin_api, query: str = "") -> dict:
    response = admin_api.get(f"{FLEET}?{query}")
    assert response.status_code == 200, response.content
    return response.json()


def follow(admin_api, query: str = "") -> list[dict]:
    """Every answer from ``query`` on, following next_cursor to the end."""
    answers = [page(admin_api, query)]
    while answers[-1]["next_cursor"] is not None:
        cursor = answers[-1]["next_cursor"]
        answers.append(page(admin_api, f"{query}&cursor={cursor}" if query else f"cursor={cursor}"))
        assert len(answers) <= UNITS, "next_cursor does not move on"
    return answers


# --- every unit exactly once --------------------------------------------------------------


def test_cursor_pages_every_unit_exactly_once_in_order(admin_api, provisioned):
    answers = follow(admin_api)
    assert [a["count"] for a in answers] == [1000, 1000, 500]
    assert [len(a["units"]) for a in answers] == [1000, 1000, 500]
    assert [a["next_cursor"] is None for a in answers] == [False, False, True]
    devices = [u["device_id"] for a in answers for u in a["units"]]
    assert len(devices) == len(set(devices)) == UNITS
    assert devices == expected_order()
    # The first page ends among the units that share one instant, which only the
    # activation id tells apart; the second page goes on from the very next of them.
    first, second = answers[0]["units"], answers[1]["units"]
    assert first[-1]["activated_at"] == SECOND == second[0]["activated_at"]
    instant = Activation.objects.filter(activated_at=_at(SECOND, 250_000))
    shared = set(instant.values_list("device_id", flat=True))
    assert first[-1]["device_id"] in shared and second[0]["device_id"] in shared


def test_paging_by_before_skips_the_rest_of_a_second_the_cursor_does_not(admin_api, provisioned):
    first = page(admin_api)
    last_second = first["units"][-1]["activated_at"]
    assert last_second == SECOND
    # What contract §4's whole-second before gives as the next page: the units of SECOND
    # not on the first page are gone.
    by_second = page(admin_api, f"before={last_second}")
    by_cursor = page(admin_api, f"cursor={first['next_cursor']}")
    shown = {u["device_id"] for u in first["units"]}
    skipped = set(expected_order()) - shown - {u["device_id"] for u in by_second["units"]}
    assert len(skipped) == SAME_INSTANT + SAME_SECOND_SPREAD - (1000 - NEWER)  # 800 units
    assert all(u["activated_at"] < SECOND for u in by_second["units"])
    assert by_cursor["units"][0]["activated_at"] == SECOND
    assert skipped <= {u["device_id"] for u in by_cursor["units"]}
    assert [u["device_id"] for u in first["units"] + by_cursor["units"]] == expected_order()[:2000]


def test_cursor_pages_with_filters_and_small_limits(admin_api, make_batch):
    batch, other = make_batch(units=40), make_batch(units=40)
    instant = _at(SECOND, 500)
    bulk_units(batch, [instant] * 25 + [_at(SECOND - 5)] * 5, prefix="mine")
    bulk_units(other, [instant] * 30, prefix="other")
    for limit in (1, 3, 7, 30):
        answers = follow(admin_api, f"batch_id={batch.id}&limit={limit}")
        devices = [u["device_id"] for a in answers for u in a["units"]]
        assert devices == expected_order(batch=batch), limit
        assert all(a["count"] <= limit for a in answers)
        # The last page is the one that says so: none after it, even when it is full.
        assert len(answers) == -(-30 // limit)
    everyone = [u["device_id"] for a in follow(admin_api, "limit=11") for u in a["units"]]
    assert everyone == expected_order() and len(everyone) == 60


def test_a_page_begun_with_before_goes_on_with_its_cursor(admin_api, make_batch):
    batch = make_batch(units=20)
    bulk_units(batch, [_at(SECOND + 9)] * 4 + [_at(SECOND)] * 6 + [_at(SECOND - 9)] * 5)
    first = page(admin_api, f"before={SECOND + 1}&limit=4")
    rest = page(admin_api, f"cursor={first['next_cursor']}&limit=100")
    assert rest["next_cursor"] is None
    devices = [u["device_id"] for u in first["units"] + rest["units"]]
    assert devices == expected_order()[4:]


def test_empty_fleet_has_no_next_cursor(admin_api):
    body = page(admin_api)
    assert (body["units"], body["count"], body["next_cursor"]) == ([], 0, None)


# --- refused -------------------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(cursor: str) -> bytes:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))


def _forged(position: str) -> str:
    """A cursor of ``position`` with a valid MAC (the server's own key): the checks that
    stand behind the MAC."""
    return _b64(position.encode() + selectors._cursor_mac(position.encode()))


def _edited(cursor: str) -> str:
    """The cursor's activation id changed, its MAC kept: a hand-made position."""
    raw = _unb64(cursor)
    position, mac = raw[:-12], raw[-12:]
    moment, record_id = position.split(b":")
    return _b64(moment + b":" + str(int(record_id) - 1).encode() + mac)


BAD_CURSORS = {
    "blank": lambda real: "",
    "words": lambda real: "not-a-cursor",
    "punctuation": lambda real: "!!!!",
    "nul": lambda real: "\x00" + real,
    "too long": lambda real: "A" * 97,
    "padded": lambda real: real + "=",
    "standard base64": lambda real: real.replace("-", "+").replace("_", "/") + "+/",
    "truncated": lambda real: real[:-4],
    "a character changed": lambda real: real[:10] + ("B" if real[10] != "B" else "C") + real[11:],
    "id edited": _edited,
    "unsigned": lambda real: _b64(_unb64(real)[:-12]),
    "no position": lambda real: _forged(""),
    "no id": lambda real: _forged("1772443800250000"),
    "three parts": lambda real: _forged("1772443800250000:5:6"),
    "negative": lambda real: _forged("-1:5"),
    "leading zero": lambda real: _forged("01:5"),
    "id 0": lambda real: _forged("1:0"),
    "space": lambda real: _forged("1: 5"),
    "after 9999": lambda real: _forged(f"{253402300800 * 10**6}:5"),
    "id past bigint": lambda real: _forged(f"1:{2**63}"),
}


@pytest.mark.parametrize("make", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
def test_malformed_or_tampered_cursor_is_400_naming_it(admin_api, make_batch, make):
    bulk_units(make_batch(units=3), [_at(SECOND)] * 3)
    real = page(admin_api, "limit=1")["next_cursor"]
    assert page(admin_api, f"cursor={real}")["count"] == 2
    response = admin_api.get(FLEET, {"cursor": make(real)})
    assert response.status_code == 400, response.content
    assert response.json()["detail"].startswith("cursor: ")


def test_cursor_made_under_another_secret_key_is_400(admin_api, make_batch, settings):
    bulk_units(make_batch(units=3), [_at(SECOND)] * 3)
    cursor = page(admin_api, "limit=1")["next_cursor"]
    settings.SECRET_KEY = "another-" + settings.SECRET_KEY
    response = admin_api.get(FLEET, {"cursor": cursor})
    assert response.status_code == 400
    assert response.json()["detail"].startswith("cursor: ")


def test_cursor_with_before_is_400(admin_api, make_batch):
    bulk_units(make_batch(units=3), [_at(SECOND)] * 3)
    cursor = page(admin_api, "limit=1")["next_cursor"]
    response = admin_api.get(f"{FLEET}?cursor={cursor}&before={SECOND}")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "cursor" in detail and "before" in detail


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "ten", ""])
def test_limit_out_of_bounds_is_400_naming_it(admin_api, limit):
    response = admin_api.get(f"{FLEET}?limit={limit}")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("limit: ")


# --- the index ------------------------------------------------------------------------------


def test_cursor_query_is_served_by_the_recent_first_index(admin_api, provisioned):
    """The query the endpoint runs for a cursor page starts in the index
    activation_recent_first at the cursor and reads it in order: no sort, no scan of the
    units before the cursor. On PostgreSQL the position is the row value
    (activated_at, id) < (t, i) as the index condition."""
    cursor = page(admin_api, "limit=1")["next_cursor"]
    with CaptureQueriesContext(connection) as queries:
        page(admin_api, f"cursor={cursor}&limit=10")
    [sql] = [q["sql"] for q in queries if '"licensing_activation"' in q["sql"]]
    with connection.cursor() as db:
        if connection.vendor == "postgresql":
            # Too few rows for the planner to prefer an index over a sorted scan by
            # cost alone; ask which plan it has when scanning and sorting are off the table.
            db.execute("SET LOCAL enable_seqscan = off")
            db.execute("SET LOCAL enable_sort = off")
            db.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in db.fetchall())
            assert "activation_recent_first" in plan, plan
            assert "Sort" not in plan, plan
            # The index condition of the scan on activation_recent_first (the joined rows,
            # batch, licence, its release, come by their own primary-key lookups).
            lines = plan.splitlines()
            scan = next(n for n, line in enumerate(lines) if "activation_recent_first" in line)
            condition = next(line for line in lines[scan:] if "Index Cond" in line)
            # Columns come qualified by their table when the query joins others.
            row_value = r"ROW\((\w+\.)?activated_at, (\w+\.)?id\) < ROW\("
            assert re.search(row_value, condition.replace('"', "")), plan
        elif connection.vendor == "sqlite":
            db.execute(f"EXPLAIN QUERY PLAN {sql}")
            plan = "\n".join(str(row[-1]) for row in db.fetchall())
            assert "activation_recent_first" in plan, plan
            assert "TEMP B-TREE" not in plan, plan
        else:
            pytest.skip(f"no plan check written for {connection.vendor}")
