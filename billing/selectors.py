"""Reads of billing: usage totals, the sums rating needs, and the operator dashboard's
figures. Everything here reads the daily rollups; only the partial days at the edges of a
rating window touch usage records (by an index range scan)."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, F, IntegerField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from billing.balances import with_balances
from billing.limits import DAY, midnight, month_start
from billing.limits import date_of as _date
from billing.models import Invoice, PrunedUsageMonth, UsageConflict, UsageDaily, UsageRecord
from billing.periods import reissued
from config import clock
from config.api.paging import id_page
from config.errors import NotFound
from licensing.models import Activation, ActivationDaily, AddOnCharge, Batch, License
from licensing.selectors import filters_check

USAGE_FIELDS = ("inferences", "frames", "stream_seconds", "events", "records")


def license_usage(*, license_id: str) -> dict[str, Any]:
    """Aggregate usage of one licence: ``{license_id, inferences, frames,
    stream_seconds, events, records}`` (``records`` = number of usage records)."""
    if not License.objects.filter(pk=license_id).exists():
        raise NotFound(f"licence {license_id} does not exist")
    totals = UsageDaily.objects.filter(license_id=license_id).aggregate(
        **{name: Sum(name) for name in USAGE_FIELDS}
    )
    return {"license_id": license_id} | {name: totals[name] or 0 for name in USAGE_FIELDS}


def license_usages(*, license_ids: list[str]) -> list[dict[str, Any]]:
    """:func:`license_usage` of each of ``license_ids`` (which exist), in their order, in
    one query."""
    totals = {
        row["license_id"]: row
        for row in UsageDaily.objects.filter(license_id__in=license_ids)
        .values("license_id")
        .annotate(**{name: Sum(name) for name in USAGE_FIELDS})
        .order_by()
    }
    return [
        {"license_id": lid} | {name: totals.get(lid, {}).get(name) or 0 for name in USAGE_FIELDS}
        for lid in license_ids
    ]


def inferences_by_sku(*, customer_id: str, start: int, end: int) -> dict[str, int]:
    """Sum of ``inferences`` of the customer's usage records with ``start <= period_start
    < end`` (Unix seconds), per SKU. Whole UTC days come from the rollups; a partial day
    at either edge from its smaller side: the records inside the window when they cover
    half the day or less, else the day's rollup minus the records outside it (a preview
    ending now subtracts the few records after now instead of adding a day of them). So
    the sum is exact to the second while its cost depends on the number of licences and
    days, not of records."""
    first_full, after_full = -(-start // DAY), end // DAY
    totals: dict[str, int] = {}

    def add(rows, sign: int = 1) -> None:
        for row in rows:
            totals[row["sku"]] = totals.get(row["sku"], 0) + sign * row["n"]

    minus: list[tuple[int, int]] = []
    if first_full <= after_full:
        edges = [(start, first_full * DAY), (after_full * DAY, end)]
        if first_full * DAY - start > DAY // 2:
            first_full -= 1
            minus.append((first_full * DAY, start))
            edges[0] = (start, start)
        if end - after_full * DAY > DAY // 2:
            minus.append((end, (after_full + 1) * DAY))
            after_full += 1
            edges[1] = (end, end)
    else:
        edges = [(start, end)]
    if first_full < after_full:
        add(
            UsageDaily.objects.filter(
                customer_id=customer_id, day__gte=_date(first_full), day__lt=_date(after_full)
            )
            .values("sku")
            .annotate(n=Sum("inferences"))
            .order_by()
        )
    edges = [(low, high) for low, high in edges if low < high]
    pruned = _pruned_days(edges)
    if pruned:
        # The raw records of a pruned month are gone: a partial edge day there counts
        # whole, from its rollup (only previews reaching back past the pruning do this;
        # a day read as its rollup minus records counts whole there too).
        edges = [(low, high) for low, high in edges if low // DAY not in pruned]
        add(
            UsageDaily.objects.filter(customer_id=customer_id, day__in=[_date(d) for d in pruned])
            .values("sku")
            .annotate(n=Sum("inferences"))
            .order_by()
        )
    # One range per statement: each an index-only range scan of usage_customer_start
    # (ranges OR-ed together make a bitmap scan of the table's rows).
    for ranges, sign in ((edges, 1), (minus, -1)):
        for low, high in ranges:
            if low < high:
                add(_records_in(customer_id, low, high), sign)
    return {sku: n for sku, n in totals.items() if n}


def _records_in(customer_id: str, low: int, high: int):
    return (
        UsageRecord.objects.filter(
            customer_id=customer_id, period_start__gte=low, period_start__lt=high
        )
        .values("sku")
        .annotate(n=Sum("inferences"))
        .order_by()
    )


def _pruned_days(edges: list[tuple[int, int]]) -> set[int]:
    """The days of ``edges`` whose month's raw records were pruned."""
    days = {low // DAY for low, _ in edges}
    months = {month_start(_date(day)) for day in days}
    gone = set(PrunedUsageMonth.objects.filter(month__in=months).values_list("month", flat=True))
    return {day for day in days if month_start(_date(day)) in gone}


def _units(customer_id: str):
    """The customer's billable units: unit licences and device-bound direct licences."""
    return License.objects.filter(
        customer_id=customer_id, kind__in=[License.Kind.UNIT, License.Kind.DIRECT]
    ).exclude(device_id="*")


def _taken_before(end: dt.datetime) -> Q:
    """A unit counts from its activation, a direct licence from its issue."""
    return Q(kind=License.Kind.UNIT, activation_record__activated_at__lt=end) | Q(
        kind=License.Kind.DIRECT, issued_at__lt=end
    )


# --- activations, from their daily rollups (licensing.models.ActivationDaily) ----------


@contextlib.contextmanager
def one_snapshot() -> Iterator[None]:
    """Reads inside see the database as of one moment: on PostgreSQL, a read-only
    REPEATABLE READ transaction when none is open yet (inside one, the caller's
    transaction decides); SQLite reads in a transaction see one snapshot already. So an
    invoice counted by several statements agrees with itself while activations,
    revocations and uploads commit around it."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


@dataclass(frozen=True)
class BatchActivations:
    """Activations of one batch in a window: ``billable`` ones, ``transfers`` and
    ``trials`` (licensing.trials: billed by the batch's conversion, not as activations)."""

    batch_id: str
    sku: str
    unit_price: Decimal
    currency: str
    billable: int
    transfers: int
    trials: int = 0


# Which of its rollup's columns an activation counts in (licensing migration 0016's
# triggers, the same rule): a trial, else a transfer, else billable.
BILLABLE_ACTIVATION = Q(transfer_of__isnull=True, trial=False)
TRANSFER_ACTIVATION = Q(transfer_of__isnull=False, trial=False)
TRIAL_ACTIVATION = Q(trial=True)


HALF_DAY = dt.timedelta(hours=12)


@dataclass(frozen=True)
class _Reading:
    """How [start, end) is read: the rollups of the days in [first, after) (``first``
    None: from the first), plus the activation rows in the ``plus`` ranges, minus those in
    the ``minus`` ranges."""

    first: dt.date | None
    after: dt.date
    plus: list[tuple[dt.datetime, dt.datetime]]
    minus: list[tuple[dt.datetime, dt.datetime]]


def _reading(start: dt.datetime | None, end: dt.datetime) -> _Reading:
    """A partial day at an edge of the window is read from its smaller side: the rows
    inside the window when they cover half the day or less, else the day's rollup minus
    the rows outside the window. A preview's window ends now, so its last day is the
    rollup minus the (few, usually no) rows stamped after now, never a whole day of rows
    (issue 46: at 10^6 activations in 30 days, a day is 34,000 rows)."""
    if start is not None and start.astimezone(dt.UTC).date() == end.astimezone(dt.UTC).date():
        day = start.astimezone(dt.UTC).date()
        return _Reading(day, day, [(start, end)], [])
    plus: list[tuple[dt.datetime, dt.datetime]] = []
    minus: list[tuple[dt.datetime, dt.datetime]] = []
    first = None
    if start is not None:
        first = start.astimezone(dt.UTC).date()
        day_start, next_day = midnight(first), midnight(first + dt.timedelta(days=1))
        if start > day_start:
            if next_day - start <= HALF_DAY:
                plus.append((start, next_day))
                first += dt.timedelta(days=1)
            else:
                minus.append((day_start, start))
    after = end.astimezone(dt.UTC).date()
    day_start, next_day = midnight(after), midnight(after + dt.timedelta(days=1))
    if end > day_start:
        if end - day_start <= HALF_DAY:
            plus.append((day_start, end))
        else:
            minus.append((end, next_day))
            after += dt.timedelta(days=1)
    return _Reading(first, after, plus, minus)


def _within(ranges: list[tuple[dt.datetime, dt.datetime]]) -> Q:
    found = Q()
    for low, high in ranges:
        found |= Q(activated_at__gte=low, activated_at__lt=high)
    return found


# Per batch: its rollups' column(s) and the activation rows counted with them.
ACTIVATION_KINDS = {
    "billable": (F("activations"), BILLABLE_ACTIVATION),
    "transfers": (F("transfers"), TRANSFER_ACTIVATION),
    "trials": (F("trials"), TRIAL_ACTIVATION),
}
# Every activation, whatever its kind (the three partition them).
TAKEN = {"taken": (F("activations") + F("transfers") + F("trials"), Q())}


def _activation_counts(
    *, start: dt.datetime | None, end: dt.datetime, kinds=ACTIVATION_KINDS
) -> dict[str, Any]:
    """Per batch (``OuterRef("pk")``), its activations of each of ``kinds`` with
    ``start <= activated_at < end`` (no start: since the first one), as ``days_<kind>``
    and ``edge_<kind>``: the rollup rows of the days :func:`_reading` chooses, plus or
    minus the activation rows of the partial days at either edge, read from the index
    activation_batch_recent. One statement reads both, so the sum is as exact as a count
    of the rows in that statement's snapshot: a rollup row changes in the transaction of
    the activation it counts (a trigger)."""
    reading = _reading(start, end)
    days = ActivationDaily.objects.filter(batch=OuterRef("pk"), day__lt=reading.after)
    if reading.first is not None:
        days = days.filter(day__gte=reading.first)
    zero = Value(0, output_field=IntegerField())

    def summed(queryset, total) -> Coalesce:
        query = queryset.order_by().values("batch").annotate(n=total).values("n")
        return Coalesce(Subquery(query, output_field=IntegerField()), zero)

    counts = {f"days_{name}": summed(days, Sum(column)) for name, (column, _) in kinds.items()}
    if not (reading.plus or reading.minus):  # the window starts and ends at midnight
        return counts | {f"edge_{name}": zero for name in kinds}
    plus, minus = _within(reading.plus), _within(reading.minus)
    rows = Activation.objects.filter(plus | minus, batch=OuterRef("pk"))

    def edge(kind: Q):
        terms = [Count("pk", filter=kind & plus)] if reading.plus else []
        terms += [-Count("pk", filter=kind & minus)] if reading.minus else []
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]

    return counts | {f"edge_{name}": summed(rows, edge(kind)) for name, (_, kind) in kinds.items()}


def activations_by_batch(
    *, customer_id: str, start: dt.datetime | None, end: dt.datetime
) -> list[BatchActivations]:
    """The customer's batches with their activations in [start, end) (``start`` None:
    every activation before ``end``), billable, transfers and trials apart, batches
    without any left out. Its cost follows the customer's batches and the days of the
    window (plus the activations of the partial days at its edges), not its activations."""
    rows = (
        Batch.objects.filter(customer_id=customer_id)
        .annotate(**_activation_counts(start=start, end=end))
        .values_list(
            "id",
            "sku",
            "unit_price",
            "currency",
            "days_billable",
            "days_transfers",
            "days_trials",
            "edge_billable",
            "edge_transfers",
            "edge_trials",
        )  # fmt: skip
        .order_by()
    )
    found = []
    for batch_id, sku, price, currency, days_b, days_t, days_r, edge_b, edge_t, edge_r in rows:
        billable, transfers, trials = days_b + edge_b, days_t + edge_t, days_r + edge_r
        if billable or transfers or trials:
            found.append(
                BatchActivations(batch_id, sku, price, currency, billable, transfers, trials)
            )
    return found


def billable_units_by_sku(
    *, customer_id: str, start: dt.datetime, end: dt.datetime
) -> dict[str, int]:
    """N of contract §6.3 per SKU: unit and direct licences activated/issued before
    ``end`` and not revoked before ``start`` (a trial's units too: unit licences whose
    usage the pooled allowance covers like any other's).

    Counted as: units activated before ``end`` (from the activation rollups), plus
    device-bound direct licences issued before ``end``, minus those of both revoked
    before ``start`` (a licence is revoked after it is taken, so it was taken before
    ``end`` too). The last two read small partial indexes (license_direct_issued,
    license_customer_revoked), never the customer's units. The caller reads them in one
    snapshot (:func:`billing.rating.invoice_rate` does) for an exact N under concurrent
    activations and revocations."""
    units: dict[str, int] = {}
    # Every activation before ``end``, whatever its kind: one sum of the rollups and one
    # count of the rows per batch (not three of each, as activations_by_batch reads).
    taken = (
        Batch.objects.filter(customer_id=customer_id)
        .annotate(**_activation_counts(start=None, end=end, kinds=TAKEN))
        .values_list("sku", "days_taken", "edge_taken")
        .order_by()
    )
    for sku, days, edge in taken:
        if days + edge:
            units[sku] = units.get(sku, 0) + days + edge
    directs = (
        License.objects.filter(customer_id=customer_id, kind=License.Kind.DIRECT, issued_at__lt=end)
        .exclude(device_id="*")
        .values("sku")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for row in directs:
        units[row["sku"]] = units.get(row["sku"], 0) + row["n"]
    revoked = (
        License.objects.filter(
            customer_id=customer_id,
            revoked_at__lt=start,
            kind__in=[License.Kind.UNIT, License.Kind.DIRECT],
        )
        .exclude(device_id="*")
        .values("sku")
        .annotate(n=Count("*"))  # COUNT(*): read from the index alone
        .order_by()
    )
    for row in revoked:
        units[row["sku"]] = units.get(row["sku"], 0) - row["n"]
    return {sku: n for sku, n in units.items() if n}


def perpetual_units(*, customer_id: str, end: dt.datetime) -> list[tuple[str, Any, str, int]]:
    """(SKU, base price, currency, count) of the customer's perpetual unit and direct
    licences taken before ``end`` and not revoked by then, by SKU and price."""
    rows = (
        _units(customer_id)
        .filter(_taken_before(end), expires_at__isnull=True)
        .filter(Q(revoked_at__isnull=True) | Q(revoked_at__gte=end))
        .values("sku", "unit_price", "currency")
        .annotate(n=Count("id"))
        .order_by("sku", "unit_price")
    )
    return [(row["sku"], row["unit_price"], row["currency"], row["n"]) for row in rows]


def customer_currencies(*, customer_id: str, usage_currencies: dict[str, str]) -> list[str]:
    """Every currency the customer has bought in, sorted: its batches' (trials and their
    conversions included), direct and renewed licences', its add-on charges', and the
    catalogue currency (``usage_currencies``: SKU -> currency) of each SKU it has usage
    of. One invoice per currency (contract §6). Usage of a SKU missing from
    ``usage_currencies`` has no currency to bill in: it is left to the caller, which
    names it.

    Each DISTINCT is of the column alone (``order_by()``: a model's ordering would join
    it in, the usage rollups' a join to every licence with usage: seconds at 10^7 usage
    records, issue 46), and usage is read only for the SKUs whose currency is not found
    yet (usually none: a customer's usage is of SKUs it bought)."""
    found = set(
        Batch.objects.filter(customer_id=customer_id)
        .order_by()
        .values_list("currency", flat=True)
        .distinct()
    )
    found |= set(
        License.objects.filter(customer_id=customer_id, kind=License.Kind.DIRECT)
        .exclude(device_id="*")
        .order_by()
        .values_list("currency", flat=True)
        .distinct()
    )
    # Add-ons are priced in their SKU's currency when sold, which a catalogue edit may
    # have made another than the batch's (issue 42).
    found |= set(
        AddOnCharge.objects.filter(customer_id=customer_id)
        .order_by()
        .values_list("currency", flat=True)
        .distinct()
    )
    unseen = sorted(sku for sku, currency in usage_currencies.items() if currency not in found)
    if unseen:
        found |= {
            usage_currencies[sku]
            for sku in UsageDaily.objects.filter(customer_id=customer_id, sku__in=unseen)
            .order_by()
            .values_list("sku", flat=True)
            .distinct()
        }
    return sorted(currency for currency in found if currency)


def _since(days: int) -> dt.date:
    return clock.now().astimezone(dt.UTC).date() - dt.timedelta(days=days - 1)


def inferences_per_day(*, days: int = 30) -> list[tuple[dt.date, int]]:
    """Inferences of all customers per UTC day for the last ``days`` days (today
    included), oldest first, with zero for days without usage."""
    first = _since(days)
    sums = {
        row["day"]: row["n"]
        for row in UsageDaily.objects.filter(day__gte=first)
        .values("day")
        .annotate(n=Sum("inferences"))
        .order_by()
    }
    return [(day, sums.get(day, 0)) for day in (first + dt.timedelta(n) for n in range(days))]


def top_customers_by_usage(*, days: int = 30, limit: int = 10) -> list[tuple[str, str, int]]:
    """(customer id, name, inferences) of the customers with the most inferences in the
    last ``days`` days, most first."""
    rows = (
        UsageDaily.objects.filter(day__gte=_since(days))
        .values("customer_id", "customer__name")
        .annotate(n=Sum("inferences"))
        .filter(n__gt=0)
        .order_by("-n", "customer_id")[:limit]
    )
    return [(row["customer_id"], row["customer__name"], row["n"]) for row in rows]


# --- issued documents ------------------------------------------------------------------

INVOICE_PAGE_MAX = 500


@dataclass(frozen=True)
class InvoicePage:
    invoices: list[Invoice]
    next_cursor: str | None


def _documents():
    # Each invoice's credited and paid sums (its state and balance, billing.balances) in
    # the same query as the page, never one query per row.
    return with_balances(
        Invoice.objects.select_related("customer", "credits").prefetch_related(
            "lines", "taxes", "credit_notes"
        )
    )


def invoices_page(
    *,
    customer_id: str | None = None,
    kind: str | None = None,
    issued_after: dt.datetime | None = None,
    cursor: str | None = None,
    limit: int = 100,
) -> InvoicePage:
    """Issued invoices and credit notes, newest first, ``limit`` at most; ``next_cursor``
    continues with older ones (the position of the page's last document: none skipped,
    none repeated, whatever is issued meanwhile). An unknown customer is 404."""
    filters_check(customer_id=customer_id)
    documents = _documents().order_by("-id")
    if customer_id:
        documents = documents.filter(customer_id=customer_id)
    if kind:
        documents = documents.filter(kind=kind)
    if issued_after is not None:
        documents = documents.filter(issued_at__gt=issued_after)
    return InvoicePage(*id_page(documents, cursor=cursor, limit=limit))


CONFLICT_PAGE_MAX = 1000


@dataclass(frozen=True)
class UsageConflictPage:
    conflicts: list[UsageConflict]
    next_cursor: str | None


def usage_conflicts_page(
    *,
    customer_id: str | None = None,
    license_id: str | None = None,
    cursor: str | None = None,
    limit: int = 100,
) -> UsageConflictPage:
    """Usage conflicts kept for review (contract §7), newest first, ``limit`` at most;
    ``next_cursor`` continues with older ones. An unknown customer or licence is 404,
    as everywhere a filter names one."""
    filters_check(customer_id=customer_id, license_id=license_id)
    conflicts = UsageConflict.objects.order_by("-id")
    if customer_id:
        conflicts = conflicts.filter(customer_id=customer_id)
    if license_id:
        conflicts = conflicts.filter(license_id=license_id)
    return UsageConflictPage(*id_page(conflicts, cursor=cursor, limit=limit))


def invoice_get(*, number: str):
    """One issued invoice or credit note by its number, with its lines and customer."""
    document = _documents().filter(number=number).first()
    if document is None:
        raise NotFound(f"invoice {number} does not exist")
    return document


def invoice_is_latest(invoice: Invoice) -> bool:
    """Whether ``invoice`` is its customer's latest invoice no credit note reverses (a
    credit note of it makes the next invoice start where it started)."""
    latest = (
        Invoice.objects.filter(customer_id=invoice.customer_id, kind=Invoice.Kind.INVOICE)
        .exclude(pk__in=reissued())
        .order_by("-period_end", "-issued_at")
        .values_list("pk", flat=True)
        .first()
    )
    return latest == invoice.pk


@dataclass(frozen=True)
class Credited:
    """What credit notes credited of an invoice: ``net``, ``tax`` and ``gross`` as the
    credit notes carry them (0 or negative), and what remains creditable (the invoice's
    own amounts plus those)."""

    net: Decimal
    tax: Decimal
    gross: Decimal
    remaining_net: Decimal
    remaining_gross: Decimal

    @property
    def fully_credited(self) -> bool:
        return self.remaining_gross == 0 and self.remaining_net == 0


def credited(invoice: Invoice) -> Credited:
    """The sums of ``Invoice.objects.filter(kind="credit_note", credits=invoice)``: the
    gross credited is their total + tax_total (negative), and the invoice is fully
    credited when nothing remains (payments build on this)."""
    sums = Invoice.objects.filter(kind=Invoice.Kind.CREDIT_NOTE, credits=invoice).aggregate(
        net=Sum("total"), tax=Sum("tax_total")
    )
    net, tax = sums["net"] or Decimal(0), sums["tax"] or Decimal(0)
    return Credited(
        net=net,
        tax=tax,
        gross=net + tax,
        remaining_net=invoice.total + net,
        remaining_gross=invoice.gross_total + net + tax,
    )
