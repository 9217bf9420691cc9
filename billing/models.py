"""Usage records, their per-licence daily rollups, and issued invoices.

Usage records are the hot, append-only table: every column a device sends, plus the
licence, customer and SKU the verified token named (denormalised, because a licence never
changes owner or SKU and rating must not join a million rows). A record's identity is
the unique (licence, device_id, period_start, period_end) constraint (contract §7), never
a check-then-insert: the same identity with other counts is a :class:`UsageConflict`.

Rollups (:class:`UsageDaily`) are written in the same statement as the records they
sum, so rating reads a few thousand rollup rows instead of every record. On PostgreSQL
the records table is partitioned by month (:mod:`billing.partitions`); the model is the
same on both databases.

Issued documents (invoices and credit notes), their lines, their usage meters and their
ledger entries are written once: guarded here for the ORM, and on PostgreSQL by
triggers that reject UPDATE and DELETE (migration 0003). :mod:`billing.ledger` explains
how every billable event lands on exactly one issued invoice.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import F, Q

from svccore import dates


class UsageRecord(models.Model):
    # No database foreign key and no index on the licence: the service has looked the
    # licence up before inserting, licences are never deleted (PROTECT), and a per-row
    # referential check would cost a lookup per record on the ingestion hot path.
    license = models.ForeignKey(
        "licensing.License",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
        verbose_name="licence",
    )
    customer = models.ForeignKey(
        "customers.Customer",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    sku = models.CharField(max_length=64, verbose_name="SKU")
    device_id = models.CharField(max_length=128)
    period_start = models.BigIntegerField(help_text="Unix seconds.")
    period_end = models.BigIntegerField(help_text="Unix seconds.")
    inferences = models.BigIntegerField()
    frames = models.BigIntegerField()
    stream_seconds = models.BigIntegerField()
    events = models.BigIntegerField()
    received_at = models.DateTimeField()

    class Meta:
        verbose_name = "usage record"
        constraints = [
            # A record's identity (contract §7) is (licence, device, period): two
            # licences on one camera meter separately. A licence is bound to one device
            # (the service stores a record only for the device its licence is bound
            # to, licensing.held), so the key need not repeat the device: (licence,
            # period) is that identity, in an index as narrow as the old (device,
            # period) one. On PostgreSQL the table is partitioned by month of
            # period_start, and a unique key on a partitioned table must contain the
            # partition key: this one does, so a record can live in one partition only
            # and the key (and ON CONFLICT on it) holds across all of them.
            models.UniqueConstraint(
                fields=["license", "period_start", "period_end"],
                name="usage_record_identity",
            ),
        ]
        indexes = [
            # The partial days at the edges of a rating window are summed from records:
            # an index-only range scan on PostgreSQL thanks to the included columns.
            models.Index(
                fields=["customer", "period_start"],
                include=["sku", "inferences"],
                name="usage_customer_start",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.device_id} {self.period_start}-{self.period_end}"


class UsageConflict(models.Model):
    """A record a device sent whose identity (licence, device, period) the service
    already held with other counts (contract §7): refused, the held counts kept, and this
    row kept for review. One row per distinct counts sent for an identity; a device that
    sends the same conflicting record again adds nothing."""

    license = models.ForeignKey(
        "licensing.License",
        on_delete=models.PROTECT,
        db_constraint=False,
        related_name="+",
        verbose_name="licence",
    )
    customer = models.ForeignKey(
        "customers.Customer",
        on_delete=models.PROTECT,
        db_constraint=False,
        related_name="+",
    )
    sku = models.CharField(max_length=64, verbose_name="SKU")
    device_id = models.CharField(max_length=128)
    period_start = models.BigIntegerField(help_text="Unix seconds.")
    period_end = models.BigIntegerField(help_text="Unix seconds.")
    held_inferences = models.BigIntegerField(help_text="Counts the service holds (billed).")
    held_frames = models.BigIntegerField()
    held_stream_seconds = models.BigIntegerField()
    held_events = models.BigIntegerField()
    sent_inferences = models.BigIntegerField(help_text="Counts the device sent (refused).")
    sent_frames = models.BigIntegerField()
    sent_stream_seconds = models.BigIntegerField()
    sent_events = models.BigIntegerField()
    seen_at = models.DateTimeField(help_text="When the conflicting record first arrived.")

    class Meta:
        verbose_name = "usage conflict"
        ordering = ["-seen_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "license", "device_id", "period_start", "period_end", "sent_inferences",
                    "sent_frames", "sent_stream_seconds", "sent_events",
                ],
                name="usage_conflict_once",
            ),
        ]  # fmt: skip
        indexes = [
            models.Index(fields=["customer", "-seen_at"], name="usage_conflict_customer"),
        ]

    def __str__(self) -> str:
        return f"{self.device_id} {self.period_start}-{self.period_end}"


class UsageDaily(models.Model):
    """Sums of one licence's usage records whose ``period_start`` falls on one UTC day."""

    license = models.ForeignKey(
        "licensing.License",
        on_delete=models.PROTECT,
        related_name="usage_days",
        verbose_name="licence",
    )
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="usage_days"
    )
    sku = models.CharField(max_length=64, verbose_name="SKU")
    day = models.DateField(help_text="UTC day of the records' period_start.")
    records = models.BigIntegerField(default=0)
    inferences = models.BigIntegerField(default=0)
    frames = models.BigIntegerField(default=0)
    stream_seconds = models.BigIntegerField(default=0)
    events = models.BigIntegerField(default=0)
    # What issued invoices have billed of this bucket so far: the sum of its ledger
    # entries, kept here so "not yet billed" is a comparison on the row. Ingestion never
    # writes these (the database default fills them), issuing and credit notes do.
    billed_records = models.BigIntegerField(default=0, db_default=0)
    billed_inferences = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        verbose_name = "daily usage"
        verbose_name_plural = "daily usage"
        ordering = ["-day", "license"]
        constraints = [
            models.UniqueConstraint(fields=["license", "day"], name="usage_daily_once"),
        ]
        indexes = [
            models.Index(
                fields=["customer", "day"],
                include=["sku", "inferences"],
                name="usage_daily_customer",
            ),
            models.Index(fields=["day"], name="usage_daily_day"),
        ]

    def __str__(self) -> str:
        return f"{self.license_id} {self.day}"


