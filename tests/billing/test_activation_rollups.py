"""Daily activation rollups (issue 15): kept by database triggers with every activation
written, moved or deleted, transfers apart; rating reads them for whole days and the
activation rows for the partial days at a window's edges, and equals a count of the
rows to the second, also while activations and revocations commit around it."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter

import pytest
from django.db import connection, connections
from django.db.models import Q

from billing import selectors
from billing.rating import invoice_rate
from licensing.models import Activation, ActivationDaily, License
from licensing.services import license_revoke
from licensing.services.activation import unit_activate
from licensing.services.seats import seat_release
from tests.history import rewritten

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 3, 31, 15, 20, 7, 250_000, tzinfo=dt.UTC)


def rollups() -> dict[tuple[str, dt.date], tuple[int, int]]:
    return {
        (row.batch_id, row.day): (row.activations, row.transfers)
        for row in ActivationDaily.objects.all()
        if row.activations or row.transfers
    }


def counted() -> dict[tuple[str, dt.date], tuple[int, int]]:
    found: Counter = Counter()
    for batch_id, at, transfer in Activation.objects.values_list(
        "batch_id", "activated_at", "transfer_of"
    ):
        found[(batch_id, at.astimezone(dt.UTC).date(), transfer is not None)] += 1
    keys = {(b, d) for b, d, _ in found}
    return {(b, d): (found[(b, d, False)], found[(b, d, True)]) for b, d in keys}


def test_rollups_follow_activations_transfers_moves_and_deletes(make_batch, activate):
    batch = make_batch(units=10)
    units = [activate(batch, f"cam-{n}") for n in range(3)]
    today = Activation.objects.first().activated_at.date()
    assert rollups() == {(batch.id, today): (3, 0)}
    # A released seat taken again: a transfer, counted apart.
    seat_release(license_id=units[0].id, reason="camera replaced")
    activate(batch, "cam-replacement")
    assert rollups() == {(batch.id, today): (3, 1)} == counted()
    # Moved to another day (as tests and repairs do): the count moves with it.
    activate(batch, "cam-old", at=dt.datetime(2026, 1, 5, 23, 59, 59, tzinfo=dt.UTC))
    assert (
        rollups()
        == counted()
        == {
            (batch.id, today): (3, 1),
            (batch.id, dt.date(2026, 1, 5)): (1, 0),
        }
    )
    with rewritten():  # a repair: PostgreSQL refuses it otherwise (billing migration 0009)
        Activation.objects.filter(device_id="cam-old").delete()
    assert rollups() == counted() == {(batch.id, today): (3, 1)}


def naive_units(customer_id: str, start: dt.datetime, end: dt.datetime) -> dict[str, int]:
    """Billable activations per batch in [start, end), counted row by row."""
    found = Counter(
        Activation.objects.filter(
            batch__customer_id=customer_id,
            activated_at__gte=start,
            activated_at__lt=end,
            transfer_of__isnull=True,
        ).values_list("batch_id", flat=True)
    )
    return dict(found)


def naive_allowance_units(customer_id: str, start: dt.datetime, end: dt.datetime):
    """Contract §6.3's N per SKU, as the row-by-row query had it before the rollups."""
    rows = (
        License.objects.filter(customer_id=customer_id, kind__in=["unit", "direct"])
        .exclude(device_id="*")
        .filter(
            Q(kind="unit", activation_record__activated_at__lt=end)
            | Q(kind="direct", issued_at__lt=end)
        )
        .filter(Q(revoked_at__isnull=True) | Q(revoked_at__gte=start))
        .values_list("sku", flat=True)
    )
    return dict(Counter(rows))


def rated_units(customer_id: str, now: dt.datetime) -> dict[str, int]:
    rated = invoice_rate(customer_id=customer_id, period_days=30, now=now)
    return {
        line["batch_id"]: line["quantity"]
        for line in rated["lines"]
        if line["kind"] == "unit_activation"
    }


