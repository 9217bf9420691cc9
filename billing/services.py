"""Every write and business rule of billing: usage ingestion (contract §7), invoice rating
(contract §6) and issuing invoices."""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Sum
from django.utils import timezone

from audit.services import audited
from billing import pricing, selectors
from billing.models import Invoice, InvoiceLine, InvoiceSequence, UsageDaily, UsageRecord
from config.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    MisconfiguredService,
    Unauthorized,
)
from customers.models import Customer
from customers.services import customer_get
from devices.documents import NONCE_MAX_CHARS, RECEIPT_PREFIX, receipt_payload
from devices.errors import BadSignature
from licensing import signing
from licensing.models import Activation, License, Sku, unix

MAX_RECORDS_PER_CALL = 1000
RECORD_FIELDS = ("period_start", "period_end", "inferences", "frames", "stream_seconds", "events")
# Bounds that keep every value and every daily sum inside a 64-bit column and every
# timestamp inside a calendar date: far beyond what a camera can count in one period.
MAX_COUNTER = 10**12
MAX_TIMESTAMP = 253_402_300_799  # 9999-12-31T23:59:59Z
DEVICE_ID_MAX = 128
DAY = 86_400
EPOCH = dt.date(1970, 1, 1)
PERIOD_DAYS_MAX = 3660
_NONCE = re.compile(r"[A-Za-z0-9_-]+")  # base64url without padding


class InvoiceAlreadyIssued(Conflict):
    pass


class NothingToInvoice(InvalidInput):
    pass


# --- usage ingestion ------------------------------------------------------------------


def _unit_claims(token: str | None) -> dict[str, Any]:
    if not token:
        raise Unauthorized("usage upload needs the header Authorization: Bearer <unit token>")
    try:
        return signing.verify(token)
    except BadSignature as exc:
        raise Unauthorized(f"unit token rejected: {exc}") from None


def _record_error(index: int, record: Any) -> InvalidInput:
    """The message for the first thing wrong with ``record`` (the slow path)."""
    where = f"records[{index}]"
    if not isinstance(record, dict):
        return InvalidInput(f"{where} must be an object with {', '.join(RECORD_FIELDS)}")
    for name in RECORD_FIELDS:
        if name not in record:
            return InvalidInput(f"{where} lacks {name}; a usage record needs all six fields")
        value = record[name]
        if type(value) is not int:
            return InvalidInput(
                f"{where}.{name} must be a non-negative integer, not {type(value).__name__}"
            )
        cap = MAX_TIMESTAMP if name.startswith("period_") else MAX_COUNTER
        if not 0 <= value <= cap:
            return InvalidInput(f"{where}.{name} must be between 0 and {cap}, not {value}")
    return InvalidInput(
        f"{where}: period_end ({record['period_end']}) must be after period_start "
        f"({record['period_start']})"
    )


def _validated(records: Any) -> list[tuple[int, int, int, int, int, int]]:
    """Every record as a tuple in RECORD_FIELDS order, or InvalidInput naming the first
    bad index. Plain Python on purpose: this runs for up to 1000 records per call."""
    if not isinstance(records, list):
        raise InvalidInput("records must be an array of usage records")
    out = []
    append = out.append
    for index, record in enumerate(records):
        try:
            row = (
                record["period_start"],
                record["period_end"],
                record["inferences"],
                record["frames"],
                record["stream_seconds"],
                record["events"],
            )
        except (KeyError, TypeError):
            raise _record_error(index, record) from None
        start, end, inferences, frames, stream_seconds, events = row
        if not (
            type(record) is dict
            and type(start) is int
            and type(end) is int
            and type(inferences) is int
            and type(frames) is int
            and type(stream_seconds) is int
            and type(events) is int
            and 0 <= start < end <= MAX_TIMESTAMP
            and 0 <= inferences <= MAX_COUNTER
            and 0 <= frames <= MAX_COUNTER
            and 0 <= stream_seconds <= MAX_COUNTER
            and 0 <= events <= MAX_COUNTER
        ):
            raise _record_error(index, record)
        append(row)
    return out


