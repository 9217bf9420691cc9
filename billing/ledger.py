"""The billing ledger: which issued document billed which event, so that every usage
record, activation, direct licence, renewal and trial conversion is billed on exactly
one issued invoice.

What is attributed
    * Usage is attributed per **rollup bucket** (one licence's records whose
      ``period_start`` falls on one UTC day, :class:`~billing.models.UsageDaily`), not per
      record: an invoice period starts and ends at 00:00 UTC, so a bucket lies wholly in
      or wholly out of it. Each bucket carries ``billed_records`` / ``billed_inferences``,
      the sum of its ledger entries. Records of a bucket only ever arrive (ingestion
      adds to ``records`` in the statement that stores them, and the unique key makes
      each record count once), so the billed counters are a received-order watermark
      per bucket: the first ``billed_records`` records the bucket received are billed,
      and what arrives later waits for the next invoice. That is how a late record
      lands on the next invoice, once, and a month of 10^7 records is a few hundred
      thousand bucket rows to compare, never the records themselves.
    * An activation or a direct licence is attributed as itself (+1), and is billed
      while the sum of its entries is positive.
    * A renewal (``licensing.Renewal``) is attributed as itself, by its id, with its
      units as the quantity (units activated on the batch when it was renewed, 1 for a
      direct licence), in the period that contains its ``renewed_at``; billed while the
      sum of its entries is positive. A renewal of a batch with no unit activated bills
      nothing and is never attributed.
    * An add-on charge (``licensing.AddOnCharge``, issue 42) is attributed the same way,
      as itself, by its id, with its days as the quantity (1 for a perpetual add-on), in
      the period that contains its ``charged_at``; the invoice's add-on line of its grant
      sums them (:func:`billing.line_builders.addon_lines`).
    * A trial batch's conversion (``licensing.TrialConversion``) likewise, by its id,
      with its units (the trial units in service when converted) as the quantity, in the
      period that contains its ``converted_at``. A trial activation is never attributed
      as an activation (``licensing.trials``): its batch's conversion bills it.

Taking (:func:`take`, one issue)
    Under the customer's row lock (taken by :mod:`billing.issuing`, so issuers and
    credit notes of one customer run one at a time), one ``INSERT ... SELECT`` writes an
    entry for every bucket of the customer dated before the period end whose counters
    are behind its sums, with the difference; a second statement locks those buckets
    in (licence, day) order, the order ingestion locks them in, and adds each entry to
    its bucket's counters, once each bucket's ledger entries are checked against its
    counters (:func:`_check_buckets`). A record committed by a concurrent upload is
    either in the bucket row the insert read (billed now) or not (the counters only grow by what the
    entry says, so it stays behind and waits): never both, never neither. Activations
    and direct licences dated before the period end whose entries sum to zero are
    taken the same way, and so are renewals.

Reversing (:func:`reverse`, a credit note of a whole invoice with re-billing)
    Writes the negation of every entry of the credited invoice and subtracts it from the
    counters: the events are "waiting" again, for the next invoice. A partial credit note
    that re-bills reverses single activations and direct licences
    (:mod:`billing.ledger_credits`); a price credit reverses nothing.

Entries reference their document by number (a deferred foreign key), so they can be
written before the immutable invoice row they belong to, once its total is known.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import connection
from django.db.models import Count, F, Q, Sum

from billing.line_builders import (
    ActivationRow,
    AddOnRow,
    ConversionRow,
    DirectRow,
    Meter,
    RenewalRow,
)
from billing.models import LedgerEntry, UsageDaily
from config.errors import Conflict
from licensing.models import Activation, AddOnCharge, Batch, License, Renewal, TrialConversion

_COLUMNS = (
    "document_id, customer_id, kind, sku, license_id, bucket_id, day, batch_id, unit_price, "
    "currency, late, records, quantity, renewal_id, addon_charge_id, conversion_id"
)


@dataclass
class Taken:
    """What one document billed, summed for rating."""

    activations: list[ActivationRow] = field(default_factory=list)
    directs: list[DirectRow] = field(default_factory=list)
    meters: dict[str, Meter] = field(default_factory=dict)
    renewals: list[RenewalRow] = field(default_factory=list)
    addons: list[AddOnRow] = field(default_factory=list)
    conversions: list[ConversionRow] = field(default_factory=list)


def _tables() -> dict[str, str]:
    quote = connection.ops.quote_name
    return {
        "ledger": quote(LedgerEntry._meta.db_table),
        "daily": quote(UsageDaily._meta.db_table),
        "activation": quote(Activation._meta.db_table),
        "batch": quote(Batch._meta.db_table),
        "license": quote(License._meta.db_table),
        "renewal": quote(Renewal._meta.db_table),
        "addon_charge": quote(AddOnCharge._meta.db_table),
        "conversion": quote(TrialConversion._meta.db_table),
    }


def _date(value: dt.date):
    return connection.ops.adapt_datefield_value(value)


def _moment(value: dt.datetime):
    return connection.ops.adapt_datetimefield_value(value)


def _apply_to_buckets(cursor, tables: dict[str, str], document: str) -> None:
    """Add the usage entries of ``document`` to their buckets' billed counters."""
    ledger, daily = tables["ledger"], tables["daily"]
    if connection.features.has_select_for_update:
        # The order uploads lock rollups in (one licence, ascending days): no deadlock.
        cursor.execute(
            f"""
            SELECT 1 FROM {daily} WHERE id IN (
                SELECT bucket_id FROM {ledger} WHERE document_id = %s AND kind = 'usage')
            ORDER BY license_id, day FOR UPDATE
            """,  # noqa: S608 - identifiers from the models, values as parameters
            [document],
        )
    cursor.execute(
        f"""
        UPDATE {daily} SET billed_records = {daily}.billed_records + e.records,
            billed_inferences = {daily}.billed_inferences + e.quantity
        FROM {ledger} e
        WHERE e.document_id = %s AND e.kind = 'usage' AND e.bucket_id = {daily}.id
        """,  # noqa: S608
        [document],
    )


