"""Issued invoices against a small oracle written here from contract §6, not from the
rating code (issues 23 and 38): hypothesis draws a catalogue (each SKU's currency among
JPY, EUR, KWD and USD, so 0, 2 and 3 decimals, and unit prices and prices per 1000
inferences with up to the four decimals prices are quoted with) and a customer's three
months (batches of every SKU, so several currencies at once, direct licenses,
activations on window edges, revocations, usage on time and late, renewals, credit
notes), issues month after month in every currency on the moved server clock, and every
invoice must be the oracle's, line for line and total; ``reconcile --deep`` must pass.
Derandomized: CI runs the same examples every time."""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.ingestion import usage_ingest
from billing.issuing import NothingToInvoice, invoice_issue
from billing.models import Invoice
from billing.reconciliation import ledger_reconcile
from billing.services import credit_note_issue
from config.errors import ServiceError
from licensing.models import License, Sku
from licensing.services import batch_issue, license_issue, license_revoke
from licensing.services.activation import unit_activate
from licensing.services.renewals import license_renew
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db

# The oracle's own table of ISO 4217 minor units (contract §6), not the service's.
CURRENCIES = {"JPY": 0, "EUR": 2, "KWD": 3, "USD": 2}
# The seeded catalogue's codes; each example draws their prices, currency and allowance.
SKU_CODES = ("API-METERED", "ANPR-PERPETUAL", "DETECT-STD", "VISION-PRO")
VOLUME_TIER = 50  # a batch of at least this many units is priced at the second tier
OVERAGE_TIER = 1_000_000  # overage inferences from here on are priced at the second tier
COMPARED = {"invoices": 0, "lines": 0, "currencies": set(), "mixed": 0}

SKUS = sorted(SKU_CODES)
MONTHS = [dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2, 3, 4)]
# Moments in a month: window edges (first and last second) and inside.
MOMENTS = [dt.timedelta(seconds=1), dt.timedelta(days=27, hours=23, minutes=59, seconds=59),
           dt.timedelta(days=9, hours=12)]  # fmt: skip


def money(value: Decimal, currency: str) -> Decimal:
    """Half-up to the currency's minor unit."""
    return value.quantize(Decimal(1).scaleb(-CURRENCIES[currency]), rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class Entry:
    """A drawn catalogue entry: what the oracle prices with."""

    currency: str
    allowance: int
    unit_prices: tuple[Decimal, Decimal]  # from 1 unit, from VOLUME_TIER units
    per_1000: tuple[Decimal, Decimal]  # from 0 overage inferences, from OVERAGE_TIER

    def unit_price(self, units: int) -> Decimal:
        return self.unit_prices[1 if units >= VOLUME_TIER else 0]

    @property
    def tiers(self) -> list[tuple[int, Decimal]]:
        return [(0, self.per_1000[0]), (OVERAGE_TIER, self.per_1000[1])]


def price(decimals: int, scale: int) -> st.SearchStrategy[Decimal]:
    """A price with exactly ``decimals`` decimals at most (trailing zeros allowed)."""
    return st.integers(1, scale * 10**decimals).map(lambda n: Decimal(n).scaleb(-decimals))


prices = st.integers(0, 4).flatmap(lambda d: price(d, 200))
entries = st.builds(
    Entry,
    currency=st.sampled_from(sorted(CURRENCIES)),
    allowance=st.sampled_from([0, 10_000, 50_000]),
    unit_prices=st.tuples(prices, prices),
    per_1000=st.tuples(prices, prices),
)
catalogues = st.tuples(*(entries for _ in SKU_CODES)).map(
    lambda drawn: dict(zip(SKU_CODES, drawn, strict=True))
)


def install(catalogue: dict[str, Entry]) -> None:
    """The drawn entries in the service's catalogue (the example's transaction)."""
    for code, entry in catalogue.items():
        row = Sku.objects.get(pk=code)
        row.currency, row.allowance_per_unit = entry.currency, entry.allowance
        row.unit_price_tiers = [{"from_units": 1, "unit_price": str(entry.unit_prices[0])},
                                {"from_units": VOLUME_TIER,
                                 "unit_price": str(entry.unit_prices[1])}]  # fmt: skip
        row.overage_tiers = [{"from_inferences": 0, "price_per_1000": str(entry.per_1000[0])},
                             {"from_inferences": OVERAGE_TIER,
                              "price_per_1000": str(entry.per_1000[1])}]  # fmt: skip
        row.full_clean()
        row.save()


def thousands(inferences: Decimal) -> Decimal:
    return (inferences / 1000).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)