def _nonce(value: Any) -> str:
    """The request's nonce, echoed in the receipt; "" when absent (older firmware)."""
    if value is None:
        return ""
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= NONCE_MAX_CHARS
        or not _NONCE.fullmatch(value)
    ):
        raise InvalidInput(
            f"nonce must be a string of 1-{NONCE_MAX_CHARS} base64url characters "
            "(A-Z, a-z, 0-9, '-', '_'), or absent"
        )
    return value


def _licence_for(claims: dict[str, Any], device_id: Any) -> tuple[str, str, str]:
    """(licence id, customer id, SKU) a unit token may upload for, or Forbidden."""
    if not isinstance(device_id, str) or not 0 < len(device_id) <= DEVICE_ID_MAX:
        raise InvalidInput(f"device_id must be a string of 1-{DEVICE_ID_MAX} characters")
    license_id = claims["lic"]
    if claims["dev"] == "*":
        raise Forbidden(
            f"licence {license_id} is an unbound batch key; usage is uploaded with the unit "
            "token a camera receives from POST /v1/activate"
        )
    if claims["dev"] != device_id:
        raise Forbidden(
            f"licence {license_id} is bound to device {claims['dev']!r}, not {device_id!r}"
        )
    row = (
        License.objects.filter(pk=license_id)
        .values_list("kind", "customer_id", "sku", "device_id", "revoked_at")
        .first()
    )
    if row is None:
        raise Forbidden(f"licence {license_id} is not on file with this authority")
    kind, customer_id, sku, bound_to, revoked_at = row
    if kind == License.Kind.BATCH_KEY or bound_to != device_id or customer_id != claims["sub"]:
        raise Forbidden(f"licence {license_id} on file does not match the token presented")
    if revoked_at is not None:
        raise Forbidden(
            f"licence {license_id} was revoked at {unix(revoked_at)}; usage is no longer accepted"
        )
    return license_id, customer_id, sku


_SUMS = ("records", "inferences", "frames", "stream_seconds", "events")


def _store_postgresql(
    *, license_id: str, customer_id: str, sku: str, device_id: str, rows: list[tuple]
) -> int:
    """Insert ``rows`` and add the inserted ones to the daily rollups in one statement;
    returns how many were inserted.

    ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` lets the unique constraint decide, so
    two concurrent calls carrying the same record each learn exactly whether theirs was
    stored; the rollup upsert reads only what this statement inserted. The records travel
    as six array literals (one short statement to parse, no per-value adaptation) and go
    in key order, as do the rollup days, so two calls waiting on each other's rows always
    wait in the same direction (no deadlock).
    """
    records = connection.ops.quote_name(UsageRecord._meta.db_table)
    daily = connection.ops.quote_name(UsageDaily._meta.db_table)
    # Validated ints only: the literals cannot carry anything but digits and commas.
    arrays = ["{" + ",".join(map(str, column)) + "}" for column in zip(*rows, strict=True)]
    added = ", ".join(f"{name} = daily.{name} + excluded.{name}" for name in _SUMS)
    # Identifiers come from the models; every value is a placeholder.
    sql = f"""
            WITH inserted AS (
                INSERT INTO {records} (license_id, customer_id, sku, device_id, received_at,
                    period_start, period_end, inferences, frames, stream_seconds, events)
                SELECT %s, %s, %s, %s, now(), * FROM unnest(%s::bigint[], %s::bigint[],
                    %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])
                ON CONFLICT (device_id, period_start, period_end) DO NOTHING
                RETURNING period_start, inferences, frames, stream_seconds, events
            ), rolled_up AS (
                INSERT INTO {daily} AS daily (license_id, customer_id, sku, day, records,
                    inferences, frames, stream_seconds, events)
                SELECT %s, %s, %s, DATE '1970-01-01' + (period_start / {DAY})::integer,
                    count(*), sum(inferences)::bigint, sum(frames)::bigint,
                    sum(stream_seconds)::bigint, sum(events)::bigint
                FROM inserted GROUP BY 4 ORDER BY 4
                ON CONFLICT (license_id, day) DO UPDATE SET {added}
            )
            SELECT count(*) FROM inserted
            """  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [license_id, customer_id, sku, device_id, *arrays, license_id, customer_id, sku]
        )
        return cursor.fetchone()[0]


