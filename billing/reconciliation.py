"""Reconciliation of the ledger: the selector behind ``manage.py reconcile`` and the
operator dashboard.

Per customer and SKU it reports inferences stored, billed, waiting for the next invoice
and unbillable (dated after today: no period that can be issued contains them yet),
activations, direct licences, renewals and trial conversions (their units) and add-on
charges (their days) stored vs billed (an activation on a released seat is a transfer,
one from a trial batch a trial: each counted apart, never billed as an activation). It
reads
the daily rollups and the ledger, and compares every rollup with the usage records it
sums for every month not pruned (one grouped read of the records; issue 38: an
inflated or forged rollup fails the daily check, naming the bucket with both figures):
0.70 s at 10^6 records on PostgreSQL, 0.15 s before that comparison
(``bench/bench_reconcile.py``). ``deep=True`` adds the activation rollups against the
activations, every invoice rated again, and every renewal against its own term, its
audit entry and the document that billed it (a renewal moved under the maintenance
bypass): :mod:`billing.deep_checks`.

A problem is anything that breaks "every billable event on exactly one issued
invoice": a bucket billed beyond its records, billed counters that disagree with the
ledger entries, an activation, licence, renewal or trial conversion billed more than
once; or anything
wrong with the money of an issued document (:mod:`billing.document_checks`: a line's
amount, a total, a credit note that does not negate what it credits, quantities that
are not those of its ledger entries, and with ``deep`` every invoice rated again from
its entries).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, Count, F, Q, Sum, Value, When
from django.db.models.functions import Greatest

from billing import limits
from billing.deep_checks import deep_problems
from billing.document_checks import EXAMPLES, document_problems, limited
from billing.models import (
    LedgerCheck,
    LedgerEntry,
    PrunedUsageMonth,
    UsageDaily,
    UsageRecord,
)
from customers.models import Customer
from licensing.models import ActivationDaily, AddOnCharge, License, Renewal, TrialConversion

ROLLUP_CHECK_WORK_MEM = "64MB"  # per query, while the daily check runs (PostgreSQL)


@dataclass
class LedgerRow:
    customer_id: str
    customer_name: str
    sku: str
    inferences: int = 0
    billed: int = 0
    waiting: int = 0
    unbillable: int = 0
    records: int = 0
    billed_records: int = 0
    waiting_records: int = 0
    activations: int = 0
    activations_billed: int = 0
    transfers: int = 0  # activations on released seats: stored, never billed
    licenses: int = 0
    licenses_billed: int = 0
    renewal_units: int = 0  # units of renewals (1 per direct licence renewal)
    renewal_units_billed: int = 0
    addon_days: int = 0  # days of add-on charges (1 per perpetual add-on charge)
    addon_days_billed: int = 0
    trials: int = 0  # trial activations: stored, never billed as activations
    conversion_units: int = 0  # units of trial conversions (the trial units in service)
    conversion_units_billed: int = 0


@dataclass
class Reconciliation:
    today: dt.date
    rows: list[LedgerRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def totals(self) -> LedgerRow:
        total = LedgerRow(customer_id="", customer_name="all customers", sku="all SKUs")
        for row in self.rows:
            for name in LedgerRow.__dataclass_fields__:
                if name not in ("customer_id", "customer_name", "sku"):
                    setattr(total, name, getattr(total, name) + getattr(row, name))
        return total


def _usage(rows: dict, scope: Q, today: dt.date) -> None:
    # Per bucket and never negative: a bucket billed twice is a problem, not a credit.
    unbilled = Greatest(F("inferences") - F("billed_inferences"), Value(0))
    unbilled_records = Greatest(F("records") - F("billed_records"), Value(0))
    sums = (
        UsageDaily.objects.filter(scope)
        .values("customer_id", "sku")
        .annotate(
            sum_inferences=Sum("inferences"),
            sum_billed=Sum("billed_inferences"),
            sum_records=Sum("records"),
            sum_billed_records=Sum("billed_records"),
            sum_waiting=Sum(Case(When(day__lte=today, then=unbilled), default=0)),
            sum_waiting_records=Sum(Case(When(day__lte=today, then=unbilled_records), default=0)),
            sum_unbillable=Sum(Case(When(day__gt=today, then=unbilled), default=0)),
        )
        .order_by()
    )
    for item in sums:
        row = rows[(item["customer_id"], item["sku"])]
        for name in ("inferences", "billed", "records", "billed_records", "waiting",
                     "waiting_records", "unbillable"):  # fmt: skip
            setattr(row, name, int(item[f"sum_{name}"] or 0))


def _events(rows: dict, scope: Q, customer_id: str | None) -> None:
    batch_scope = Q(batch__customer_id=customer_id) if customer_id else Q()
    # From the daily rollups (kept with every activation by a trigger); ``deep`` checks
    # them against the activations.
    activations = (
        ActivationDaily.objects.filter(batch_scope)
        .values("batch__customer_id", "batch__sku")
        .annotate(n=Sum("activations"), transfers=Sum("transfers"), trials=Sum("trials"))
        .order_by()
    )
    for item in activations:
        if not (item["n"] or item["transfers"] or item["trials"]):
            continue
        row = rows[(item["batch__customer_id"], item["batch__sku"])]
        row.activations, row.transfers = item["n"], item["transfers"]
        row.trials = item["trials"]
    licenses = (
        License.objects.filter(scope, kind=License.Kind.DIRECT)
        .exclude(device_id="*")
        .values("customer_id", "sku")
        .annotate(n=Count("id"))
        .order_by()
    )
    for item in licenses:
        rows[(item["customer_id"], item["sku"])].licenses = item["n"]
    renewals = (
        Renewal.objects.filter(scope, units__gt=0)
        .values("customer_id", "sku")
        .annotate(n=Sum("units"))
        .order_by()
    )
    for item in renewals:
        rows[(item["customer_id"], item["sku"])].renewal_units = item["n"]
    charges = (
        AddOnCharge.objects.filter(scope).values("customer_id", "sku").annotate(n=Sum("quantity"))
    ).order_by()
    for item in charges:
        rows[(item["customer_id"], item["sku"])].addon_days = item["n"]
    conversions = (
        TrialConversion.objects.filter(scope, units__gt=0)
        .values("customer_id", "sku")
        .annotate(n=Sum("units"))
        .order_by()
    )
    for item in conversions:
        rows[(item["customer_id"], item["sku"])].conversion_units = item["n"]
    billed = (
        LedgerEntry.objects.filter(scope)
        .exclude(kind=LedgerEntry.Kind.USAGE)
        .values("customer_id", "sku", "kind")
        .annotate(n=Sum("quantity"))
        .order_by()
    )
    for item in billed:
        row = rows[(item["customer_id"], item["sku"])]
        if item["kind"] == LedgerEntry.Kind.ACTIVATION:
            row.activations_billed = item["n"]
        elif item["kind"] == LedgerEntry.Kind.RENEWAL:
            row.renewal_units_billed = item["n"]
        elif item["kind"] == LedgerEntry.Kind.ADDON:
            row.addon_days_billed = item["n"]
        elif item["kind"] == LedgerEntry.Kind.TRIAL_CONVERSION:
            row.conversion_units_billed = item["n"]
        else:
            row.licenses_billed = item["n"]


def _bucket_problems(customer_id: str | None) -> list[str]:
    """Buckets billed beyond their records, or whose counters disagree with the ledger."""
    daily = connection.ops.quote_name(UsageDaily._meta.db_table)
    ledger = connection.ops.quote_name(LedgerEntry._meta.db_table)
    where, params = ("AND d.customer_id = %s", [customer_id]) if customer_id else ("", [])
    sql = f"""
        SELECT d.license_id, d.day, d.records, d.inferences, d.billed_records,
            d.billed_inferences, COALESCE(e.records, 0), COALESCE(e.quantity, 0)
        FROM {daily} d LEFT JOIN (
            SELECT bucket_id, SUM(records) AS records, SUM(quantity) AS quantity
            FROM {ledger} WHERE kind = 'usage' GROUP BY bucket_id
        ) e ON e.bucket_id = d.id
        WHERE (d.billed_records > d.records OR d.billed_inferences > d.inferences
            OR d.billed_records < 0 OR d.billed_inferences < 0
            OR d.billed_records <> COALESCE(e.records, 0)
            OR d.billed_inferences <> COALESCE(e.quantity, 0)
            OR (d.billed_records = d.records AND d.billed_inferences <> d.inferences)
            OR (d.billed_records = 0 AND d.billed_inferences <> 0)) {where}
        ORDER BY d.license_id, d.day
    """  # noqa: S608 - identifiers from the models, values as parameters
    problems = []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
        cursor.execute(
            f"SELECT COUNT(*) FROM {ledger} e LEFT JOIN {daily} d ON d.id = e.bucket_id "  # noqa: S608
            "WHERE e.kind = 'usage' AND d.id IS NULL"
        )
        orphans = cursor.fetchone()[0]
    for lic, day, records, inferences, b_records, b_inferences, l_records, l_inferences in found[
        :EXAMPLES
    ]:
        if max(b_records, l_records) > records or max(b_inferences, l_inferences) > inferences:
            what = "billed more than once"
        else:
            what = "billed quantity does not match its records"
        problems.append(
            f"usage of {lic} on {day}: {what} ({records} records / {inferences} inferences "
            f"stored, counters {b_records} / {b_inferences}, ledger {l_records} / "
            f"{l_inferences})"
        )
    if len(found) > EXAMPLES:
        problems.append(f"... and {len(found) - EXAMPLES} more usage buckets like these")
    if orphans:
        problems.append(f"{orphans} usage ledger entries name a bucket that does not exist")
    return problems


def _event_problems(scope: Q) -> list[str]:
    twice = (
        LedgerEntry.objects.filter(scope)
        .exclude(
            kind__in=[
                LedgerEntry.Kind.USAGE,
                LedgerEntry.Kind.RENEWAL,
                LedgerEntry.Kind.ADDON,
                LedgerEntry.Kind.TRIAL_CONVERSION,
            ]
        )
        .values("kind", "license_id")
        .annotate(n=Sum("quantity"))
        .exclude(n__in=[0, 1])
        .order_by("license_id")
    )
    found = list(twice[: EXAMPLES + 1])
    problems = [
        f"{'activation' if row['kind'] == 'activation' else 'direct licence'} "
        f"{row['license_id']} is billed {row['n']} times"
        for row in found[:EXAMPLES]
    ]
    if len(found) > EXAMPLES:
        problems.append(f"... and {twice.count() - EXAMPLES} more events like these")
    return (
        problems + _renewal_problems(scope) + _addon_problems(scope) + _conversion_problems(scope)
    )


def _billed_once_problems(
    scope: Q,
    *,
    kind: str,
    key: str,
    model: Any,
    quantity: str,
    extra: tuple[str, ...] = (),
    describe: Any,
    what: str,
) -> list[str]:
    """Events the ledger attributes as themselves, by id (renewals, trial conversions,
    add-on charges): those whose entries sum to neither 0 (waiting) nor the event's
    ``quantity`` (billed once). ``describe(id, row, billed)`` words one, ``row`` being
    its (quantity, *extra) or None when it is not on file."""
    billed = dict(
        LedgerEntry.objects.filter(scope, kind=kind)
        .values(key)
        .annotate(n=Sum("quantity"))
        .exclude(n=0)
        .values_list(key, "n")
    )
    on_file = {
        pk: row
        for pk, *row in model.objects.filter(pk__in=billed).values_list("id", quantity, *extra)
    }
    wrong = sorted(pk for pk, n in billed.items() if n != on_file.get(pk, [None])[0])
    return limited([describe(pk, on_file.get(pk), billed[pk]) for pk in wrong], what)


def _on_file(row: list | None, index: int = 0) -> Any:
    return row[index] if row is not None else "not on file"


def _renewal_problems(scope: Q) -> list[str]:
    return _billed_once_problems(
        scope,
        kind=LedgerEntry.Kind.RENEWAL,
        key="renewal_id",
        model=Renewal,
        quantity="units",
        describe=lambda pk, row, n: f"renewal {pk} ({_on_file(row)} units) is billed {n} units",
        what="renewals",
    )


def _conversion_problems(scope: Q) -> list[str]:
    return _billed_once_problems(
        scope,
        kind=LedgerEntry.Kind.TRIAL_CONVERSION,
        key="conversion_id",
        model=TrialConversion,
        quantity="units",
        extra=("batch_id",),
        describe=lambda pk, row, n: (
            f"trial conversion {pk} of batch {_on_file(row, 1)} ({_on_file(row)} units) "
            f"is billed {n} units"
        ),
        what="trial conversions",
    )


def _addon_problems(scope: Q) -> list[str]:
    return _billed_once_problems(
        scope,
        kind=LedgerEntry.Kind.ADDON,
        key="addon_charge_id",
        model=AddOnCharge,
        quantity="quantity",
        describe=lambda pk, row, n: f"add-on charge {pk} ({_on_file(row)} days) is billed {n}",
        what="add-on charges",
    )


_SUMS = ("records", "inferences", "frames", "stream_seconds", "events")


def _rollup_problems(customer_id: str | None) -> list[str]:
    """Every rollup against the records it sums, for every day whose month is not
    pruned (issue 38 item 3): an inflated or forged rollup, or records without one.
    One aggregate over the records still stored (their partitions are the months not
    pruned) and the rollups, in the database, returning only the days that differ;
    part of the daily check (``bench/bench_reconcile.py``)."""
    quote = connection.ops.quote_name
    records, daily = quote(UsageRecord._meta.db_table), quote(UsageDaily._meta.db_table)
    if connection.vendor == "postgresql":
        day_number = "(day - DATE '1970-01-01')"
    else:
        day_number = "CAST(julianday(day) - 2440587.5 AS INTEGER)"
    where, params = ("WHERE customer_id = %s", [customer_id] * 2) if customer_id else ("", [])
    held = ", ".join(f"SUM(h_{name})" for name in _SUMS)
    rolled = ", ".join(f"SUM(r_{name})" for name in _SUMS)
    differ = " OR ".join(f"SUM(h_{name}) <> SUM(r_{name})" for name in _SUMS)
    zeros = ", ".join(["0"] * len(_SUMS))
    no_rollup = ", ".join(f"0 AS r_{name}" for name in _SUMS)
    sql = f"""
        SELECT license_id, day_number, {held}, {rolled} FROM (
            SELECT license_id, period_start / {limits.DAY} AS day_number, 1 AS h_records,
                inferences AS h_inferences, frames AS h_frames,
                stream_seconds AS h_stream_seconds, events AS h_events, {no_rollup}
            FROM {records} {where}
            UNION ALL
            SELECT license_id, {day_number}, {zeros}, records, inferences, frames,
                stream_seconds, events
            FROM {daily} {where}
        ) sums
        GROUP BY license_id, day_number HAVING {differ}
        ORDER BY license_id, day_number
    """  # noqa: S608 - identifiers from the models, values as parameters
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # A hash aggregate in memory (a sort spilled to disk took twice as long at
            # 10^6 records), and no JIT compilation for a query run once a day.
            cursor.execute(f"SET LOCAL work_mem = '{ROLLUP_CHECK_WORK_MEM}'")
            cursor.execute("SET LOCAL jit = off")
        cursor.execute(sql, params)
        found = cursor.fetchall()
    if not found:
        return []
    pruned = set(PrunedUsageMonth.objects.values_list("month", flat=True))
    problems = []
    for lic, number, *sums in found:
        day = limits.date_of(number)
        if limits.month_start(day) in pruned:
            continue  # its records were dropped once billed and reconciled
        held_sums, rolled_sums = [int(v or 0) for v in sums[:5]], [int(v or 0) for v in sums[5:]]
        if not any(rolled_sums):
            problems.append(f"{held_sums[0]} records of {lic} on {day} have no rollup")
            continue
        problems.append(
            f"rollup of {lic} on {day} sums {rolled_sums[0]} records / {rolled_sums[1]} "
            f"inferences, the records hold {held_sums[0]} / {held_sums[1]}"
            + (
                ""
                if held_sums[:2] != rolled_sums[:2]
                else f" (frames, stream seconds, events {tuple(rolled_sums[2:])} stored, "
                f"{tuple(held_sums[2:])} in the records)"
            )
        )
    return limited(problems, "rollup differences")


def ledger_reconcile(
    *, customer_id: str | None = None, today: dt.date | None = None, deep: bool = False
) -> Reconciliation:
    """Totals per customer and SKU, and every problem found (see the module docstring).
    ``deep`` also checks activation rollups, renewals and every invoice's rating."""
    today = today or limits.now().astimezone(dt.UTC).date()
    scope = Q(customer_id=customer_id) if customer_id else Q()
    rows: dict[tuple[str, str], LedgerRow] = defaultdict(lambda: LedgerRow("", "", ""))
    _usage(rows, scope, today)
    _events(rows, scope, customer_id)
    names = dict(Customer.objects.filter(pk__in={c for c, _ in rows}).values_list("id", "name"))
    result = Reconciliation(today=today)
    for (cid, sku), row in sorted(rows.items()):
        row.customer_id, row.customer_name, row.sku = cid, names.get(cid, ""), sku
        result.rows.append(row)
    result.problems = (
        _bucket_problems(customer_id)
        + _event_problems(scope)
        + _rollup_problems(customer_id)
        + document_problems(customer_id=customer_id, deep=deep)
        + (deep_problems(customer_id) if deep else [])
    )
    return result


# --- stored checks (issue 15: the dashboard shows the latest instead of running one) ---


def ledger_check_run(*, today: dt.date | None = None) -> LedgerCheck:
    """Reconcile every customer (:func:`ledger_reconcile`) and store the result as the
    latest :class:`~billing.models.LedgerCheck`."""
    started = time.monotonic()
    result = ledger_reconcile(today=today)
    return LedgerCheck.objects.create(
        checked_at=limits.now(),
        today=result.today,
        seconds=time.monotonic() - started,
        rows=[dataclasses.asdict(row) for row in result.rows],
        problems=result.problems,
    )


def ledger_check_latest() -> LedgerCheck | None:
    """The latest stored check; None before the first."""
    return LedgerCheck.objects.order_by("-checked_at", "-id").first()


def ledger_check_result(check: LedgerCheck) -> Reconciliation:
    """A stored check as :func:`ledger_reconcile` returned it."""
    return Reconciliation(
        today=check.today,
        rows=[LedgerRow(**row) for row in check.rows],
        problems=list(check.problems),
    )