def in_tiers(low: Decimal, high: Decimal, tiers) -> list[tuple[Decimal, Decimal]]:
    """(price, inferences) of the overage between ``low`` and ``high`` per tier."""
    out = []
    for index, (start, price) in enumerate(tiers):
        end = tiers[index + 1][0] if index + 1 < len(tiers) else None
        top = high if end is None else min(high, Decimal(end))
        bottom = max(low, Decimal(start))
        out.append((Decimal(price), max(Decimal(0), top - bottom)))
    return out


@dataclass
class Event:
    kind: str  # activation, direct, usage, renewal
    at: dt.datetime
    sku: str
    key: str  # batch id, licence id or renewal id
    price: Decimal
    quantity: int = 1  # inferences of usage, units of a renewal
    billed: str = ""


def line_key(line: tuple) -> str:
    """Sort lines the same however a Decimal is written (4.1250 is 4.125)."""
    return str([x.normalize() if isinstance(x, Decimal) else x for x in line])


@dataclass
class Oracle:
    catalogue: dict[str, Entry]
    events: list[Event] = field(default_factory=list)
    taken: list[tuple[str, dt.datetime, dt.datetime | None]] = field(default_factory=list)
    invoices: list[tuple[str, str, dt.datetime, dt.datetime]] = field(default_factory=list)
    credited: set[str] = field(default_factory=set)
    revoked: set[str] = field(default_factory=set)

    def units(self, sku: str, start: dt.datetime, end: dt.datetime) -> int:
        """N: licenses of the SKU taken before ``end``, not revoked before ``start``."""
        return sum(1 for s, at, revoked in self.taken
                   if s == sku and at < end and (revoked is None or revoked >= start))  # fmt: skip

    def currency(self, event: Event) -> str:
        return self.catalogue[event.sku].currency

    def start(self, currency: str, end: dt.datetime) -> dt.datetime:
        """Where the next invoice in ``currency`` starts: the last one's end (credited
        ones aside), the first's 31 days before its end."""
        previous = [i for i in self.invoices if i[1] == currency and i[0] not in self.credited]
        return previous[-1][3] if previous else end - dt.timedelta(days=31)

    def lines(
        self, number: str, currency: str, start: dt.datetime, end: dt.datetime
    ) -> list[tuple]:
        due = [e for e in self.events
               if not e.billed and e.at < end and self.currency(e) == currency]  # fmt: skip
        for event in due:
            event.billed = number
        lines = []
        counts: dict[tuple, int] = defaultdict(int)
        usage: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for e in due:
            if e.kind == "activation":
                counts[("unit_activation", e.sku, e.key, "", e.price)] += 1
            elif e.kind == "direct":
                counts[("direct_license", e.sku, "", "", e.price)] += 1
            elif e.kind == "renewal":
                counts[("renewal", e.sku, *e.key.split("|"), e.price)] += e.quantity
            else:
                usage[e.sku][0 if e.at >= start else 1] += e.quantity
        for (kind, sku, batch, lic, price), quantity in counts.items():
            if quantity:
                lines.append((kind, sku, batch, lic, Decimal(quantity), price,
                              money(quantity * price, currency)))  # fmt: skip
        days = (end - start).days
        for sku, (on_time, late) in usage.items():
            entry = self.catalogue[sku]
            allowance = Decimal(self.units(sku, start, end) * entry.allowance * days) / 30
            first = max(Decimal(0), on_time - allowance)
            overall = max(Decimal(0), on_time + late - allowance)
            for kind, low, high in (("metered_overage", 0, first),
                                    ("metered_overage_late", first, overall)):  # fmt: skip
                below = in_tiers(Decimal(0), Decimal(low), entry.tiers)
                upto = in_tiers(Decimal(0), Decimal(high), entry.tiers)
                for (price, b), (_, u) in zip(below, upto, strict=True):
                    quantity = thousands(u - b)
                    if quantity:
                        lines.append((kind, sku, "", "", quantity, price,
                                      money(quantity * price, currency)))  # fmt: skip
        return sorted(lines, key=line_key)

    def credit(self, number: str) -> None:
        for event in self.events:
            if event.billed == number:
                event.billed = ""


def stored_lines(invoice: Invoice) -> list[tuple]:
    return sorted(
        ((li.kind, li.sku, li.batch_id, li.license_id, li.quantity, li.unit_price, li.amount)
         for li in invoice.lines.all()),
        key=line_key,
    )  # fmt: skip