def _store_portable(
    *, license_id: str, customer_id: str, sku: str, device_id: str, rows: list[tuple]
) -> int:
    """The same as :func:`_store_postgresql` in two statements of SQL that SQLite (3.35+)
    understands: the insert returns the keys it stored, the rollups are summed here."""
    records = connection.ops.quote_name(UsageRecord._meta.db_table)
    daily = connection.ops.quote_name(UsageDaily._meta.db_table)
    fixed = [
        license_id, customer_id, sku, device_id,
        connection.ops.adapt_datetimefield_value(timezone.now()),
    ]  # fmt: skip
    params: list[Any] = []
    for row in rows:
        params += fixed
        params += row
    values = ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * len(rows))
    # Identifiers come from the models; every value is a placeholder.
    insert = f"""
        INSERT INTO {records} (license_id, customer_id, sku, device_id, received_at,
            period_start, period_end, inferences, frames, stream_seconds, events)
        VALUES {values}
        ON CONFLICT (device_id, period_start, period_end) DO NOTHING
        RETURNING period_start, period_end
        """  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(insert, params)
        inserted = set(cursor.fetchall())
        days: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
        for period_start, period_end, inferences, frames, stream_seconds, events in rows:
            if (period_start, period_end) in inserted:
                sums = days[period_start // DAY]
                sums[0] += 1
                sums[1] += inferences
                sums[2] += frames
                sums[3] += stream_seconds
                sums[4] += events
        if days:
            params = []
            for day in sorted(days):
                date = connection.ops.adapt_datefield_value(EPOCH + dt.timedelta(days=day))
                params += [license_id, customer_id, sku, date, *days[day]]
            added = ", ".join(f"{name} = {daily}.{name} + excluded.{name}" for name in _SUMS)
            values = ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * len(days))
            upsert = f"""
                INSERT INTO {daily} (license_id, customer_id, sku, day, records, inferences,
                    frames, stream_seconds, events)
                VALUES {values}
                ON CONFLICT (license_id, day) DO UPDATE SET {added}
                """  # noqa: S608
            cursor.execute(upsert, params)
    return len(inserted)


def usage_ingest(
    *, token: str | None, device_id: Any, records: Any, nonce: Any = None
) -> dict[str, Any]:
    """Store a device's usage records (spec §4.2, contract §7); returns
    ``{accepted, duplicates, receipt}`` plus ``deferred`` when more than 1000 records came.

    The verified unit token decides the licence and customer (never the body); the token
    must be bound to ``device_id`` and its licence not revoked. Validation is
    all-or-nothing. A record is a duplicate when its (device_id, period_start,
    period_end) is already stored or appeared earlier in the same call.

    ``receipt`` is a signed usage receipt (``devices.documents``) naming the distinct
    keys of the processed records, new and duplicate alike (never the deferred ones), and
    the licence's total inferences after this upload. It is signed after the transaction
    that stores the records, so a device that deletes only what a valid receipt covers
    never loses a record to a forged answer; an empty ``records`` list gets a receipt too
    (a signed time and the current total).
    """
    claims = _unit_claims(token)
    license_id, customer_id, sku = _licence_for(claims, device_id)
    rows = _validated(records)
    nonce = _nonce(nonce)
    processed = rows[:MAX_RECORDS_PER_CALL]
    result: dict[str, Any] = {"accepted": 0, "duplicates": len(processed)}
    if len(rows) > MAX_RECORDS_PER_CALL:
        result["deferred"] = len(rows) - MAX_RECORDS_PER_CALL
    first: dict[tuple[int, int], tuple] = {}
    for row in processed:
        first.setdefault((row[0], row[1]), row)
    keys = sorted(first)
    with transaction.atomic():
        if keys:
            store = _store_postgresql if connection.vendor == "postgresql" else _store_portable
            inserted = store(
                license_id=license_id,
                customer_id=customer_id,
                sku=sku,
                device_id=device_id,
                rows=[first[key] for key in keys],
            )
            result["accepted"] = inserted
            result["duplicates"] = len(processed) - inserted
        # Read in the insert's transaction, so the total includes this upload; one
        # aggregate over the licence's rollup days (the usage_daily_once index).
        total = UsageDaily.objects.filter(license_id=license_id).aggregate(n=Sum("inferences"))
    payload = receipt_payload(
        issuer=settings.SVC_ISSUER,
        device_id=device_id,
        license_id=license_id,
        nonce=nonce,
        issued_at=unix(timezone.now()),
        records=keys,
        inferences=int(total["n"] or 0),
    )
    result["receipt"] = signing.sign_document(RECEIPT_PREFIX, payload)
    return result


