"""Add-on lines of issued invoices against an oracle written here from docs/finance.md
("Add-ons"), not from the service's code (issue 42 item 4): hypothesis draws the SKU's
currency (JPY, EUR, KWD, USD: 0, 2 and 3 decimals) and term (30, 90 or 365 days, or
perpetual), the add-on's unit price (up to four decimals) and three months of a
customer's batch and direct licence: cameras activated and synced at window edges and
inside, the add-on added to and removed from the batch and the licence (and added
again), renewals, seats released and taken by a spare camera, and credit notes. Month
after month on the moved server clock every issued invoice's add-on lines must be the
oracle's, line for line; no add-on amount is negative; ``reconcile --deep`` passes.

The oracle's rule, in the guide's words: a licence is charged for an add-on when a token
carrying it is signed (its activation, or the sync that fetches a licence re-signed
after the add-on was added or the batch renewed) for the time from then, or from where
the time already paid for it ends, to the token's end: whole days, a started day
counted whole, or 1 once for a perpetual licence. A spare that took a released seat
carries on what was paid for the camera it replaces. One line per grant and invoice:
quantity = the days over the term, three decimals half-up; amount = quantity x the price,
half-up to the currency's minor unit. Removal charges nothing. Derandomized."""

from __future__ import annotations

import datetime as dt
import itertools
import math
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.issuing import NothingToInvoice, invoice_issue
from billing.models import Invoice
from billing.reconciliation import ledger_reconcile
from billing.services import credit_note_issue
from config.errors import Conflict, ServiceError
from licensing.models import AddOn, License, Sku
from licensing.services import (
    addon_add,
    addon_remove,
    batch_issue,
    license_issue,
    license_renew,
    seat_release,
)
from licensing.services.activation import unit_activate
from licensing.services.renewals import license_refresh
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db

CURRENCIES = {"JPY": 0, "EUR": 2, "KWD": 3, "USD": 2}  # the oracle's own ISO 4217 table
MONTHS = [dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2, 3, 4)]
MOMENTS = [
    dt.timedelta(seconds=1),
    dt.timedelta(days=3, hours=7, minutes=30),
    dt.timedelta(days=9, hours=12),
    dt.timedelta(days=20),
    dt.timedelta(days=27, hours=23, minutes=59, seconds=59),
]
SECONDS_A_DAY = 86400
FOREVER = "forever"
COMPARED = {"invoices": 0, "addon_lines": 0, "charges": 0, "perpetual": 0}


def money(value: Decimal, currency: str) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-CURRENCIES[currency]), rounding=ROUND_HALF_UP)


def days_from(start: dt.datetime, end: dt.datetime) -> int:
    """Whole days from ``start`` to ``end``, a started day counted whole."""
    return max(0, math.ceil((end - start).total_seconds() / SECONDS_A_DAY))


@dataclass
class Grant:
    key: str  # "batch" or "direct", and a number
    target: str  # "batch" or "direct"
    price: Decimal
    term: int  # 0: once
    active: bool = True


@dataclass
class Charge:
    grant: Grant
    at: dt.datetime
    quantity: int
    billed: str = ""


@dataclass
class Unit:
    device: str
    license_id: str
    end: dt.datetime | None
    version: int
    paid: dict[str, object] = field(default_factory=dict)  # add-on -> end paid, or FOREVER
    released: bool = False


@dataclass
class Oracle:
    currency: str
    price: Decimal
    term: int  # the SKU's: 0 perpetual
    batch_end: dt.datetime | None = None
    direct_end: dt.datetime | None = None
    version: int = 0
    grants: dict[str, Grant | None] = field(default_factory=lambda: {"batch": None, "direct": None})
    units: list[Unit] = field(default_factory=list)
    direct_paid: dict[str, object] = field(default_factory=dict)
    spare_seats: list[Unit] = field(default_factory=list)  # released, not yet taken
    charges: list[Charge] = field(default_factory=list)
    numbers: itertools.count = field(default_factory=lambda: itertools.count(1))

    def charge(self, grant: Grant, paid: dict, at: dt.datetime, end: dt.datetime | None) -> None:
        """A token carrying ``grant`` signed at ``at`` to ``end``: the time not yet paid."""
        held = paid.get("anpr")
        if held == FOREVER:
            return
        if grant.term == 0 or end is None:
            if held is not None:
                return
            self.charges.append(Charge(grant, at, 1))
            paid["anpr"] = FOREVER
            return
        start = max(at, held) if held is not None else at
        days = days_from(start, end)
        if days:
            self.charges.append(Charge(grant, at, days))
            paid["anpr"] = max(end, held) if held is not None else end

    def lines(self, number: str, end: dt.datetime) -> list[tuple]:
        due = [c for c in self.charges if not c.billed and c.at < end]
        by_grant: dict[str, list[Charge]] = defaultdict(list)
        for c in due:
            c.billed = number
            by_grant[c.grant.key].append(c)
        lines = []
        for charges in by_grant.values():
            grant = charges[0].grant
            total = sum(c.quantity for c in charges)
            if grant.term:
                quantity = (Decimal(total) / grant.term).quantize(
                    Decimal("0.001"), rounding=ROUND_HALF_UP
                )
            else:
                quantity = Decimal(total)
            lines.append((grant.target, quantity, grant.price, money(quantity * grant.price,
                                                                       self.currency)))  # fmt: skip
        return sorted(lines)

    def credit(self, number: str) -> None:
        for c in self.charges:
            if c.billed == number:
                c.billed = ""