class ImmutableError(Exception):
    """An issued invoice or its lines were about to be changed or deleted."""


class _Immutable(models.Model):
    """Rows that are written once. Guarding save()/delete() keeps the admin, the shell and
    any future code from editing an issued invoice by accident; finance corrects with a
    new document, never by rewriting one."""

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ImmutableError(f"{self._meta.verbose_name} {self.pk} is issued and immutable")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ImmutableError(f"{self._meta.verbose_name} {self.pk} is issued and immutable")


class DocumentSequence(models.Model):
    """Last number used in a year of a series (``INV`` invoices, ``CN`` credit notes);
    locked while a document is issued so numbers are gapless (a rolled-back issue rolls
    the counter back with it)."""

    series = models.CharField(max_length=8)
    year = models.PositiveIntegerField()
    last = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["series", "year"], name="document_sequence_once"),
        ]

    def __str__(self) -> str:
        return f"{self.series}-{self.year}: {self.last}"


class Invoice(_Immutable):
    """An issued invoice, or a credit note reversing one (negative quantities, amounts
    and total, its own gapless series)."""

    class Kind(models.TextChoices):
        INVOICE = "invoice", "Invoice"
        CREDIT_NOTE = "credit_note", "Credit note"

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.INVOICE)
    number = models.CharField(
        max_length=32,
        unique=True,
        help_text="INV-YYYY-NNNNNN (an invoice) or CN-YYYY-NNNNNN (a credit note), "
        "numbered without gaps per year.",
    )
    year = models.PositiveIntegerField()
    seq = models.PositiveIntegerField()
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="invoices"
    )
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    period_days = models.PositiveIntegerField()
    currency = models.CharField(max_length=3)
    # To the currency's minor unit: three decimals hold KWD's fils (contract §6).
    total = models.DecimalField(max_digits=18, decimal_places=3)
    issued_at = models.DateTimeField(db_index=True)
    # Several credit notes may credit one invoice (issue 43 item 4, partial credits):
    # ``invoice.credit_notes`` are they, in the order they were issued.
    credits = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="credit_notes",
        help_text="The invoice a credit note credits.",
    )
    # On a credit note (billing.credit_notes); False on invoices and on every credit
    # note issued before partial credits (each reversed its whole invoice, events too).
    partial = models.BooleanField(
        default=False,
        db_default=False,
        help_text="A credit note of chosen lines or quantities, or of what earlier credit "
        "notes left: the credited invoice's period stands.",
    )
    price_only = models.BooleanField(
        default=False,
        db_default=False,
        help_text="A credit note of price only: the events its lines billed stay billed "
        "(no re-billing).",
    )
    revision = models.PositiveIntegerField(
        default=0,
        help_text="Credited invoices of the customer in the same currency that started at "
        "the same period_start before this one (0 for the first).",
    )
    reason = models.CharField(max_length=500, blank=True)
    # VAT (issue 43, billing.vat): ``total`` stays the net sum of the lines (contract §6);
    # the tax on top is the sum of the document's InvoiceTax rows, fixed at issue, and
    # the buyer's country and VAT id are those the category was decided on. Documents
    # issued before VAT have no tax rows and a tax total of 0.
    tax_total = models.DecimalField(max_digits=18, decimal_places=3, default=0, db_default=0)
    buyer_country = models.CharField(max_length=2, blank=True, default="", db_default="")
    buyer_vat_id = models.CharField(max_length=32, blank=True, default="", db_default="")

    class Meta:
        ordering = ["-year", "-seq"]
        constraints = [
            # Issuing derives a period's start from the previous one under a lock; two
            # issuers that raced past it would compute the same start and revision.
            # One invoice per customer, currency and period (contract §6).
            models.UniqueConstraint(
                fields=["customer", "currency", "period_start", "revision"],
                condition=Q(kind="invoice"),
                name="invoice_period_currency_once",
            ),
            models.UniqueConstraint(fields=["kind", "year", "seq"], name="invoice_seq_once"),
            models.CheckConstraint(
                condition=Q(period_end__gt=F("period_start")), name="invoice_window"
            ),
            models.CheckConstraint(
                condition=Q(kind="invoice", credits__isnull=True)
                | Q(kind="credit_note", credits__isnull=False),
                name="invoice_credit_link",
            ),
        ]

    def __str__(self) -> str:
        return self.number

    @property
    def gross_total(self):
        """What the customer pays (or is credited): net total plus tax."""
        return self.total + self.tax_total

    @property
    def reissues(self) -> bool:
        """A credit note that reversed its whole invoice, events included: the invoice's
        period is issued again (``revision`` + 1) when it was the latest."""
        return self.kind == self.Kind.CREDIT_NOTE and not (self.partial or self.price_only)