# --- invoice rating -------------------------------------------------------------------


def _check_period_days(period_days: Any) -> int:
    if type(period_days) is not int or not 1 <= period_days <= PERIOD_DAYS_MAX:
        raise InvalidInput(
            f"period_days must be an integer 1..{PERIOD_DAYS_MAX}, not {period_days!r}"
        )
    return period_days


def _line(
    *,
    kind: str,
    sku: str,
    description: str,
    quantity: Decimal | int,
    unit: str,
    unit_price: Decimal,
    currency: str,
    batch_id: str | None = None,
) -> dict[str, Any]:
    line: dict[str, Any] = {
        "kind": kind,
        "sku": sku,
        "description": description,
        "quantity": quantity,
        "unit": unit,
        "unit_price": unit_price,
        "amount": pricing.line_amount(quantity, unit_price),
    }
    if batch_id is not None:
        line["batch_id"] = batch_id
    line["_currency"] = currency
    return line


def _activation_lines(customer_id: str, start: dt.datetime, end: dt.datetime) -> list[dict]:
    rows = (
        Activation.objects.filter(
            batch__customer_id=customer_id, activated_at__gte=start, activated_at__lt=end
        )
        .values("batch_id", "batch__sku", "batch__unit_price", "batch__currency")
        .annotate(units=Count("id"))
        .order_by("batch__sku", "batch_id")
    )
    return [
        _line(
            kind=InvoiceLine.Kind.UNIT_ACTIVATION.value,
            sku=row["batch__sku"],
            description=f"{row['batch__sku']} units activated from batch {row['batch_id']}",
            quantity=row["units"],
            unit="unit",
            unit_price=row["batch__unit_price"],
            currency=row["batch__currency"],
            batch_id=row["batch_id"],
        )
        for row in rows
    ]


def _direct_lines(customer_id: str, start: dt.datetime, end: dt.datetime) -> list[dict]:
    rows = (
        License.objects.filter(
            customer_id=customer_id,
            kind=License.Kind.DIRECT,
            issued_at__gte=start,
            issued_at__lt=end,
        )
        .exclude(device_id="*")
        .values("sku", "unit_price", "currency")
        .annotate(licences=Count("id"))
        .order_by("sku", "unit_price")
    )
    return [
        _line(
            kind=InvoiceLine.Kind.DIRECT_LICENSE.value,
            sku=row["sku"],
            description=f"{row['sku']} direct licences at {row['unit_price']} each",
            quantity=row["licences"],
            unit="licence",
            unit_price=row["unit_price"],
            currency=row["currency"],
        )
        for row in rows
    ]


