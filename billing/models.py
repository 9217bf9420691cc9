"""Usage records, their per-licence daily rollups, and issued invoices.

Usage records are the hot, append-only table: every column a device sends, plus the
licence, customer and SKU the verified token named (denormalised, because a licence never
changes owner or SKU and rating must not join a million rows). Deduplication is the
unique (device_id, period_start, period_end) constraint, never a check-then-insert.

Rollups (:class:`UsageDaily`) are written in the same transaction as the records they
sum, so rating reads a few thousand rollup rows instead of every record.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q


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
            models.UniqueConstraint(
                fields=["device_id", "period_start", "period_end"], name="usage_record_once"
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


class InvoiceSequence(models.Model):
    """Last invoice number used in a year; locked while an invoice is issued so numbers
    are gapless (a rolled-back issue rolls the counter back with it)."""

    year = models.PositiveIntegerField(primary_key=True)
    last = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.year}: {self.last}"


class Invoice(_Immutable):
    number = models.CharField(max_length=32, unique=True, help_text="INV-<year>-<seq>.")
    year = models.PositiveIntegerField()
    seq = models.PositiveIntegerField()
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="invoices"
    )
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    period_days = models.PositiveIntegerField()
    currency = models.CharField(max_length=3)
    total = models.DecimalField(max_digits=16, decimal_places=2)
    issued_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-year", "-seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["customer", "period_start", "period_end"], name="invoice_once_per_window"
            ),
            models.UniqueConstraint(fields=["year", "seq"], name="invoice_seq_once"),
            models.CheckConstraint(
                condition=Q(period_end__gt=F("period_start")), name="invoice_window"
            ),
        ]

    def __str__(self) -> str:
        return self.number


class InvoiceLine(_Immutable):
    class Kind(models.TextChoices):
        UNIT_ACTIVATION = "unit_activation", "Unit activations"
        DIRECT_LICENSE = "direct_license", "Direct licences"
        METERED_OVERAGE = "metered_overage", "Metered overage"
        MAINTENANCE = "maintenance", "Maintenance"

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="lines")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=32, choices=Kind.choices)
    sku = models.CharField(max_length=64, verbose_name="SKU")
    batch_id = models.CharField(max_length=64, blank=True, verbose_name="batch")
    description = models.CharField(max_length=300)
    quantity = models.DecimalField(max_digits=18, decimal_places=3)
    unit = models.CharField(max_length=32)
    unit_price = models.DecimalField(max_digits=14, decimal_places=4)
    amount = models.DecimalField(max_digits=16, decimal_places=2)

    class Meta:
        ordering = ["invoice", "position"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "position"], name="invoice_line_position"),
        ]

    def __str__(self) -> str:
        return f"{self.invoice_id}/{self.position} {self.kind} {self.sku}"