def install(currency: str, term: int, price: Decimal) -> None:
    sku = Sku.objects.get(pk="VISION-PRO")
    sku.currency, sku.term_days = currency, term
    sku.save()
    AddOn.objects.filter(sku=sku, code="anpr").update(unit_price=price)


def price(decimals: int) -> st.SearchStrategy[Decimal]:
    return st.integers(1, 200 * 10**decimals).map(lambda n: Decimal(n).scaleb(-decimals))


steps = st.lists(
    st.tuples(
        st.sampled_from(range(len(MOMENTS))),
        st.one_of(
            st.tuples(st.just("activate")),
            st.tuples(st.just("sync"), st.integers(0, 6)),
            st.tuples(st.just("add"), st.sampled_from(["batch", "direct"])),
            st.tuples(st.just("remove"), st.sampled_from(["batch", "direct"])),
            st.tuples(st.just("renew"), st.sampled_from(["batch", "direct"])),
            st.tuples(st.just("release"), st.integers(0, 6)),
        ),
    ),
    max_size=10,
)
scenario = st.tuples(
    st.sampled_from(sorted(CURRENCIES)),
    st.sampled_from([30, 90, 365, 0]),
    st.integers(0, 4).flatmap(price),
    st.lists(steps, min_size=3, max_size=3),
    st.lists(st.booleans(), min_size=3, max_size=3),
)


@pytest.fixture(scope="module")
def compared():
    yield COMPARED
    print(
        f"\naddon oracle: {COMPARED['addon_lines']} add-on lines of {COMPARED['charges']} "
        f"charges on {COMPARED['invoices']} invoices ({COMPARED['perpetual']} perpetual "
        "examples)"
    )