def _overage_lines(
    customer_id: str,
    start: dt.datetime,
    end: dt.datetime,
    period_days: int,
    entries: dict[str, dict[str, Any]],
) -> list[dict]:
    usage = selectors.inferences_by_sku(customer_id=customer_id, start=unix(start), end=unix(end))
    units = selectors.billable_units_by_sku(customer_id=customer_id, start=start, end=end)
    lines = []
    for sku in sorted(usage):
        entry = entries.get(sku)
        if entry is None:
            raise MisconfiguredService(
                f"customer {customer_id} has usage of SKU {sku}, which is not in the catalogue; "
                "restore the catalogue entry to rate this invoice"
            )
        used = usage[sku]
        included = pricing.allowance(
            units=units.get(sku, 0),
            allowance_per_unit=entry["allowance_per_unit"],
            period_days=period_days,
        )
        overage = max(Decimal(0), Decimal(used) - included)
        for tier, inferences in pricing.overage_by_tier(overage, entry["overage_tiers"]):
            quantity = pricing.thousands(inferences)
            if not quantity:
                continue
            lines.append(
                _line(
                    kind=InvoiceLine.Kind.METERED_OVERAGE.value,
                    sku=sku,
                    description=(
                        f"{sku} inferences over the pooled allowance ({used} used, "
                        f"{included.quantize(Decimal(1))} included for {units.get(sku, 0)} "
                        f"units over {period_days} days), tier from "
                        f"{tier['from_inferences']} inferences"
                    ),
                    quantity=quantity,
                    unit="1000 inferences",
                    unit_price=tier["price_per_1000"],
                    currency=entry["currency"],
                )
            )
    return lines


def _maintenance_lines(
    customer_id: str, end: dt.datetime, entries: dict[str, dict[str, Any]]
) -> list[dict]:
    lines = []
    for sku, base_price, currency, count in selectors.perpetual_units(
        customer_id=customer_id, end=end
    ):
        entry = entries.get(sku)
        rate = entry["maintenance_rate"] if entry else Decimal(0)
        if not rate or base_price is None:
            continue  # not a perpetual SKU of the catalogue: nothing to maintain
        lines.append(
            _line(
                kind=InvoiceLine.Kind.MAINTENANCE.value,
                sku=sku,
                description=f"{sku} annual maintenance, {rate * 100:g}% of {base_price}",
                quantity=count,
                unit="unit-year",
                unit_price=pricing.money(rate * base_price),
                currency=currency,
            )
        )
    return lines


def _currency(customer_id: str, lines: list[dict], entries: dict[str, dict]) -> str:
    found = {line["_currency"] for line in lines if line["_currency"]}
    if not found:
        found = set(
            License.objects.filter(customer_id=customer_id)
            .exclude(currency="")
            .values_list("currency", flat=True)
            .distinct()
        ) or {entry["currency"] for entry in entries.values()}
    if len(found) > 1:
        raise MisconfiguredService(
            f"customer {customer_id} is billed in {', '.join(sorted(found))}; an invoice "
            "carries one currency"
        )
    return found.pop() if found else "EUR"


def _whole_second_after(moment: dt.datetime) -> dt.datetime:
    """``moment`` rounded up to the second. Events are stamped to the microsecond; a
    window ending there counts everything that happened before ``moment`` and is reported
    exactly in Unix seconds."""
    if moment.microsecond:
        moment = moment.replace(microsecond=0) + dt.timedelta(seconds=1)
    return moment


def invoice_rate(
    *, customer_id: str, period_days: int = 30, now: dt.datetime | None = None
) -> dict[str, Any]:
    """Rate a customer's invoice for the ``period_days`` before ``now`` (contract §6).

    Returns spec §2.7 with Decimal money: ``{customer_id, period_start, period_end,
    currency, lines, total}``; each line carries ``kind``, ``sku``, ``description``,
    ``quantity``, ``unit``, ``unit_price`` and ``amount`` (rounded half-up to the cent),
    plus ``batch_id`` on unit activation lines. Nothing is stored.
    """
    customer = customer_get(customer_id=customer_id)
    period_days = _check_period_days(period_days)
    end = _whole_second_after(now or timezone.now())
    start = end - dt.timedelta(days=period_days)
    entries = {sku.code: sku.entry() for sku in Sku.objects.all()}
    lines = (
        _activation_lines(customer.id, start, end)
        + _direct_lines(customer.id, start, end)
        + _overage_lines(customer.id, start, end, period_days, entries)
        + (_maintenance_lines(customer.id, end, entries) if period_days >= 365 else [])
    )
    lines = [line for line in lines if line["quantity"]]
    currency = _currency(customer.id, lines, entries)
    for line in lines:
        del line["_currency"]
    return {
        "customer_id": customer.id,
        "period_start": unix(start),
        "period_end": unix(end),
        "currency": currency,
        "lines": lines,
        "total": sum((line["amount"] for line in lines), Decimal("0.00")),
    }