class LedgerDisagrees(Conflict):
    """Issuing found billed counters that disagree with the ledger: it refuses rather
    than bill an event twice (the transaction rolls back)."""


def _check_buckets(cursor, tables: dict[str, str], document: str) -> None:
    """Every bucket ``document`` is about to bill, cross-checked against the whole ledger
    before its counters move: the entries of the other documents must agree with the
    bucket's billed counters, and all entries, this one's included, hold no more than
    its records. Counters reset behind the ledger's back (say an UPDATE of billed_* to 0)
    would make the entry just written bill usage an issued invoice already billed; this
    refuses, naming the buckets (and on PostgreSQL before the rollup guard of migration
    0009 would stop the update with a database error instead)."""
    ledger, daily = tables["ledger"], tables["daily"]
    cursor.execute(
        f"""
        SELECT d.license_id, d.day, d.records, d.inferences, s.records, s.quantity,
            s.documents
        FROM {daily} d JOIN (
            SELECT bucket_id, SUM(records) AS records, SUM(quantity) AS quantity,
                SUM(CASE WHEN document_id = %s THEN 0 ELSE records END) AS before_records,
                SUM(CASE WHEN document_id = %s THEN 0 ELSE quantity END) AS before_quantity,
                COUNT(DISTINCT document_id) AS documents
            FROM {ledger}
            WHERE kind = 'usage' AND bucket_id IN (
                SELECT bucket_id FROM {ledger} WHERE document_id = %s AND kind = 'usage')
            GROUP BY bucket_id
        ) s ON s.bucket_id = d.id
        WHERE s.records > d.records OR s.quantity > d.inferences
            OR s.before_records <> d.billed_records OR s.before_quantity <> d.billed_inferences
        ORDER BY d.license_id, d.day
        """,  # noqa: S608 - identifiers from the models, values as parameters
        [document, document, document],
    )
    found = cursor.fetchall()
    if not found:
        return
    named = "; ".join(
        f"usage of {lic} on {day}: {records} records / {inferences} inferences stored, "
        f"the ledger would bill {billed_records} / {billed} over {documents} documents"
        for lic, day, records, inferences, billed_records, billed, documents in found[:5]
    )
    more = f" (and {len(found) - 5} more buckets)" if len(found) > 5 else ""
    raise LedgerDisagrees(
        f"{document} not issued: {len(found)} usage bucket(s) would be billed beyond their "
        f"records because their billed counters disagree with the ledger ({named}{more}); "
        "nothing was billed. Run manage.py reconcile to see every difference"
    )