month_events = st.lists(
    st.one_of(
        st.tuples(st.just("batch"), st.sampled_from(SKUS), st.integers(1, 120)),
        st.tuples(st.just("activate"), st.integers(0, 5), st.sampled_from(range(len(MOMENTS)))),
        st.tuples(st.just("direct"), st.sampled_from(SKUS), st.sampled_from(range(len(MOMENTS)))),
        st.tuples(
            st.just("usage"),
            st.integers(0, 9),
            st.integers(-40, 27),
            st.sampled_from([1, 999, 40_000, 480_000, 2_600_000]),
        ),
        st.tuples(st.just("revoke"), st.integers(0, 9), st.sampled_from(range(len(MOMENTS)))),
        st.tuples(st.just("renew"), st.integers(0, 9)),
    ),  # fmt: skip
    max_size=12,
)
scenario = st.tuples(
    catalogues,
    st.tuples(st.sampled_from(SKUS), st.sampled_from(SKUS)),  # a fleet from the start
    st.lists(month_events, min_size=3, max_size=3),
    st.lists(st.booleans(), min_size=3, max_size=3),  # credit the month's invoice?
)


@pytest.fixture(scope="module")
def compared():
    """What the examples compared, printed for the closing note (``pytest -s``)."""
    yield COMPARED
    print(
        f"\noracle: {COMPARED['lines']} lines on {COMPARED['invoices']} invoices in "
        f"{', '.join(sorted(COMPARED['currencies']))}; {COMPARED['mixed']} customers billed "
        "in several currencies"
    )


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario)
def test_issued_invoices_match_the_oracle(server_clock, compared, scenario):
    catalogue, (batch_sku, direct_sku), months, credits = scenario
    start = [("batch", batch_sku, 40), ("activate", 0, 2), ("activate", 0, 0),
             ("direct", direct_sku, 0)]  # fmt: skip
    months = [start + months[0], *months[1:]]
    with transaction.atomic():
        try:
            install(catalogue)
            run(server_clock, Oracle(catalogue), months, credits)
        finally:
            server_clock(0)
            transaction.set_rollback(True)


