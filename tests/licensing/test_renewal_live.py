"""Renewals with real parts (issue 16): a live gunicorn whose clock the test moves
(SVC_TEST_CLOCK_FILE), cameras running the device module on the same moved clock,
batches renewed before their end, in grace and after grace, and the cameras syncing
through the renewal and running past their old ends."""

from __future__ import annotations

import datetime as dt
import time

import pytest

import devices
from billing.limits import start_of_day
from billing.reconciliation import ledger_reconcile
from config import clock as server_clock_module
from tests.conftest import start_gunicorn, stop_gunicorn

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DAY = 86400


class SharedClock:
    """The device's clock: real time plus the offset the server's clock follows."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def moved(server_clock):
    """Move the server's and the cameras' clocks together: ``moved(days)``."""
    shared = SharedClock()

    def move(days: float) -> None:
        shared.offset = days * DAY
        server_clock(days * DAY)

    move.clock = shared
    move.path = server_clock.path
    return move


@pytest.fixture
def service(moved, transactional_db, tmp_path):
    logs = tmp_path / "gunicorn"
    logs.mkdir()
    live = start_gunicorn(logs, SVC_TEST_CLOCK_FILE=str(moved.path))
    try:
        yield live
    finally:
        stop_gunicorn(live)


def _camera(service, batch, name, signing_key, moved, tmp_path):
    state = tmp_path / name
    devices.activate(service.url, batch["batch_token"], state, device_id=name, allow_http=True)
    key = devices.token.public_key_b64url(signing_key.public_key())
    engine = devices.Engine(state, public_key=key, device_id=name, clock=moved.clock)
    assert engine.start() == "active"
    return engine


def _works(engine) -> None:
    engine.require("detect")
    engine.count(inferences=10)


def test_cameras_sync_through_renewals_and_run_past_their_old_ends(
    service, customer, signing_key, moved, tmp_path
):
    def batch(units):
        return service.admin(
            "POST",
            "/v1/admin/batches",
            {"customer_id": customer.id, "sku": "DETECT-STD", "units": units, "term_days": 30},
        )

    early, late, lapsed = batch(3), batch(2), batch(2)  # end at day 30, grace to day 44
    a1, a2 = (_camera(service, early, n, signing_key, moved, tmp_path) for n in ("a1", "a2"))
    b1 = _camera(service, late, "b1", signing_key, moved, tmp_path)
    c1 = _camera(service, lapsed, "c1", signing_key, moved, tmp_path)
    for engine in (a1, a2, b1, c1):
        _works(engine)
        assert engine.sync(service.url, allow_http=True)["license"] == "current"
    old_end = early["expires_at"]

    # Day 25: the early batch is renewed before its end, from that end.
    moved(25)
    renewal = service.admin(
        "POST", "/v1/admin/renew", {"batch_id": early["batch_id"], "idempotency_key": "early"}
    )
    assert renewal["basis"] == "before_expiry" and renewal["units"] == 2
    assert renewal["expires_at"] == old_end + 365 * DAY  # the SKU's term
    for engine in (a1, a2):
        assert engine.sync(service.url, allow_http=True)["license"] == "renewed"
        assert engine.claims["exp"] == renewal["expires_at"]

    # Day 35: the late batch ended 5 days ago; its camera, offline since day 0, is in
    # grace. Renewed in grace (from the old end); the camera recovers on its first sync.
    moved(35)
    _works(b1)
    assert b1.state == "SVC_LIC_GRACE"
    renewal = service.admin(
        "POST",
        "/v1/admin/renew",
        {"batch_id": late["batch_id"], "idempotency_key": "late", "term_days": 30},
    )
    assert renewal["basis"] == "in_grace"
    assert renewal["expires_at"] == late["expires_at"] + 30 * DAY
    summary = b1.sync(service.url, allow_http=True)
    assert summary["license"] == "renewed" and summary["accepted"] >= 1
    assert b1.state == "active"

    # Day 50: past every old end and grace. The lapsed batch's camera has stopped its
    # analytics; renewed after grace (from now), it runs again after one sync.
    moved(50)
    with pytest.raises(devices.Expired):
        c1.require("detect")
    renewal = service.admin(
        "POST",
        "/v1/admin/renew",
        {"batch_id": lapsed["batch_id"], "idempotency_key": "lapsed", "term_days": 30},
    )
    assert renewal["basis"] == "after_grace"
    assert renewal["expires_at"] == renewal["renewed_at"] + 30 * DAY
    assert c1.sync(service.url, allow_http=True)["license"] == "renewed"
    for engine in (a1, a2, b1, c1):
        _works(engine)
        assert engine.state == "active"
        moved(50 + 1 / 24)  # the next hour: the period closes and is uploaded
        summary = engine.sync(service.url, allow_http=True)
        assert summary["pending"] == 0 and summary["license"] == "current"
        moved(50)

    # A retried renewal renews nothing more; a camera re-activating gets its licence.
    again = service.admin(
        "POST", "/v1/admin/renew", {"batch_id": early["batch_id"], "idempotency_key": "early"}
    )
    assert again["replayed"] is True and again["expires_at"] == old_end + 365 * DAY
    token = devices.activate(
        service.url, early["batch_token"], tmp_path / "a1-again", device_id="a1", allow_http=True
    )
    assert devices.token.decode_unverified(token)["exp"] == old_end + 365 * DAY
    assert server_clock_module.offset_seconds() == 50 * DAY

    # Billed once, each in the period that contains it, on the live server's invoices:
    # days -29..1 (the activations), 1..36 (two renewals), 36..51 (the third).
    midnight = start_of_day(dt.datetime.fromtimestamp(early["expires_at"] - 30 * DAY, dt.UTC))

    def issue(days: int) -> dict:
        end = int((midnight + dt.timedelta(days=days)).timestamp())
        return service.admin(
            "POST",
            "/v1/admin/invoices",
            {"customer_id": customer.id, "period_days": 30, "period_end": end},
        )

    moved(52)  # day 51 is over
    invoices = [issue(1), issue(36), issue(51)]
    renewed = [
        [
            (line["batch_id"], line["quantity"])
            for line in invoice["lines"]
            if line["kind"] == "renewal"
        ]
        for invoice in invoices
    ]
    assert renewed == [
        [],
        sorted([(early["batch_id"], 2), (late["batch_id"], 1)]),
        [(lapsed["batch_id"], 1)],
    ]
    assert ledger_reconcile(customer_id=customer.id).ok