@settings(
    max_examples=int(os.environ.get("ADDON_ORACLE_EXAMPLES", "40")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario)
def test_issued_add_on_lines_match_the_oracle(server_clock, compared, scenario):
    currency, term, unit_price, months, credits = scenario
    # A start that always has something to bill: the add-on on both, a camera activated.
    start = [(0, ("add", "batch")), (0, ("add", "direct")), (1, ("activate",))]
    months = [start + months[0], *months[1:]]
    with transaction.atomic():
        try:
            install(currency, term, unit_price)
            run(server_clock, Oracle(currency, unit_price, term), months, credits)
        finally:
            server_clock(0)
            transaction.set_rollback(True)


def run(server_clock, oracle: Oracle, months, credits) -> None:  # noqa: C901 - one scenario, step by step
    def at(moment: dt.datetime) -> None:
        server_clock(moment.timestamp() - time.time())

    customer = CustomerFactory()
    at(MONTHS[0] + dt.timedelta(seconds=1))
    batch = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=4)
    direct = license_issue(customer_id=customer.id, sku="VISION-PRO", device_id="cam-direct")
    oracle.batch_end, oracle.direct_end = batch.expires_at, direct.expires_at
    COMPARED["perpetual"] += oracle.term == 0
    for m, events in enumerate(months):
        for moment_index, step in sorted(events, key=lambda e: e[0]):
            now = MONTHS[m] + MOMENTS[moment_index]
            at(now)
            kind = step[0]
            if kind == "add":
                target = step[1]
                end = oracle.batch_end if target == "batch" else oracle.direct_end
                ids = {"batch_id": batch.id} if target == "batch" else {"license_id": direct.id}
                held = oracle.grants[target]
                if end is not None and end <= now and (held is None or not held.active):
                    with pytest.raises(Conflict, match="renew it first"):
                        addon_add(addon="anpr", **ids)
                    continue
                change = addon_add(addon="anpr", **ids)
                assert change.changed == (held is None or not held.active)
                if not change.changed:
                    continue
                grant = Grant(
                    f"{target}-{next(oracle.numbers)}",
                    target,
                    oracle.price,
                    oracle.term if end is not None else 0,
                )
                assert change.grant.term_days == grant.term
                oracle.grants[target] = grant
                if target == "batch":
                    oracle.version += 1
                else:  # re-signed at once
                    oracle.charge(grant, oracle.direct_paid, now, oracle.direct_end)
            elif kind == "remove":
                target = step[1]
                ids = {"batch_id": batch.id} if target == "batch" else {"license_id": direct.id}
                held = oracle.grants[target]
                if held is None:
                    continue
                change = addon_remove(addon="anpr", **ids)
                assert change.changed == held.active
                if held.active:
                    held.active = False
                    if target == "batch":
                        oracle.version += 1
            elif kind == "activate":
                device = f"cam-{len(oracle.units)}"
                try:
                    result = unit_activate(batch_token=batch.license.token, device_id=device)
                except ServiceError:
                    continue  # the batch ended or every seat is taken
                unit = Unit(device, result.license_id, oracle.batch_end, oracle.version)
                if oracle.spare_seats:  # a transfer: what its predecessor was paid for
                    unit.paid = dict(oracle.spare_seats.pop(0).paid)
                oracle.units.append(unit)
                grant = oracle.grants["batch"]
                if grant is not None and grant.active:
                    oracle.charge(grant, unit.paid, now, unit.end)
            elif kind == "sync" and oracle.units:
                unit = oracle.units[step[1] % len(oracle.units)]
                if unit.released:
                    continue
                lic = License.objects.get(pk=unit.license_id)
                license_refresh(token=lic.token, device_id=unit.device)
                extends = oracle.batch_end is not None and (
                    unit.end is None or unit.end < oracle.batch_end
                )
                if unit.version == oracle.version and not extends:
                    continue
                if extends:
                    unit.end = oracle.batch_end
                unit.version = oracle.version
                grant = oracle.grants["batch"]
                if grant is not None and grant.active:
                    oracle.charge(grant, unit.paid, now, unit.end)
            elif kind == "renew":
                target = step[1]
                ids = {"batch_id": batch.id} if target == "batch" else {"license_id": direct.id}
                try:
                    renewal = license_renew(
                        idempotency_key=f"renewal-{next(oracle.numbers)}", **ids
                    ).renewal
                except ServiceError as refused:
                    # A perpetual licence has nothing to renew; one renewed in its grace
                    # runs from its old end, which a term may not reach past now.
                    assert oracle.term == 0 or "grace period" in str(refused), refused
                    continue
                if target == "batch":
                    oracle.batch_end = renewal.expires_at
                else:
                    oracle.direct_end = renewal.expires_at
                    grant = oracle.grants["direct"]
                    if grant is not None and grant.active:
                        oracle.charge(grant, oracle.direct_paid, now, oracle.direct_end)
            elif kind == "release" and oracle.units:
                unit = oracle.units[step[1] % len(oracle.units)]
                if unit.released:
                    continue
                try:
                    seat_release(license_id=unit.license_id, reason="broken")
                except ServiceError:
                    continue  # the batch's release policy is spent for now
                unit.released = True
                oracle.spare_seats.append(unit)
        end = MONTHS[m + 1]
        at(end + dt.timedelta(hours=1))
        issue(oracle, customer, end, credit=credits[m])
    result = ledger_reconcile(customer_id=customer.id, deep=True)
    assert result.ok, result.problems


def _stored(invoice: Invoice) -> list[tuple]:
    return sorted(
        ("batch" if line.batch_id else "direct", line.quantity, line.unit_price, line.amount)
        for line in invoice.lines.filter(kind="addon")
    )


def issue(oracle: Oracle, customer, end: dt.datetime, *, credit: bool) -> None:
    expected = oracle.lines("next", end)
    try:
        invoice = invoice_issue(customer_id=customer.id, period_days=31, end=end)
    except NothingToInvoice:
        assert sum(line[3] for line in expected) == 0, expected
        oracle.credit("next")  # rolled back: still waiting
        return
    for c in oracle.charges:
        if c.billed == "next":
            c.billed = invoice.number
    assert _stored(invoice) == expected
    assert all(line.amount >= 0 for line in invoice.lines.all())
    COMPARED["invoices"] += 1
    COMPARED["addon_lines"] += len(expected)
    COMPARED["charges"] += sum(1 for c in oracle.charges if c.billed == invoice.number)
    if credit:
        credit_note_issue(number=invoice.number, reason="oracle")
        oracle.credit(invoice.number)