class VatCategory(models.TextChoices):
    """EN 16931 VAT category codes (UNTDID 5305) the service issues (billing.vat)."""

    STANDARD = "S", "Standard rate"
    REVERSE_CHARGE = "AE", "Reverse charge"
    EXEMPT = "E", "Exempt from VAT"
    OUTSIDE_SCOPE = "O", "Not subject to VAT"


class VatRate(models.Model):
    """A country's standard VAT rate over a span of days (``valid_to`` inclusive; empty:
    until further notice). An invoice takes the rate valid on its issue day and keeps it
    (InvoiceTax): a rate changed or added later never re-prices an issued invoice."""

    country = models.CharField(max_length=2, help_text="ISO 3166 alpha-2 code.")
    rate = models.DecimalField(
        max_digits=5, decimal_places=2, help_text="Percent, e.g. 19.00 for 19 %."
    )
    valid_from = models.DateField()
    valid_to = models.DateField(null=True, blank=True, help_text="Last day; empty: open.")

    class Meta:
        verbose_name = "VAT rate"
        ordering = ["country", "-valid_from"]
        constraints = [
            models.UniqueConstraint(fields=["country", "valid_from"], name="vat_rate_once"),
            models.CheckConstraint(
                condition=Q(rate__gte=0) & Q(rate__lt=100), name="vat_rate_percent"
            ),
            models.CheckConstraint(
                condition=Q(valid_to__isnull=True) | Q(valid_to__gte=F("valid_from")),
                name="vat_rate_span",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.country} {self.rate} % from {self.valid_from}"


class InvoiceTax(_Immutable):
    """One row of a document's VAT breakdown (EN 16931 BG-23): the category and rate, the
    sum of the lines taxed so (taxable) and the tax, rounded half-up to the currency's
    minor unit once per row. A credit note carries its invoice's rows negated."""

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="taxes")
    category = models.CharField(max_length=2, choices=VatCategory.choices)
    rate = models.DecimalField(max_digits=5, decimal_places=2)
    taxable_amount = models.DecimalField(max_digits=18, decimal_places=3)
    tax_amount = models.DecimalField(max_digits=18, decimal_places=3)
    exemption_code = models.CharField(
        max_length=32, blank=True, help_text="VATEX code (categories AE, E, O)."
    )
    exemption_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        verbose_name = "invoice tax"
        verbose_name_plural = "invoice taxes"
        ordering = ["invoice", "category", "rate"]
        constraints = [
            models.UniqueConstraint(
                fields=["invoice", "category", "rate"], name="invoice_tax_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.invoice_id} {self.category} {self.rate}"


# An invoice line's fields as one dict (InvoiceLine.as_dict): the one shape of a line.
LINE_FIELDS = (
    "kind",
    "sku",
    "batch_id",
    "license_id",
    "description",
    "quantity",
    "unit",
    "unit_price",
    "amount",
)


class InvoiceLine(_Immutable):
    class Kind(models.TextChoices):
        UNIT_ACTIVATION = "unit_activation", "Unit activations"
        DIRECT_LICENSE = "direct_license", "Direct licences"
        METERED_OVERAGE = "metered_overage", "Metered overage"
        METERED_OVERAGE_LATE = "metered_overage_late", "Metered overage, late usage"
        MAINTENANCE = "maintenance", "Maintenance"
        RENEWAL = "renewal", "Renewals"
        ADDON = "addon", "Add-ons"
        TRIAL_CONVERSION = "trial_conversion", "Trial conversions"

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="lines")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=32, choices=Kind.choices)
    sku = models.CharField(max_length=64, verbose_name="SKU")
    batch_id = models.CharField(max_length=64, blank=True, verbose_name="batch")
    license_id = models.CharField(
        max_length=64,
        blank=True,
        verbose_name="licence",
        help_text="On a direct licence's renewal or add-on line.",
    )
    description = models.CharField(max_length=300)
    quantity = models.DecimalField(max_digits=18, decimal_places=3)
    unit = models.CharField(max_length=32)
    unit_price = models.DecimalField(max_digits=14, decimal_places=4)
    amount = models.DecimalField(max_digits=18, decimal_places=3)
    credited_line = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="On a credit note: the position of the credited invoice's line (empty on "
        "credit notes issued before partial credits, whose lines match the invoice's "
        "position by position).",
    )

    class Meta:
        ordering = ["invoice", "position"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "position"], name="invoice_line_position"),
        ]

    def __str__(self) -> str:
        return f"{self.invoice_id}/{self.position} {self.kind} {self.sku}"

    def as_dict(self) -> dict[str, Any]:
        """The line as rating, issuing, drafts, previews and exports pass lines around:
        :data:`LINE_FIELDS` (the shape :func:`billing.issuing` stores), nothing else."""
        return {name: getattr(self, name) for name in LINE_FIELDS}


