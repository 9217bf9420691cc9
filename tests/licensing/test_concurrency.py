"""Seat accounting under real concurrency: threads against a gunicorn server
(3 processes x 4 threads) on the test database, SQLite or PostgreSQL."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from licensing.models import Activation, Batch, License

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def _race(live_service, bodies: list[dict]) -> list[tuple[int, dict]]:
    """Send every body at once: all threads wait on a barrier, then fire."""
    start = threading.Barrier(len(bodies))

    def fire(body):
        start.wait(timeout=30)
        return _post(f"{live_service.url}/v1/activate", body)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(fire, bodies))


def test_40_new_devices_on_a_10_unit_batch_get_exactly_10_seats(live_service, make_batch):
    batch = make_batch(units=10)
    token = batch.license.token
    results = _race(
        live_service, [{"batch_token": token, "device_id": f"cam-{n}"} for n in range(40)]
    )
    statuses = Counter(status for status, _ in results)
    assert statuses == {200: 10, 402: 30}, results
    assert all("10 of 10 units activated" in body["detail"] for s, body in results if s == 402)
    batch.refresh_from_db()
    assert batch.units_activated == 10
    assert Activation.objects.filter(batch=batch).count() == 10
    assert License.objects.filter(batch=batch).count() == 10
    remaining = sorted(body["batch_units_remaining"] for s, body in results if s == 200)
    assert remaining[0] == 0 and len(set(remaining)) == 10


def test_12_concurrent_requests_for_one_device_consume_one_unit(live_service, make_batch):
    batch = make_batch(units=5)
    body = {"batch_token": batch.license.token, "device_id": "cam-same"}
    results = _race(live_service, [body] * 12)
    assert [status for status, _ in results] == [200] * 12, results
    assert len({b["license_id"] for _, b in results}) == 1
    assert len({b["unit_token"] for _, b in results}) == 1
    assert sum(1 for _, b in results if not b["reactivated"]) == 1
    batch.refresh_from_db()
    assert batch.units_activated == 1
    assert License.objects.filter(batch=batch).count() == 1


def test_check_constraint_refuses_overselling_even_without_the_service(make_batch):
    from django.db import IntegrityError, transaction

    batch = make_batch(units=2)
    with pytest.raises(IntegrityError), transaction.atomic():
        Batch.objects.filter(pk=batch.pk).update(units_activated=3)


def test_racing_replacements_take_each_released_seat_exactly_once(live_service, make_batch):
    """A full 40-unit batch releases two seats (the default policy: 5 % of 40); twelve
    new cameras race for them: two get a seat, each a transfer of a different release,
    and nothing is oversold or billed again."""
    batch = make_batch(units=40)
    token = batch.license.token
    for n in range(40):
        assert (
            _post(
                f"{live_service.url}/v1/activate", {"batch_token": token, "device_id": f"old-{n}"}
            )[0]
            == 200
        )
    for n in (1, 2):
        dead = Activation.objects.get(batch=batch, device_id=f"old-{n}").license_id
        live_service.admin(
            "POST", "/v1/admin/seats/release", {"license_id": dead, "reason": "dead"}
        )

    results = _race(
        live_service, [{"batch_token": token, "device_id": f"new-{n}"} for n in range(12)]
    )

    assert Counter(status for status, _ in results) == {200: 2, 402: 10}, results
    batch.refresh_from_db()
    assert (batch.units_activated, batch.released_seats) == (40, 0)
    transfers = Activation.objects.filter(batch=batch, transfer_of__isnull=False)
    assert transfers.count() == 2
    assert len({t.transfer_of_id for t in transfers}) == 2


def test_one_device_racing_for_two_trials_of_a_sku_gets_one(live_service, customer):
    """Issue 42: 12 concurrent activations of one camera, 6 on each of two trial batches
    of one SKU: one trial, re-activations on its batch, TRIAL_USED on the other; one seat
    taken in all (the TrialUse row's unique key decides a race the check before it lost)."""
    from licensing.models import TrialUse
    from licensing.services import batch_issue

    first, second = (
        batch_issue(customer_id=customer.id, sku="VISION-PRO", units=5, trial_days=14)
        for _ in range(2)
    )
    bodies = [
        {"batch_token": batch.license.token, "device_id": "cam-greedy"}
        for batch in (first, second)
        for _ in range(6)
    ]
    results = _race(live_service, bodies)
    (use,) = TrialUse.objects.filter(device_id="cam-greedy")
    won, lost = (first, second) if use.batch_id == first.id else (second, first)
    on = {True: [], False: []}
    for body, (status, answer) in zip(bodies, results, strict=True):
        on[body["batch_token"] == won.license.token].append((status, answer))
    assert [status for status, _ in on[True]] == [200] * 6, on[True]
    assert sum(1 for _, answer in on[True] if not answer["reactivated"]) == 1
    assert [(status, answer.get("code")) for status, answer in on[False]] == [
        (409, "TRIAL_USED")
    ] * 6, on[False]
    for batch, taken in ((won, 1), (lost, 0)):
        batch.refresh_from_db()
        assert batch.units_activated == taken
        assert Activation.objects.filter(batch=batch).count() == taken