# --- issuing invoices -----------------------------------------------------------------


def start_of_day(moment: dt.datetime | None = None) -> dt.datetime:
    moment = (moment or timezone.now()).astimezone(dt.UTC)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _next_number(year: int) -> int:
    """Take the next number of ``year`` under a row lock held until commit: issues queue
    here, and a rolled-back issue gives its number back (gapless)."""
    InvoiceSequence.objects.bulk_create([InvoiceSequence(year=year, last=0)], ignore_conflicts=True)
    sequence = InvoiceSequence.objects.select_for_update().get(year=year)
    sequence.last += 1
    sequence.save(update_fields=["last"])
    return sequence.last


@audited("invoice.issue")
@transaction.atomic
def invoice_issue(*, customer_id: str, period_days: int, now: dt.datetime | None = None) -> Invoice:
    """Rate and store an invoice with its lines and the next gapless ``INV-<year>-<seq>``.

    The window ends at ``now`` (default: the start of the current UTC day, so a job run
    twice in a day covers the same window). A customer and window are invoiced at most
    once (InvoiceAlreadyIssued, backed by a unique constraint); a zero total is not
    invoiced (NothingToInvoice).
    """
    customer = customer_get(customer_id=customer_id)
    period_end = _whole_second_after(now or start_of_day())
    issued_at = timezone.now()
    seq = _next_number(issued_at.year)  # serialises issuing: the checks below are race-free
    rated = invoice_rate(customer_id=customer.id, period_days=period_days, now=period_end)
    period_start = period_end - dt.timedelta(days=period_days)
    existing = Invoice.objects.filter(
        customer=customer, period_start=period_start, period_end=period_end
    ).first()
    if existing is not None:
        raise InvoiceAlreadyIssued(
            f"customer {customer.id} was already invoiced for {period_start:%Y-%m-%d %H:%M} to "
            f"{period_end:%Y-%m-%d %H:%M} UTC: {existing.number}"
        )
    if not rated["total"]:
        raise NothingToInvoice(
            f"customer {customer.id} owes nothing for the {period_days} days to "
            f"{period_end:%Y-%m-%d %H:%M} UTC; no invoice issued"
        )
    try:
        with transaction.atomic():
            invoice = Invoice.objects.create(
                number=f"INV-{issued_at.year}-{seq:06d}",
                year=issued_at.year,
                seq=seq,
                customer=customer,
                period_start=period_start,
                period_end=period_end,
                period_days=period_days,
                currency=rated["currency"],
                total=rated["total"],
                issued_at=issued_at,
            )
    except IntegrityError:
        raise InvoiceAlreadyIssued(
            f"customer {customer.id} was already invoiced for this window"
        ) from None
    InvoiceLine.objects.bulk_create(
        InvoiceLine(
            invoice=invoice,
            position=position,
            kind=line["kind"],
            sku=line["sku"],
            batch_id=line.get("batch_id", ""),
            description=line["description"][:300],
            quantity=line["quantity"],
            unit=line["unit"],
            unit_price=line["unit_price"],
            amount=line["amount"],
        )
        for position, line in enumerate(rated["lines"], start=1)
    )
    return invoice


def invoice_issue_all(
    *, period_days: int, now: dt.datetime | None = None, customer_id: str | None = None
) -> list[tuple[str, Invoice | None, str]]:
    """Issue the invoices of every customer (or one) with a non-zero total. Returns
    (customer id, invoice or None, note) per customer considered; each invoice commits
    on its own, so one failure does not undo the others."""
    ids = (
        [customer_id]
        if customer_id
        else Customer.objects.order_by("id").values_list("id", flat=True)
    )
    out: list[tuple[str, Invoice | None, str]] = []
    for cid in ids:
        try:
            invoice = invoice_issue(customer_id=cid, period_days=period_days, now=now)
        except (InvoiceAlreadyIssued, NothingToInvoice) as exc:
            out.append((cid, None, exc.detail))
        else:
            out.append((cid, invoice, f"{invoice.number}: {invoice.total} {invoice.currency}"))
    return out
