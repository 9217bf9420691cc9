"""Issued invoices and credit notes, their lines, usage meters and ledger entries, and
usage in the Django admin: read-only lists, plus the finance CSV of selected documents
as an action. A document opens as the customer gets it (``console.views.document``),
with its PDF and the credit-note action; corrections are credit notes, never edits."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import reverse

from billing import exports, vat
from billing.balances import standing_of, with_balances
from billing.models import (
    Invoice,
    InvoiceLine,
    InvoiceUsage,
    LedgerEntry,
    PrunedUsageMonth,
    UsageConflict,
    UsageDaily,
    UsageRecord,
    VatRate,
)
from billing.payment_admin import StateFilter
from config import clock
from config.admin.base import (
    CapabilityAdmin,
    IndexedSearchMixin,
    ReadOnlyAdmin,
    ReadOnlyInline,
    choices_filter,
    may,
)
from config.admin.display import customer_link, money
from config.errors import ServiceError
from licensing.selectors import catalogue_list
from svccore import dates


class LineMoney:
    """An invoice line's price and amount with the invoice currency's decimals."""

    @admin.display(description="unit price", ordering="unit_price")
    def unit_price_shown(self, line: InvoiceLine) -> str:
        return money(line.unit_price, line.invoice.currency)

    @admin.display(description="amount", ordering="amount")
    def amount_shown(self, line: InvoiceLine) -> str:
        return money(line.amount, line.invoice.currency)


class InvoiceLineInline(LineMoney, ReadOnlyInline):
    model = InvoiceLine
    fields = ("position", "kind", "sku", "batch_id", "description", "quantity", "unit",
              "unit_price_shown", "amount_shown")  # fmt: skip
    readonly_fields = fields
    ordering = ("position",)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("invoice")


class InvoiceUsageInline(ReadOnlyInline):
    model = InvoiceUsage
    fields = ("sku", "units", "allowance", "inferences", "records", "late_inferences",
              "late_records")  # fmt: skip
    readonly_fields = fields
    verbose_name_plural = "metered usage billed (basis of the overage lines)"


@admin.action(
    description="Download selected invoices as CSV (one row per line)", permissions=["export"]
)
def download_csv(modeladmin, request, queryset):
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    stamp = clock.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="invoices-{stamp}.csv"'
    exports.write_csv(exports.invoice_rows(queryset.order_by("issued_at", "id")), response)
    return response


@admin.register(Invoice)
class InvoiceAdmin(ReadOnlyAdmin):
    # Narrow enough for a 1000 px window: the number says the kind (INV-/CN-), the period
    # its length; issue dates are the date hierarchy and on the invoice's page.
    list_display = ("number", "customer_shown", "period_shown", "total_shown",
                    "state_shown", "balance_shown", "credits", "credited_by")  # fmt: skip
    list_filter = (StateFilter, "kind", "year", "currency")
    search_fields = ("number", "customer__id", "customer__name")
    date_hierarchy = "issued_at"
    list_select_related = ("customer", "credits")

    inlines = [InvoiceLineInline, InvoiceUsageInline]
    actions = [download_csv]

    def has_export_permission(self, request) -> bool:
        return may(request, "manage_billing")

    def get_queryset(self, request):
        # Each invoice's credited and paid sums in the list's own query (issue 43), and
        # its credit notes (credited_by) in one more.
        return with_balances(super().get_queryset(request)).prefetch_related("credit_notes")

    @admin.display(description="state")
    def state_shown(self, obj: Invoice) -> str:
        standing = standing_of(obj)
        return standing.label if standing else ""

    @admin.display(description="balance")
    def balance_shown(self, obj: Invoice) -> str:
        standing = standing_of(obj)
        return money(standing.balance, obj.currency) if standing else ""

    @admin.display(description="total", ordering="total")
    def total_shown(self, obj: Invoice) -> str:
        return money(obj.total, obj.currency)

    @admin.display(description="customer", ordering="customer__name")
    def customer_shown(self, obj: Invoice):
        return customer_link(obj.customer)

    @admin.display(description="period", ordering="period_start")
    def period_shown(self, obj: Invoice) -> str:
        return dates.period(obj.period_start, obj.period_end)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """An invoice is read as its document (console.views.document), with its PDF
        and the credit-note action, not as a database row."""
        invoice = self.get_object(request, unquote(object_id))  # None: no such invoice
        if invoice is None or not self.has_view_permission(request, invoice):
            return super().change_view(request, object_id, form_url, extra_context)
        return HttpResponseRedirect(reverse("console-document", args=[invoice.number]))

    @admin.display(description="credited by")
    def credited_by(self, obj: Invoice) -> str:
        return ", ".join(note.number for note in obj.credit_notes.all())


@admin.register(InvoiceLine)
class InvoiceLineAdmin(LineMoney, ReadOnlyAdmin):
    list_display = ("invoice", "position", "kind", "sku", "quantity", "unit", "unit_price_shown",
                    "amount_shown")  # fmt: skip
    list_filter = ("kind", "sku")
    search_fields = ("invoice__number", "invoice__customer__id", "sku", "batch_id")
    list_select_related = ("invoice",)


UsageSkuFilter = choices_filter(
    "sku", "SKU", lambda: [(code, code) for code in catalogue_list().values_list("code", flat=True)]
)


@admin.register(UsageDaily)
class UsageDailyAdmin(IndexedSearchMixin, ReadOnlyAdmin):
    # What is billed (inferences) per licence and day; the other counters are on the
    # row's page.
    list_display = ("day", "license", "customer_shown", "sku", "records", "inferences")
    # Fleet scale (issue 15): SKUs from the catalogue, not a SELECT DISTINCT over every
    # rollup; the day as a date filter, not a date hierarchy (whose links read every
    # row); a licence or customer id whole or part of a customer's name, by index.
    list_filter = (UsageSkuFilter, "day")
    search_exact = ("license_id",)
    search_related = {"customer": ("=id", "name")}
    list_select_related = ("customer", "license")

    @admin.display(description="customer", ordering="customer__name")
    def customer_shown(self, row: UsageDaily):
        return customer_link(row.customer)


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    """Raw records; searched by exact device id (the dedup index's leading column)."""

    # A device's records with every counter; customer, SKU and arrival on the record's page.
    list_display = ("device_id", "period_start", "period_end", "license", "inferences",
                    "frames", "stream_seconds", "events")  # fmt: skip
    unix_time_fields = ("period_start", "period_end")
    search_fields = ("=device_id",)
    list_select_related = ("license",)
    show_full_result_count = False
    ordering = ("-id",)


@admin.register(UsageConflict)
class UsageConflictAdmin(ReadOnlyAdmin):
    """Records a device sent whose licence, device and period the service already held
    with other counts (contract §7): refused, the held counts billed, kept here for
    review. A restore of an older state directory, or records registered ahead with the
    camera's own token, show up here."""

    list_display = ("device_id", "period_start", "period_end", "license", "customer_shown",
                    "held_inferences", "sent_inferences", "seen_at")  # fmt: skip
    unix_time_fields = ("period_start", "period_end")
    search_fields = ("=device_id", "=license__id", "=customer__id")
    list_select_related = ("license", "customer")
    show_full_result_count = False
    ordering = ("-id",)

    @admin.display(description="customer", ordering="customer__name")
    def customer_shown(self, row: UsageConflict):
        return customer_link(row.customer)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    """Which document billed (or, negative, returned) which bucket or event."""

    list_display = ("document", "kind", "customer_shown", "sku", "billed", "day", "late",
                    "records", "quantity")  # fmt: skip
    list_select_related = ("document", "customer")
    # SKUs from the catalogue: a SELECT DISTINCT over millions of entries took 150 ms at
    # 10^6 (issue 15).
    list_filter = ("kind", "late", UsageSkuFilter)
    search_fields = ("=document__number", "=license__id", "=customer__id")
    show_full_result_count = False
    ordering = ("-id",)

    @admin.display(description="customer", ordering="customer__name")
    def customer_shown(self, entry: LedgerEntry):
        return customer_link(entry.customer)

    @admin.display(description="licence", ordering="license_id")
    def billed(self, entry: LedgerEntry) -> str:
        """The licence whose usage, activation, direct sale, renewal or trial conversion
        the entry bills (a unit's batch is on the entry's page; a batch's renewal or
        conversion names its batch key)."""
        return entry.license_id


class VatRateForm(forms.ModelForm):
    class Meta:
        model = VatRate
        fields = ("country", "rate", "valid_from", "valid_to")

    def clean(self):
        data = super().clean()
        if not self.errors:
            try:
                data["country"] = vat.vat_rate_check(
                    country=data["country"],
                    rate=data["rate"],
                    valid_from=data["valid_from"],
                    valid_to=data.get("valid_to"),
                    rate_id=self.instance.pk,
                )
            except ServiceError as exc:
                raise forms.ValidationError(exc.detail) from None
        return data


@admin.register(VatRate)
class VatRateAdmin(CapabilityAdmin):
    """The VAT rate table (billing.vat): finance adds a country's new rate from the day it
    applies and ends the old one the day before. Issued documents keep the rate they
    were issued with; nothing is deleted (the history is what explains them)."""

    form = VatRateForm
    add_capability = "manage_billing"
    change_capability = "manage_billing"
    list_display = ("country", "rate", "valid_from", "valid_to")
    list_filter = ("country",)
    search_fields = ("country",)
    ordering = ("country", "-valid_from")

    def save_model(self, request, obj, form, change):
        saved = vat.vat_rate_save(
            country=obj.country,
            rate=obj.rate,
            valid_from=obj.valid_from,
            valid_to=obj.valid_to,
            rate_id=obj.pk if change else None,
        )
        obj.pk = saved.pk


@admin.register(PrunedUsageMonth)
class PrunedUsageMonthAdmin(ReadOnlyAdmin):
    list_display = ("month", "records", "inferences", "pruned_at")