def take(
    *,
    document: str,
    customer_id: str,
    start: dt.datetime,
    end: dt.datetime,
    currency: str,
    usage_skus: list[str],
) -> Taken:
    """Attribute to ``document`` every event of the customer in ``currency`` dated
    before ``end`` that no issued document bills yet (those before ``start`` are marked
    late); returns their sums. Sales carry their currency; usage is in its SKU's
    catalogue currency, so ``usage_skus`` names the SKUs priced in ``currency``. The
    caller holds the customer's lock and commits or rolls back."""
    tables = _tables()
    ledger, daily = tables["ledger"], tables["daily"]
    end_day, start_day = _date(end.date()), _date(start.date())
    skus = ", ".join(["%s"] * len(usage_skus)) if usage_skus else "NULL"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {ledger} ({_COLUMNS})
            SELECT %s, customer_id, 'usage', sku, license_id, id, day, '', NULL, '',
                day < %s, records - billed_records, inferences - billed_inferences, NULL, NULL,
                NULL
            FROM {daily}
            WHERE customer_id = %s AND day < %s AND sku IN ({skus})
                AND (records <> billed_records OR inferences <> billed_inferences)
            """,  # noqa: S608
            [document, start_day, customer_id, end_day, *usage_skus],
        )
        _check_buckets(cursor, tables, document)
        _apply_to_buckets(cursor, tables, document)
        for kind, events in (
            (
                LedgerEntry.Kind.ACTIVATION,
                f"""SELECT b.customer_id, b.sku, a.license_id, a.batch_id, b.unit_price,
                        b.currency, a.activated_at AS at
                    FROM {tables["activation"]} a JOIN {tables["batch"]} b ON b.id = a.batch_id
                    WHERE b.customer_id = %s AND b.currency = %s
                        AND a.transfer_of_id IS NULL AND NOT a.trial""",  # noqa: S608
            ),
            (
                LedgerEntry.Kind.DIRECT,
                f"""SELECT customer_id, sku, id AS license_id, '' AS batch_id, unit_price,
                        currency, issued_at AS at
                    FROM {tables["license"]}
                    WHERE customer_id = %s AND currency = %s AND kind = 'direct'
                        AND device_id <> '*'""",  # noqa: S608
            ),
        ):
            cursor.execute(
                f"""
                INSERT INTO {ledger} ({_COLUMNS})
                SELECT %s, customer_id, %s, sku, license_id, NULL, NULL, batch_id,
                    unit_price, currency, at < %s, 0, 1, NULL, NULL, NULL
                FROM ({events}) event
                WHERE at < %s AND NOT EXISTS (
                    SELECT 1 FROM {ledger} e WHERE e.kind = %s
                        AND e.license_id = event.license_id
                    GROUP BY e.license_id HAVING SUM(e.quantity) > 0)
                """,  # noqa: S608
                [
                    document,
                    kind.value,
                    _moment(start),
                    customer_id,
                    currency,
                    _moment(end),
                    kind.value,
                ],
            )
        cursor.execute(
            f"""
            INSERT INTO {ledger} ({_COLUMNS})
            SELECT %s, r.customer_id, 'renewal', r.sku, r.license_id, NULL, NULL,
                COALESCE(r.batch_id, ''), r.unit_price, r.currency, r.renewed_at < %s, 0,
                r.units, r.id, NULL, NULL
            FROM {tables["renewal"]} r
            WHERE r.customer_id = %s AND r.currency = %s AND r.renewed_at < %s AND r.units > 0
                AND NOT EXISTS (
                SELECT 1 FROM {ledger} e WHERE e.renewal_id = r.id
                GROUP BY e.renewal_id HAVING SUM(e.quantity) > 0)
            """,  # noqa: S608
            [document, _moment(start), customer_id, currency, _moment(end)],
        )
        cursor.execute(
            f"""
            INSERT INTO {ledger} ({_COLUMNS})
            SELECT %s, c.customer_id, 'addon', c.sku, c.license_id, NULL, NULL,
                COALESCE(c.batch_id, ''), c.unit_price, c.currency, c.charged_at < %s, 0,
                c.quantity, NULL, c.id, NULL
            FROM {tables["addon_charge"]} c
            WHERE c.customer_id = %s AND c.currency = %s AND c.charged_at < %s
                AND NOT EXISTS (
                SELECT 1 FROM {ledger} e WHERE e.addon_charge_id = c.id
                GROUP BY e.addon_charge_id HAVING SUM(e.quantity) > 0)
            """,  # noqa: S608
            [document, _moment(start), customer_id, currency, _moment(end)],
        )
        cursor.execute(
            f"""
            INSERT INTO {ledger} ({_COLUMNS})
            SELECT %s, c.customer_id, 'trial_conversion', c.sku, c.license_id, NULL, NULL,
                c.batch_id, c.unit_price, c.currency, c.converted_at < %s, 0, c.units, NULL,
                NULL, c.id
            FROM {tables["conversion"]} c
            WHERE c.customer_id = %s AND c.currency = %s AND c.converted_at < %s
                AND c.units > 0 AND NOT EXISTS (
                SELECT 1 FROM {ledger} e WHERE e.conversion_id = c.id
                GROUP BY e.conversion_id HAVING SUM(e.quantity) > 0)
            """,  # noqa: S608
            [document, _moment(start), customer_id, currency, _moment(end)],
        )
    return taken_by(document)


def reverse(*, credit_note: str, invoice: str) -> None:
    """Write the negation of every entry of ``invoice`` under ``credit_note`` and take
    it off the buckets' billed counters: the invoice's events wait again."""
    tables = _tables()
    ledger = tables["ledger"]
    negated = _COLUMNS.replace("records, quantity", "-records, -quantity").replace(
        "document_id, ", "%s, ", 1
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {ledger} ({_COLUMNS}) SELECT {negated} FROM {ledger} "  # noqa: S608
            "WHERE document_id = %s",
            [credit_note, invoice],
        )
        _apply_to_buckets(cursor, tables, credit_note)


def taken_by(document: str) -> Taken:
    """The entries of ``document`` summed into rating rows."""
    return taken_by_document(Q(document_id=document)).get(document, Taken())


def taken_by_document(scope: Q) -> dict[str, Taken]:
    """The entries of every document in ``scope`` (a filter on ledger entries) summed
    into rating rows, per document number: two grouped reads for any number of
    documents (``reconcile --deep`` re-rates every invoice from them)."""
    rows = (
        LedgerEntry.objects.filter(scope)
        .exclude(
            kind__in=[
                LedgerEntry.Kind.RENEWAL,
                LedgerEntry.Kind.ADDON,
                LedgerEntry.Kind.TRIAL_CONVERSION,
            ]
        )
        .values("document_id", "kind", "sku", "batch_id", "unit_price", "currency", "late")
        .annotate(quantity=Sum("quantity"), records=Sum("records"))
        .order_by()
    )
    activations: dict[str, dict[str, ActivationRow]] = defaultdict(dict)
    directs: dict[str, dict[tuple[str, Decimal], DirectRow]] = defaultdict(dict)
    meters: dict[str, dict[str, Meter]] = defaultdict(dict)
    for row in rows:
        document = row["document_id"]
        late = row["quantity"] if row["late"] else 0
        if row["kind"] == LedgerEntry.Kind.ACTIVATION:
            item = activations[document].setdefault(
                row["batch_id"],
                ActivationRow(row["batch_id"], row["sku"], row["unit_price"], row["currency"], 0),
            )
            item.units += row["quantity"]
            item.late += late
        elif row["kind"] == LedgerEntry.Kind.DIRECT:
            direct = directs[document].setdefault(
                (row["sku"], row["unit_price"]),
                DirectRow(row["sku"], row["unit_price"], row["currency"], 0),
            )
            direct.licenses += row["quantity"]
            direct.late += late
        else:
            meter = meters[document].setdefault(row["sku"], Meter(sku=row["sku"]))
            if row["late"]:
                meter.late_inferences += row["quantity"]
                meter.late_records += row["records"]
            else:
                meter.inferences += row["quantity"]
                meter.records += row["records"]
    renewals = _renewals(scope)
    addons = _addons(scope)
    conversions = _conversions(scope)
    return {
        document: Taken(
            list(activations[document].values()),
            list(directs[document].values()),
            meters[document],
            renewals.get(document, []),
            addons.get(document, []),
            conversions.get(document, []),
        )
        for document in set(activations)
        | set(directs)
        | set(meters)
        | set(renewals)
        | set(addons)
        | set(conversions)
    }


def _renewals(scope: Q) -> dict[str, list[RenewalRow]]:
    """The renewals each document billed: one row per batch, one per direct licence."""
    rows = (
        LedgerEntry.objects.filter(scope, kind=LedgerEntry.Kind.RENEWAL)
        .values("document_id", "batch_id", "license_id", "sku", "unit_price", "currency", "late")
        .annotate(units=Sum("quantity"), renewals=Count("renewal_id", distinct=True))
        .order_by()
    )
    found: dict[str, dict[tuple[str, str], RenewalRow]] = defaultdict(dict)
    for row in rows:
        # A batch's renewals are one line whoever's licence id the entry copied.
        key = (row["batch_id"], "" if row["batch_id"] else row["license_id"])
        item = found[row["document_id"]].setdefault(
            key,
            RenewalRow(
                batch_id=row["batch_id"] or None,
                license_id=row["license_id"],
                sku=row["sku"],
                unit_price=row["unit_price"],
                currency=row["currency"],
                units=0,
            ),
        )
        item.units += row["units"]
        item.renewals += row["renewals"]
        item.late += row["units"] if row["late"] else 0
    return {
        document: [item for item in items.values() if item.units]
        for document, items in found.items()
    }


def _addons(scope: Q) -> dict[str, list[AddOnRow]]:
    """The add-on charges each document billed, summed per grant: one line each."""
    rows = (
        LedgerEntry.objects.filter(scope, kind=LedgerEntry.Kind.ADDON)
        .values(
            "document_id",
            "late",
            "sku",
            "batch_id",
            "unit_price",
            "currency",
            grant_id=F("addon_charge__grant_id"),
            code=F("addon_charge__grant__code"),
            name=F("addon_charge__grant__name"),
            term_days=F("addon_charge__grant__term_days"),
            target=F("addon_charge__grant__license_id"),
        )
        .annotate(days=Sum("quantity"), licenses=Count("addon_charge__license_id", distinct=True))
        .order_by()
    )
    found: dict[str, dict[int, AddOnRow]] = defaultdict(dict)
    for row in rows:
        item = found[row["document_id"]].setdefault(
            row["grant_id"],
            AddOnRow(
                grant_id=row["grant_id"],
                code=row["code"],
                name=row["name"],
                sku=row["sku"],
                batch_id=row["batch_id"] or None,
                license_id=row["target"],
                unit_price=row["unit_price"],
                currency=row["currency"],
                term_days=row["term_days"],
            ),
        )
        # A credit note's entries are negative: its licences count as taken back.
        sign = 1 if row["days"] >= 0 else -1
        item.days += row["days"]
        item.licenses += sign * row["licenses"]
        if row["late"]:
            item.late += sign * row["licenses"]
    return {
        document: [item for item in items.values() if item.days]
        for document, items in found.items()
    }


def _conversions(scope: Q) -> dict[str, list[ConversionRow]]:
    """The trial conversions each document billed: one row per batch (a batch converts
    once; a credited one billed again is one row of the next document)."""
    rows = (
        LedgerEntry.objects.filter(scope, kind=LedgerEntry.Kind.TRIAL_CONVERSION)
        .values("document_id", "batch_id", "sku", "unit_price", "currency", "late")
        .annotate(units=Sum("quantity"))
        .order_by()
    )
    found: dict[str, dict[str, ConversionRow]] = defaultdict(dict)
    for row in rows:
        item = found[row["document_id"]].setdefault(
            row["batch_id"],
            ConversionRow(row["batch_id"], row["sku"], row["unit_price"], row["currency"], 0),
        )
        item.units += row["units"]
        item.late += row["units"] if row["late"] else 0
    return {
        document: [item for item in items.values() if item.units]
        for document, items in found.items()
    }