def test_rating_counts_activations_exactly_to_the_second(customer, make_batch, activate, direct):
    """Activations on either side of the window's edges, at midnights inside it, on
    whole days and partial ones; transfers and another customer's units left out."""
    end = NOW.replace(microsecond=0) + dt.timedelta(seconds=1)  # the whole second after now
    start = end - dt.timedelta(days=30)
    second = dt.timedelta(seconds=1)
    moments = [
        start - second, start, start + second,  # the first partial day
        start.replace(hour=0, minute=0, second=0) + dt.timedelta(days=1),  # its midnight
        start + dt.timedelta(days=3),  # whole days
        start + dt.timedelta(days=3, hours=1),
        NOW.replace(hour=0, minute=0, second=0) - second,  # the last whole day's end
        NOW.replace(hour=0, minute=0, second=0),  # today's midnight
        NOW - second, NOW, end,  # the last partial day, and the end itself (out)
        end + dt.timedelta(days=2),  # after the window
    ]  # fmt: skip
    first, second_batch = make_batch(units=40), make_batch(units=40, sku="DETECT-STD")
    for n, at in enumerate(moments):
        activate(first if n % 2 else second_batch, f"cam-{n}", at=at)
    # A transfer inside the window: not billed, but a unit for the allowance.
    released = activate(first, "cam-dead", at=start + dt.timedelta(days=2))
    seat_release(license_id=released.id, reason="camera replaced")
    activate(first, "cam-transfer", at=start + dt.timedelta(days=4))
    direct("DETECT-STD", "cam-direct", at=start + dt.timedelta(days=1))
    assert rollups() == counted()

    expected = naive_units(customer.id, start, end)
    assert rated_units(customer.id, NOW) == expected
    assert sum(expected.values()) == 10  # the 9 moments from start to NOW, and cam-dead
    for days_before in (0, 1, 29, 30, 31):  # windows ending elsewhere
        moment = NOW - dt.timedelta(days=days_before, hours=7)
        edge_end = moment.replace(microsecond=0) + second
        assert rated_units(customer.id, moment) == naive_units(
            customer.id, edge_end - dt.timedelta(days=30), edge_end
        )


def test_allowance_units_equal_the_row_by_row_count(
    customer, make_batch, activate, direct, server_clock
):
    end = NOW.replace(microsecond=0) + dt.timedelta(seconds=1)
    start = end - dt.timedelta(days=30)
    batch = make_batch(units=20, sku="API-METERED")
    for n, days in enumerate([-60, -40, -31, -29, -10, -1]):
        activate(batch, f"cam-{n}", at=NOW + dt.timedelta(days=days))
    for n, days in enumerate([-45, -5]):
        direct("API-METERED", f"direct-{n}", at=NOW + dt.timedelta(days=days))
    direct("API-METERED", "*", at=NOW - dt.timedelta(days=3), activation="required")
    # Revoked before the window (left out), inside it (counted), a direct one before it.
    for device, days in (("cam-0", -50), ("cam-4", -3), ("direct-0", -35)):
        with server_clock.at(NOW + dt.timedelta(days=days)):
            license_revoke(license_id=License.objects.get(device_id=device).id, reason="test")
    got = selectors.billable_units_by_sku(customer_id=customer.id, start=start, end=end)
    assert got == naive_allowance_units(customer.id, start, end) == {"API-METERED": 6}


@pytest.mark.skipif(
    "connection.vendor != 'postgresql'", reason="concurrent transactions: PostgreSQL"
)
@pytest.mark.django_db(transaction=True)
def test_rating_stays_exact_while_activations_and_revocations_commit(customer, make_batch):
    """Four threads activate and revoke on two batches while a fifth rates the invoice
    again and again; each rating equals a row-by-row count read in the same snapshot,
    and at the end the rollups equal the activations."""
    batches = [make_batch(units=400), make_batch(units=400, sku="DETECT-STD")]
    stop = threading.Event()
    errors: list[BaseException] = []

    def activate_and_revoke(worker: int) -> None:
        try:
            batch = batches[worker % 2]
            for n in range(60):
                result = unit_activate(
                    batch_token=batch.license.token, device_id=f"cam-{worker}-{n}"
                )
                if n % 4 == 0:
                    license_revoke(license_id=result.license_id, reason="concurrency test")
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    ratings = []

    def rate() -> None:
        try:
            while not stop.is_set():
                with selectors.one_snapshot():
                    now = dt.datetime.now(dt.UTC)
                    end = now.replace(microsecond=0) + dt.timedelta(seconds=1)
                    start = end - dt.timedelta(days=30)
                    got = rated_units(customer.id, now)
                    units = selectors.billable_units_by_sku(
                        customer_id=customer.id, start=start, end=end
                    )
                    expected = naive_units(customer.id, start, end)
                    expected_units = naive_allowance_units(customer.id, start, end)
                assert got == expected, (got, expected)
                assert units == expected_units, (units, expected_units)
                ratings.append(sum(got.values()))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    rater = threading.Thread(target=rate)
    workers = [threading.Thread(target=activate_and_revoke, args=(w,)) for w in range(4)]
    rater.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stop.set()
    rater.join()
    assert not errors, errors
    assert len(ratings) > 3 and ratings[-1] <= 240
    assert rollups() == counted()
    assert sum(rated_units(customer.id, dt.datetime.now(dt.UTC)).values()) == 240
    assert connection.vendor == "postgresql"
