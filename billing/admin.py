"""Issued invoices, their lines and usage in the Django admin: read-only views, plus the
finance CSV of selected invoices as an action."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpResponse
from django.utils import timezone

from billing import exports
from billing.models import Invoice, InvoiceLine, UsageDaily, UsageRecord
from config.adminbase import ReadOnlyAdmin


class InvoiceLineInline(admin.TabularInline):
    model = InvoiceLine
    fields = ("position", "kind", "sku", "batch_id", "description", "quantity", "unit",
              "unit_price", "amount")  # fmt: skip
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("position",)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.action(description="Download selected invoices as CSV (one row per line)")
def download_csv(modeladmin, request, queryset):
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="invoices-{stamp}.csv"'
    exports.write_csv(exports.invoice_rows(queryset.order_by("year", "seq")), response)
    return response


@admin.register(Invoice)
class InvoiceAdmin(ReadOnlyAdmin):
    list_display = ("number", "customer", "period_start", "period_end", "period_days",
                    "currency", "total", "issued_at")  # fmt: skip
    list_filter = ("year", "currency")
    search_fields = ("number", "customer__id", "customer__name")
    date_hierarchy = "issued_at"
    list_select_related = ("customer",)
    inlines = [InvoiceLineInline]
    actions = [download_csv]


@admin.register(InvoiceLine)
class InvoiceLineAdmin(ReadOnlyAdmin):
    list_display = ("invoice", "position", "kind", "sku", "quantity", "unit", "unit_price",
                    "amount")  # fmt: skip
    list_filter = ("kind", "sku")
    search_fields = ("invoice__number", "invoice__customer__id", "sku", "batch_id")
    list_select_related = ("invoice",)


@admin.register(UsageDaily)
class UsageDailyAdmin(ReadOnlyAdmin):
    list_display = ("day", "license", "customer", "sku", "records", "inferences", "frames",
                    "stream_seconds", "events")  # fmt: skip
    list_filter = ("sku",)
    search_fields = ("license__id", "customer__id", "customer__name")
    date_hierarchy = "day"
    list_select_related = ("customer",)
    show_full_result_count = False


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    """Raw records; searched by exact device id (the dedup index's leading column)."""

    list_display = ("device_id", "period_start", "period_end", "license", "customer_id", "sku",
                    "inferences", "frames", "stream_seconds", "events", "received_at")  # fmt: skip
    search_fields = ("=device_id",)
    list_select_related = ("license",)
    show_full_result_count = False
    ordering = ("-id",)