def run(server_clock, oracle: Oracle, months, credits) -> None:  # noqa: C901 - one scenario, step by step
    def at(moment: dt.datetime) -> None:
        server_clock(moment.timestamp() - time.time())

    customer = CustomerFactory()
    price_of = {sku: entry.unit_price for sku, entry in oracle.catalogue.items()}
    batches, licenses, seen = [], [], set()
    for m, events in enumerate(months):
        month = MONTHS[m]
        for event in events:
            kind = event[0]
            if kind == "batch":
                at(month + dt.timedelta(seconds=1))
                batch = batch_issue(customer_id=customer.id, sku=event[1], units=event[2])
                assert batch.unit_price == price_of[batch.sku](event[2])  # as quoted
                batches.append(batch)
            elif kind == "activate" and batches:
                batch = batches[event[1] % len(batches)]
                moment = month + MOMENTS[event[2]]
                at(moment)
                try:
                    lic_id = unit_activate(
                        batch_token=batch.license.token, device_id=f"cam-{len(licenses)}"
                    ).license_id
                except ServiceError:
                    continue  # the batch is exhausted
                lic = License.objects.get(pk=lic_id)
                licenses.append(lic)
                oracle.events.append(
                    Event(
                        "activation",
                        lic.issued_at,
                        batch.sku,
                        batch.id,
                        price_of[batch.sku](batch.units_purchased),
                    )
                )
                oracle.taken.append((batch.sku, lic.issued_at, None))
            elif kind == "direct":
                at(month + MOMENTS[event[2]])
                lic = license_issue(
                    customer_id=customer.id, sku=event[1], device_id=f"cam-{len(licenses)}"
                )
                licenses.append(lic)
                oracle.events.append(
                    Event("direct", lic.issued_at, lic.sku, lic.id, price_of[lic.sku](1))
                )
                oracle.taken.append((lic.sku, lic.issued_at, None))
            elif kind == "usage" and licenses:
                lic = licenses[event[1] % len(licenses)]
                day = month + dt.timedelta(days=event[2])
                if day < MONTHS[0] or (lic.id, day) in seen:
                    continue
                seen.add((lic.id, day))
                at(month + dt.timedelta(days=28))  # uploaded late in the month: late records
                lic.refresh_from_db()
                start = int(day.timestamp()) + 3600 * (event[2] % 24)
                try:
                    answer = usage_ingest(token=lic.token, device_id=lic.device_id, records=[
                        {"period_start": start, "period_end": start + 3600,
                         "inferences": event[3], "frames": 0, "stream_seconds": 0, "events": 0}
                    ])  # fmt: skip
                except ServiceError:
                    continue  # revoked, expired or not yet valid: refused, nothing stored
                # Contract §7: a record starting over an hour before its licence was issued
                # (a unit's: activated) is refused and listed, never billed.
                if start < lic.issued_at.timestamp() - 3600:
                    assert answer["accepted"] == 0, answer
                    assert [r["index"] for r in answer["refused"]] == [0], answer
                    continue
                assert (answer["accepted"], answer["refused"]) == (1, []), answer
                oracle.events.append(
                    Event("usage", dt.datetime.fromtimestamp(start, dt.UTC), lic.sku, lic.id,
                          Decimal(0), quantity=event[3])
                )  # fmt: skip
            elif kind == "revoke" and licenses:
                lic = licenses[event[1] % len(licenses)]
                lic.refresh_from_db()
                if lic.revoked_at is not None or lic.kind == "batch_key":
                    continue
                at(month + MOMENTS[event[2]])
                revoked = license_revoke(license_id=lic.id, reason="stolen").revoked_at
                index = [x.id for x in licenses].index(lic.id)
                sku, taken_at, _ = oracle.taken[index]
                oracle.taken[index] = (sku, taken_at, revoked)
                oracle.revoked.add(lic.id)
            elif kind == "renew" and (batches or licenses):
                targets = [("batch", b) for b in batches] + [
                    ("direct", lic) for lic in licenses if lic.kind == "direct"
                ]
                target_kind, target = targets[event[1] % len(targets)]
                at(month + dt.timedelta(days=20))
                try:
                    renewal = license_renew(
                        idempotency_key=f"r-{m}-{event[1]}-{len(oracle.events)}",
                        **({"batch_id": target.id} if target_kind == "batch"
                           else {"license_id": target.id}),
                    ).renewal  # fmt: skip
                except ServiceError:
                    continue  # perpetual or revoked: nothing to renew
                if target_kind == "batch":
                    units = sum(
                        1 for lic in licenses
                        if lic.batch_id == target.id and lic.id not in oracle.revoked
                    )  # fmt: skip
                    assert renewal.units == units
                    key = f"{target.id}|"
                else:
                    units, key = 1, f"|{target.id}"
                quoted = price_of[target.sku](
                    target.units_purchased if target_kind == "batch" else 1
                )
                if units:
                    oracle.events.append(
                        Event("renewal", renewal.renewed_at, target.sku, key, quoted,
                              quantity=units)
                    )  # fmt: skip
        end = MONTHS[m + 1]
        at(end + dt.timedelta(hours=1))
        for currency in sorted(CURRENCIES):
            issue(oracle, customer, currency, end, credit=credits[m])
    result = ledger_reconcile(customer_id=customer.id, deep=True)
    assert result.ok, result.problems
    billed = {i[1] for i in oracle.invoices}
    COMPARED["currencies"] |= billed
    COMPARED["mixed"] += len(billed) > 1


def issue(oracle: Oracle, customer, currency: str, end: dt.datetime, *, credit: bool) -> None:
    """The customer's invoice in ``currency`` for the period ending ``end``, against the
    oracle's; credited at once when ``credit``. Numbers run in one series."""
    start = oracle.start(currency, end)
    number = f"INV-{end.year}-{len(oracle.invoices) + 1:06d}"
    expected = oracle.lines(number, currency, start, end)
    try:
        invoice = invoice_issue(customer_id=customer.id, period_days=31, end=end, currency=currency)
    except NothingToInvoice:
        assert sum(line[6] for line in expected) == 0, expected
        oracle.credit(number)  # rolled back: still waiting
        return
    assert (invoice.number, invoice.currency, invoice.period_start, invoice.period_end) == (
        number, currency, start, end,
    )  # fmt: skip
    assert stored_lines(invoice) == expected
    assert invoice.total == sum((line[6] for line in expected), Decimal(0))
    COMPARED["invoices"] += 1
    COMPARED["lines"] += len(expected)
    oracle.invoices.append((number, currency, start, end))
    if credit:
        credit_note_issue(number=number, reason="oracle")
        oracle.credit(number)
        oracle.credited.add(number)
