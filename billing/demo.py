"""A demo history (issue 43): ``manage.py demo``, ``svcctl demo`` (``POST /v1/admin/demo``,
development servers only) fill an empty database with 90 days of plausible traffic, so
that a newcomer sees every finance page filled a minute after ``make run``.

Four customers in four countries and three currencies (a German one, EUR and domestic
VAT; a French one, EUR and the intra-EU reverse charge; a Japanese one, JPY, outside EU
VAT; a Kuwaiti one, KWD and its three decimals), their batches, activations and daily
usage over the past 90 days by the server's clock, three 30-day invoices each, the last
ending today at 00:00 UTC, and one credit note. Everything is written through the
services real traffic calls (``customer_create``, ``batch_issue``, ``unit_activate``,
``usage_ingest``, ``invoice_issue``, ``credit_note_issue``), each run at the moment it
happens in the history (:func:`config.clock.running_at`), so the ledger reconciles as
it would after real traffic.

What the demo made is known by its customer ids, ``CUST-DEMO-<random>``
(:data:`DEMO_ID_PREFIX`): any customer with another id is real data, and the demo refuses
to run beside it (:class:`RealData`, naming what it found). A second run finds its
customers and writes nothing (:attr:`DemoResult.created` false). It is one transaction:
a run that fails leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.db import transaction

from billing import credit_notes, issuing, limits, reconciliation
from billing.ingestion import usage_ingest
from billing.models import Invoice
from billing.vat import vat_rates_seed
from config import clock
from config.errors import Conflict
from customers.models import Customer
from customers.services import customer_create
from licensing.models import Batch, License, Sku
from licensing.services import batch_issue, catalogue_seed, unit_activate
from svccore import dates, ids

DEMO_ID_PREFIX = "CUST-DEMO-"
DAYS = 90
PERIOD_DAYS = 30
DAY = dt.timedelta(days=1)
CREDIT_REASON = (
    "Demo: two cameras of the Hamburg line were activated twice after a site move; the "
    "two activations are credited"
)

# Catalogue entries the demo adds for the currencies the seeded catalogue (all EUR) does
# not sell in: copies of a seeded SKU priced in JPY and in KWD.
DEMO_SKUS = {
    "DETECT-STD-JPY": ("DETECT-STD", "JPY", ["13500", "12000", "10500"], ["75", "52"]),
    "VISION-PRO-KWD": ("VISION-PRO", "KWD", ["74.250", "65.000", "55.750"], ["0.125", "0.075"]),
}

# The customer_create fields and the batches; a batch is (SKU, units bought, units
# activated, inferences per unit and day: above the SKU's allowance, to bill overage;
# none on the perpetual ANPR units, which are billed once, by activation).
CUSTOMERS: tuple[dict[str, Any], ...] = (
    {
        "name": "Müller Präzisionsoptik und Industrielle Bildverarbeitung GmbH & Co. KG (demo)",
        "kind": Customer.Kind.END_USER,
        "country": "DE",
        "vat_id": "DE990000019",
        "billing_address": "Abteilung Rechnungsprüfung\nHafenstraße 117–119\n20457 Hamburg",
        "contact": "rechnungen@mueller-praezisionsoptik.demo.invalid",
        "batches": (("VISION-PRO", 40, 14, 9_500), ("ANPR-PERPETUAL", 8, 4, 0)),
    },
    {
        "name": "Société Lyonnaise de Vidéosurveillance Industrielle et Portuaire SAS (demo)",
        "kind": Customer.Kind.OEM,
        "country": "FR",
        "vat_id": "FR13990000010",
        "billing_address": "Service comptabilité fournisseurs\n42 quai Perrache\n69002 Lyon",
        "contact": "factures@slvip.demo.invalid",
        "batches": (("DETECT-STD", 120, 18, 2_100),),
    },
    {
        "name": "Kabushiki Kaisha Hokkaido Smart Factory Vision Systems (demo)",
        "kind": Customer.Kind.OEM,
        "country": "JP",
        "vat_id": "",
        "billing_address": "Accounts Payable\n3-1 Kita 7-jo Nishi, Kita-ku\nSapporo 060-0807",
        "contact": "ap@hokkaido-sfvs.demo.invalid",
        "batches": (("DETECT-STD-JPY", 60, 11, 2_600),),
    },
    {
        "name": "Al-Ahmadi Port Logistics and Harbour Security Company W.L.L. (demo)",
        "kind": Customer.Kind.END_USER,
        "country": "KW",
        "vat_id": "",
        "billing_address": "Finance Department\nBlock 4, Street 12, Shuwaikh Port\nKuwait City",
        "contact": "finance@ahmadi-port.demo.invalid",
        "batches": (("VISION-PRO-KWD", 25, 9, 11_000),),
    },
)


class RealData(Conflict):
    """The database holds customers the demo did not make: it does not run beside them."""


@dataclasses.dataclass
class DemoResult:
    created: bool
    customers: list[str]
    invoices: list[str]
    credit_notes: list[str]
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def real_data() -> str:
    """What the database holds that the demo did not make, in words ("" when nothing):
    customers (with their batches, licences and invoices) whose id is not a demo id."""
    foreign = Customer.objects.exclude(id__startswith=DEMO_ID_PREFIX)
    count = foreign.count()
    if not count:
        return ""
    named = ", ".join(foreign.order_by("id").values_list("id", flat=True)[:5])
    more = f" and {count - 5} more" if count > 5 else ""
    batches = Batch.objects.exclude(customer__id__startswith=DEMO_ID_PREFIX).count()
    invoices = Invoice.objects.exclude(customer__id__startswith=DEMO_ID_PREFIX).count()
    return (
        f"{count} customer(s) not made by the demo ({named}{more}), with {batches} "
        f"batch(es) and {invoices} invoice(s) or credit note(s)"
    )


def _existing() -> DemoResult | None:
    customers = list(
        Customer.objects.filter(id__startswith=DEMO_ID_PREFIX)
        .order_by("id")
        .values_list("id", flat=True)
    )
    if not customers:
        return None
    documents = Invoice.objects.filter(customer_id__in=customers).order_by("number")
    return DemoResult(
        created=False,
        customers=customers,
        invoices=[d.number for d in documents if d.kind == Invoice.Kind.INVOICE],
        credit_notes=[d.number for d in documents if d.kind == Invoice.Kind.CREDIT_NOTE],
    )


def _demo_skus() -> None:
    """The JPY and KWD copies of seeded SKUs (:data:`DEMO_SKUS`), once."""
    for code, (base, currency, unit_prices, overage_prices) in DEMO_SKUS.items():
        if Sku.objects.filter(code=code).exists():
            continue
        fields = {f.name: getattr(Sku.objects.get(code=base), f.name) for f in Sku._meta.fields}
        fields.update(code=code, name=f"{fields['name']} ({currency}, demo)", currency=currency)
        fields["unit_price_tiers"] = [
            {**tier, "unit_price": price}
            for tier, price in zip(fields["unit_price_tiers"], unit_prices, strict=True)
        ]
        fields["overage_tiers"] = [
            {**tier, "price_per_1000": price}
            for tier, price in zip(fields["overage_tiers"], overage_prices, strict=True)
        ]
        Sku.objects.create(**fields)


def _device_id(customer_id: str, batch_no: int, unit: int) -> str:
    # Serial-number-like, long, unique per unit: what a real fleet's ids look like.
    return f"{customer_id[len(DEMO_ID_PREFIX) :].lower()}-cam-{batch_no:02d}-{unit:04d}-a3f9c1e2"


@dataclasses.dataclass
class _Unit:
    customer_id: str
    device_id: str
    token: str
    first_day: dt.datetime  # the first whole day of usage: the day after activation
    per_day: int


def _units(start: dt.datetime, rng: random.Random, say: Progress) -> list[_Unit]:
    """The customers, their batches (on the history's first day) and their activations,
    spread over the first two invoice periods."""
    units: list[_Unit] = []
    for number, spec in enumerate(CUSTOMERS):
        with clock.running_at(start + dt.timedelta(hours=8, minutes=number * 7)):
            customer = customer_create(
                id=f"DEMO-{ids.customer_id().removeprefix('CUST-')}",
                **{k: v for k, v in spec.items() if k != "batches"},
            )
        say(f"customer {customer.id}: {customer.name} ({customer.country})")
        for batch_no, (sku, bought, activated, per_day) in enumerate(spec["batches"], start=1):
            with clock.running_at(start + dt.timedelta(hours=9 + batch_no, minutes=number)):
                batch = batch_issue(customer_id=customer.id, sku=sku, units=bought)
            token = License.objects.get(pk=batch.license_id).token
            for unit in range(activated):
                day = 1 + (unit * 53) % (2 * PERIOD_DAYS - 2)
                moment = start + day * DAY + dt.timedelta(hours=10, minutes=rng.randrange(50))
                device_id = _device_id(customer.id, batch_no, unit)
                with clock.running_at(moment):
                    result = unit_activate(
                        batch_token=token,
                        device_id=device_id,
                        fingerprint_source="dmi",
                        sdk_version="4.12.3",
                    )
                units.append(
                    _Unit(
                        customer.id,
                        device_id,
                        result.token,
                        limits.start_of_day(moment) + DAY,
                        per_day,
                    )  # fmt: skip
                )
            say(f"  batch {batch.id}: {bought} × {sku}, {activated} activated")
    return units


def _upload(units: list[_Unit], begin: dt.datetime, end: dt.datetime, rng: random.Random,
            now: dt.datetime) -> int:  # fmt: skip
    """Each unit's daily records of [begin, end), sent as the camera would, at the end."""
    stored = 0
    with clock.running_at(min(end + dt.timedelta(minutes=1), now)):
        for unit in units:
            if not unit.per_day:
                continue
            records = []
            day = max(begin, unit.first_day)
            while day < end:
                inferences = int(unit.per_day * rng.uniform(0.6, 1.4))
                records.append(
                    {
                        "period_start": int(day.timestamp()),
                        "period_end": int((day + DAY).timestamp()),
                        "inferences": inferences,
                        "frames": inferences * 3,
                        "stream_seconds": 86_400 - rng.randrange(3_600),
                        "events": inferences // 40,
                    }
                )
                day += DAY
            if records:
                answer = usage_ingest(
                    token=unit.token, device_id=unit.device_id, records=records,
                    nonce=f"demo-{rng.getrandbits(64):016x}",
                )  # fmt: skip
                stored += answer["accepted"]
    return stored


def demo_credit_note(*, number: str, at: dt.datetime) -> Invoice:
    """The demo's one credit note, on invoice ``number``: a partial credit of two units
    of its first line (a batch's activations), as a price credit (the activations stay
    billed: nothing is billed again)."""
    with clock.running_at(at):
        return credit_notes.credit_note_issue(
            number=number,
            reason=CREDIT_REASON,
            lines=[{"line": 1, "quantity": Decimal(2)}],
            rebill=False,
        )


def demo_create(*, progress: Progress = _quiet, seed: int = 43) -> DemoResult:
    """Write the demo history (module docstring), or find it already written; refuses
    (:class:`RealData`) a database holding customers the demo did not make."""
    started = time.monotonic()
    found = real_data()
    if found:
        raise RealData(
            f"this database holds real data: {found}. The demo only fills a database of "
            "its own (a fresh one: stop the server, move var/db.sqlite3 aside, make run); "
            "nothing was written"
        )
    existing = _existing()
    if existing is not None:
        progress(
            f"the demo is already there ({len(existing.customers)} customers); nothing written"
        )
        existing.seconds = time.monotonic() - started
        return existing
    now = clock.now()
    today = limits.start_of_day(now)
    start = today - DAYS * DAY
    rng = random.Random(seed)
    progress(f"writing {DAYS} days of history, {dates.period(start, today)}")
    with transaction.atomic():
        catalogue_seed()
        vat_rates_seed()
        _demo_skus()
        units = _units(start, rng, progress)
        customers = sorted({u.customer_id for u in units})
        invoices: list[str] = []
        notes: list[str] = []
        for period in range(DAYS // PERIOD_DAYS):
            begin = start + period * PERIOD_DAYS * DAY
            end = begin + PERIOD_DAYS * DAY
            stored = _upload(units, begin, end, rng, now)
            with clock.running_at(min(end + dt.timedelta(minutes=5), now)):
                issued = [
                    issuing.invoice_issue(customer_id=c, period_days=PERIOD_DAYS, end=end)
                    for c in customers
                ]
            invoices += [i.number for i in issued]
            progress(
                f"{dates.period(begin, end)}: {stored:,} usage records, invoices "
                + ", ".join(i.number for i in issued)
            )
            if period == 1:
                # A few days into the next period, the German customer's invoice is
                # reversed; what it billed goes onto the next one.
                note = demo_credit_note(number=issued[_german(customers)].number,
                                        at=end + 3 * DAY + dt.timedelta(hours=11))  # fmt: skip
                notes.append(note.number)
                progress(f"credit note {note.number} for {note.credits.number}")
        with clock.running_at(now):
            reconciliation.ledger_check_run()
    result = DemoResult(True, customers, invoices, notes, time.monotonic() - started)
    progress(f"done in {result.seconds:.1f} s: {len(invoices)} invoices, {len(notes)} credit note")
    return result


def _german(customers: list[str]) -> int:
    german = Customer.objects.get(id__in=customers, country="DE").id
    return customers.index(german)
