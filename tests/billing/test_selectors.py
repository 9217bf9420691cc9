"""Dashboard reads from the daily rollups (billing.selectors)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from billing import selectors
from tests.billing.conftest import record
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db


def midnight(days_ago: int) -> int:
    today = timezone.now().astimezone(dt.UTC).date() - dt.timedelta(days=days_ago)
    return int(dt.datetime(today.year, today.month, today.day, tzinfo=dt.UTC).timestamp())


@pytest.fixture
def usage(customer, make_batch, activate, upload):
    big = CustomerFactory(name="Big")
    # Activated 50 days ago: every record lies within its licence's life (contract §7).
    since = timezone.now() - dt.timedelta(days=50)
    mine = activate(make_batch(units=2), "cam-a", at=since)
    theirs = activate(make_batch(units=2, owner=big), "cam-b", at=since)
    # Today's record ends a minute after midnight: never in the future, whatever the hour.
    today = record(midnight(0), length=60, inferences=10)
    assert upload(mine, [today, record(midnight(2) + 60, inferences=5)]).json()["accepted"] == 2
    answer = upload(
        theirs, [record(midnight(2), inferences=100), record(midnight(40), inferences=9999)]
    )
    assert answer.json()["accepted"] == 2
    return customer, big


def test_inferences_per_day_fills_every_day_oldest_first(usage):
    days = selectors.inferences_per_day(days=3)
    today = timezone.now().astimezone(dt.UTC).date()
    assert days == [(today - dt.timedelta(days=2), 105), (today - dt.timedelta(days=1), 0),
                    (today, 10)]  # fmt: skip
    assert len(selectors.inferences_per_day()) == 30


def test_top_customers_by_usage(usage):
    customer, big = usage
    assert selectors.top_customers_by_usage(days=30) == [
        (big.id, "Big", 100),
        (customer.id, customer.name, 15),
    ]
    assert selectors.top_customers_by_usage(days=30, limit=1) == [(big.id, "Big", 100)]
    assert selectors.top_customers_by_usage(days=60)[0] == (big.id, "Big", 10_099)
