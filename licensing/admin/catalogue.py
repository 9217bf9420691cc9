"""The SKU catalogue."""

from __future__ import annotations

from django.contrib import admin

from config.admin.base import CapabilityAdmin
from config.admin.display import money
from licensing.admin.addons import AddOnInline
from licensing.models import (
    Sku,
)


@admin.register(Sku)
class SkuAdmin(CapabilityAdmin):
    # Prices and terms are what finance sells: the catalogue is theirs to edit.
    add_capability = change_capability = "manage_billing"
    # The currency is in every unit price (and a filter): its column would squeeze them.
    list_display = [
        "code",
        "name",
        "modules",
        "max_streams",
        "max_fps",
        "api_calls",
        "term_days",
        "grace_days",
        "max_offline_days",
        "allowance_per_unit",
        "unit_prices",
    ]
    list_filter = ["currency", "term_days"]
    search_fields = ["code", "name"]
    inlines = [AddOnInline]

    @admin.display(description="unit price tiers")
    def unit_prices(self, sku: Sku) -> str:
        return ", ".join(
            f"{t['from_units']}+: {money(t['unit_price'], sku.currency)}"
            for t in sku.unit_price_tiers
        )

    def get_readonly_fields(self, request, obj=None):
        return ["code"] if obj is not None else []

    def has_delete_permission(self, request, obj=None):
        # Batches name their SKU; deleting one would stop their activations.
        return False