class InvoiceUsage(_Immutable):
    """The metered usage of one SKU an invoice billed (the basis of its overage lines):
    inferences and records of its period and of earlier periods (late), and the
    allowance they were rated against. A credit note carries the negation."""

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="usage")
    sku = models.CharField(max_length=64, verbose_name="SKU")
    units = models.IntegerField()
    allowance = models.DecimalField(max_digits=24, decimal_places=6)
    inferences = models.BigIntegerField()
    records = models.BigIntegerField()
    late_inferences = models.BigIntegerField()
    late_records = models.BigIntegerField()

    class Meta:
        verbose_name = "invoice usage"
        verbose_name_plural = "invoice usage"
        constraints = [
            models.UniqueConstraint(fields=["invoice", "sku"], name="invoice_usage_once"),
        ]

    def __str__(self) -> str:
        return f"{self.invoice_id} {self.sku}"


class LedgerEntry(_Immutable):
    """One billable thing an issued document billed (+) or a credit note returned (-).

    ``usage``: the part of a rollup bucket (licence x UTC day) billed, in records and
    inferences; ``activation``: one unit's activation; ``direct``: one direct licence;
    ``renewal``: one renewal (``licensing.Renewal``), its units; ``addon``: one add-on
    charge (``licensing.AddOnCharge``), its days (1 for a perpetual add-on);
    ``trial_conversion``: one trial batch converted (``licensing.TrialConversion``), its
    units.
    A thing is billed when the sum of its entries is positive (see billing.ledger).
    """

    class Kind(models.TextChoices):
        USAGE = "usage", "Usage"
        ACTIVATION = "activation", "Unit activation"
        DIRECT = "direct", "Direct licence"
        RENEWAL = "renewal", "Renewal"
        ADDON = "addon", "Add-on charge"
        TRIAL_CONVERSION = "trial_conversion", "Trial conversion"

    # By number, which is known before the (immutable) document row is written; the
    # constraint is checked at commit.
    document = models.ForeignKey(
        Invoice, to_field="number", on_delete=models.PROTECT, related_name="entries"
    )
    # Copies of the billed thing's facts, written by INSERT ... SELECT from rows that
    # exist (and are never deleted): no per-row referential check on the way in.
    customer = models.ForeignKey(
        "customers.Customer",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    sku = models.CharField(max_length=64, verbose_name="SKU")
    license = models.ForeignKey(
        "licensing.License",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
        verbose_name="licence",
    )
    bucket = models.ForeignKey(
        UsageDaily,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    renewal = models.ForeignKey(
        "licensing.Renewal",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
        related_name="+",
    )
    addon_charge = models.ForeignKey(
        "licensing.AddOnCharge",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
        related_name="+",
        verbose_name="add-on charge",
    )
    conversion = models.ForeignKey(
        "licensing.TrialConversion",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
        related_name="+",
        verbose_name="trial conversion",
    )
    day = models.DateField(null=True, blank=True, help_text="UTC day of a usage bucket.")
    batch_id = models.CharField(max_length=64, blank=True, verbose_name="batch")
    unit_price = models.DecimalField(max_digits=14, decimal_places=4, null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    late = models.BooleanField(default=False, help_text="Dated before the document's period.")
    records = models.BigIntegerField(default=0)
    quantity = models.BigIntegerField(
        help_text="Inferences (usage), +1/-1 (one event), +/- a renewal's or a trial "
        "conversion's units or an add-on charge's days."
    )

    class Meta:
        verbose_name = "ledger entry"
        verbose_name_plural = "ledger entries"
        indexes = [
            models.Index(fields=["kind", "license"], name="ledger_event"),
            models.Index(fields=["customer", "kind", "sku"], name="ledger_customer"),
            models.Index(
                fields=["renewal"], name="ledger_renewal", condition=Q(renewal__isnull=False)
            ),
            models.Index(
                fields=["addon_charge"],
                name="ledger_addon_charge",
                condition=Q(addon_charge__isnull=False),
            ),
            models.Index(
                fields=["conversion"],
                name="ledger_conversion",
                condition=Q(conversion__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.document_id} {self.kind} {self.license_id} {self.quantity:+d}"


class PrunedUsageMonth(models.Model):
    """A month whose raw usage records were dropped (PostgreSQL) after every one was
    billed and reconciled; its daily rollups remain."""

    month = models.DateField(primary_key=True, help_text="First day of the month (UTC).")
    records = models.BigIntegerField()
    inferences = models.BigIntegerField()
    pruned_at = models.DateTimeField()

    class Meta:
        ordering = ["month"]
        verbose_name = "pruned usage month"

    def __str__(self) -> str:
        return f"{self.month:%Y-%m}"


class LedgerCheck(models.Model):
    """A run of the ledger reconciliation (``billing.reconciliation``) over every
    customer: its totals and problems as they stood. A check reads every rollup and
    ledger entry (seconds at 10^7 events), so the operator dashboard shows the latest
    one instead of running it on every view (issue 15); ``manage.py reconcile`` and the
    dashboard's "Reconcile now" write one."""

    checked_at = models.DateTimeField(db_index=True)
    today = models.DateField(help_text="The UTC day it reconciled as of.")
    seconds = models.FloatField(help_text="How long the check took.")
    rows = models.JSONField(help_text="Totals per customer and SKU.")
    problems = models.JSONField(help_text="Every problem found (empty: none).")

    class Meta:
        ordering = ["-checked_at"]
        verbose_name = "ledger check"

    def __str__(self) -> str:
        return f"ledger check {dates.moment(self.checked_at)}"


# Payments and reminders (issue 43) live in their own module; imported here so Django
# finds them as the billing app's models.
from billing.payment_models import Payment, PaymentReminder  # noqa: E402, F401
