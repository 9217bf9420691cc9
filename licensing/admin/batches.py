"""Batches: their seats, keys and renewals."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import F, Q
from django.http import HttpResponseRedirect
from django.utils.html import format_html

from config.admin.base import (
    NoEditAdmin,
    service_form_view,
)
from config.admin.display import admin_url, counted, customer_link, money, pretty_json, utc_time
from config.drafts import drafted
from licensing.admin.addons import AddOnMixin, addon_action, grants_shown
from licensing.admin.display import (
    admin_link,
    copyable,
    progress_bar,
    revoked_or_valid,
)
from licensing.admin.forms import (
    BatchIssueForm,
    renew_with_term,
)
from licensing.admin.holding import HoldMixin, hold_action
from licensing.admin.revoking import LicenseRevokeMixin, revoke_with_reason
from licensing.admin.trials import ConvertMixin, TrialFilter, convert_trials, trial_text
from licensing.models import (
    NEAR_EXHAUSTION_PERCENT,
    Batch,
    Suspension,
    near_exhaustion_condition,
)
from licensing.services import (
    batch_issue,
    license_revoke,
)


class NearExhaustionFilter(admin.SimpleListFilter):
    title = "units left"
    parameter_name = "units_left"

    def lookups(self, request, model_admin):
        return [
            ("near", f"near exhaustion (>= {NEAR_EXHAUSTION_PERCENT}% activated)"),
            ("exhausted", "exhausted"),
        ]

    def queryset(self, request, queryset):
        if self.value() == "near":
            return queryset.filter(near_exhaustion_condition())
        if self.value() == "exhausted":
            return queryset.filter(units_activated=F("units_purchased"))
        return queryset


@admin.register(Batch)
class BatchAdmin(LicenseRevokeMixin, HoldMixin, AddOnMixin, ConvertMixin, NoEditAdmin):
    add_capability = "issue_licences"
    # Narrow enough for a laptop beside the filters: the customer by name (its id in
    # the tooltip), a revoked batch key under the batch id instead of a column of "valid".
    list_display = [
        "batch_id",
        "customer_name",
        "sku",
        "progress",
        "unit_price_shown",
        "issued_at",
        "expires_at",
    ]
    list_filter = [NearExhaustionFilter, TrialFilter, "sku", "issued_at"]
    empty_times = {"expires_at": "perpetual"}
    search_fields = ["id", "customer__id", "customer__name", "license__id"]
    list_select_related = ["customer", "license", "trial_conversion"]
    date_hierarchy = "issued_at"
    fields = [
        "id",
        "customer_link",
        "sku",
        "units_purchased",
        "progress",
        "unit_price_shown",
        "order_value",
        "issued_at",
        "expires_at",
        "max_offline_days",
        "trial",
        "hold",
        "addons",
        "license_link",
        "key_state_full",
        "batch_key",
        "key_claims",
    ]
    readonly_fields = fields
    actions = [
        "revoke_batch_keys",
        "renew_batches",
        "convert_trial_batches",
        "suspend_batches",
        "reinstate_batches",
        "add_addon_batches",
        "remove_addon_batches",
    ]

    @admin.display(description="customer", ordering="customer__name")
    def customer_link(self, batch: Batch):
        return customer_link(batch.customer)

    @admin.display(description="suspension")
    def hold(self, batch: Batch):
        # The batch's own hold or its customer's (licensing.leases reads both).
        held = Suspension.objects.filter(
            Q(kind=Suspension.Kind.BATCH, target=batch.pk)
            | Q(kind=Suspension.Kind.CUSTOMER, target=batch.customer_id)
        ).first()
        if held is None:
            return "not suspended"
        return format_html(
            '<span class="svc-state svc-state-suspended">suspended</span> {} since {}: {}',
            "the batch" if held.kind == Suspension.Kind.BATCH else "the customer",
            utc_time(held.suspended_at),
            held.reason,
        )

    @admin.display(description="add-ons")
    def addons(self, batch: Batch):
        if not batch.addons_version:  # never had one: no count over its units
            return "none"
        # Units whose licence carries the batch's add-ons of now (licensing.addons).
        carrying = batch.unit_licenses.filter(addons_version=batch.addons_version).count()
        return grants_shown(batch.license_id, units=(carrying, batch.units_activated))

    @admin.display(description="units activated", ordering="units_activated")
    def progress(self, batch: Batch):
        return progress_bar(activated=batch.units_activated, purchased=batch.units_purchased)

    @admin.display(description="unit price", ordering="unit_price")
    def unit_price_shown(self, batch: Batch) -> str:
        return money(batch.unit_price, batch.currency)

    @admin.display(description="order value")
    def order_value(self, batch: Batch) -> str:
        return money(batch.unit_price * batch.units_purchased, batch.currency)

    @admin.display(description="batch key licence")
    def license_link(self, batch: Batch):
        return admin_link(batch.license)

    @admin.display(description="batch id", ordering="id")
    def batch_id(self, batch: Batch):
        if batch.license.revoked_at is not None:
            return format_html('{}<br><span class="svc-red">key revoked</span>', batch.id)
        if batch.trial_days is not None:
            return format_html(
                '{}<br><span class="svc-state svc-state-trial">trial, {} days</span>',
                batch.id,
                batch.trial_days,
            )
        return batch.id

    @admin.display(description="trial")
    def trial(self, batch: Batch) -> str:
        return trial_text(batch)

    @admin.display(description="customer", ordering="customer__name")
    def customer_name(self, batch: Batch):
        url = admin_url("customers_customer_change", batch.customer_id)
        return format_html(
            '<a href="{}" title="{}">{}</a>', url, batch.customer_id, batch.customer.name
        )

    @admin.display(description="batch key state")
    def key_state_full(self, batch: Batch):
        return revoked_or_valid(batch.license, full=True)

    @admin.display(description="batch key (send this to the customer)")
    def batch_key(self, batch: Batch):
        return copyable(batch.license.token, element_id="batch-key")

    @admin.display(description="batch key claims")
    def key_claims(self, batch: Batch):
        return pretty_json(batch.license.claims)

    def add_view(self, request, form_url="", extra_context=None):
        def perform(data):
            batch = issued(data)
            self.message_user(
                request,
                f"Batch {batch.id} issued: {counted(batch.units_purchased, 'unit')} of "
                f"{batch.sku} at {money(batch.unit_price, batch.currency)}. Copy the batch key "
                "below for the customer.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(admin_url("licensing_batch_change", batch.pk))

        def issued(data) -> Batch:
            return batch_issue(
                customer_id=data["customer"].pk,
                sku=data["sku"],
                units=data["units"],
                term_days=data["term_days"],
                max_offline_days=data["max_offline_days"],
                trial_days=data["trial_days"],
            )

        def confirm(data):
            # The batch as issuing it would make it (price tier, end), then rolled back.
            batch = drafted(lambda: issued(data), lambda batch: batch)
            value = money(batch.unit_price * batch.units_purchased, batch.currency)
            if batch.trial_days is not None:
                return format_html(
                    "<p>Issue a <strong>trial</strong> of <strong>{}</strong> of <strong>{}"
                    "</strong> to <strong>{}</strong>: each camera runs <strong>{}</strong> "
                    "from its own activation, and nothing is billed until the batch is "
                    "converted to paid. Converted, the cameras on trial then are billed at "
                    "<strong id='confirm-amount'>{}</strong> each (the volume tier's unit "
                    "price for {}, fixed now). The batch key {}.</p>",
                    counted(batch.units_purchased, "unit"),
                    batch.sku,
                    data["customer"],
                    counted(batch.trial_days, "day"),
                    money(batch.unit_price, batch.currency),
                    counted(batch.units_purchased, "unit"),
                    f"ends {utc_time(batch.expires_at)}"
                    if batch.expires_at
                    else "never ends (perpetual)",
                ), f"Yes, issue the trial batch ({money(batch.unit_price, batch.currency)} a unit)"
            return format_html(
                "<p>Issue <strong>{}</strong> of <strong>{}</strong> to <strong>{}</strong>: "
                "order value <strong id='confirm-amount'>{}</strong> ({} &times; {}, the "
                "volume tier's unit price, fixed now).</p><p>Each camera's first activation "
                "is billed on the customer's next invoice. The batch key {}.</p>",
                counted(batch.units_purchased, "unit"),
                batch.sku,
                data["customer"],
                value,
                f"{batch.units_purchased:,}",
                money(batch.unit_price, batch.currency),
                f"ends {utc_time(batch.expires_at)}"
                if batch.expires_at
                else "never ends (perpetual)",
            ), f"Yes, issue the batch ({value})"

        return service_form_view(
            self,
            request,
            form_class=BatchIssueForm,
            title="Issue batch",
            intro="Sell a customer a batch of units: one batch key, exchanged by each camera "
            "for its own licence on first boot. The unit price is fixed now from the volume tier.",
            perform=perform,
            submit_label="Check the order…",
            confirm=confirm,
        )

    @admin.action(description="Revoke batch keys of selected batches…", permissions=["revoke"])
    def revoke_batch_keys(self, request, queryset):
        return revoke_with_reason(
            self,
            request,
            queryset,
            license_id_of=lambda batch: batch.license_id,
            revoke=license_revoke,
            action_name="revoke_batch_keys",
            what="batch keys",
        )

    @admin.action(
        description="Suspend selected batches (all their units)…", permissions=["suspend"]
    )
    def suspend_batches(self, request, queryset):
        return hold_action(
            self, request, queryset, scope="batch_id", id_of=lambda batch: batch.pk,
            action_name="suspend_batches", what="batches", suspend=True,
        )  # fmt: skip

    @admin.action(description="Reinstate selected batches…", permissions=["suspend"])
    def reinstate_batches(self, request, queryset):
        return hold_action(
            self, request, queryset, scope="batch_id", id_of=lambda batch: batch.pk,
            action_name="reinstate_batches", what="batches", suspend=False,
        )  # fmt: skip

    @admin.action(description="Renew selected batches for another term…", permissions=["renew"])
    def renew_batches(self, request, queryset):
        return renew_with_term(self, request, queryset, target="batch_id", what="batches")

    @admin.action(description="Add an add-on to selected batches…", permissions=["addon"])
    def add_addon_batches(self, request, queryset):
        return addon_action(
            self, request, queryset, target="batch_id", what="batches",
            action_name="add_addon_batches", add=True,
        )  # fmt: skip

    @admin.action(description="Remove an add-on from selected batches…", permissions=["addon"])
    def remove_addon_batches(self, request, queryset):
        return addon_action(
            self, request, queryset, target="batch_id", what="batches",
            action_name="remove_addon_batches", add=False,
        )  # fmt: skip

    @admin.action(description="Convert selected trial batches to paid…", permissions=["convert"])
    def convert_trial_batches(self, request, queryset):
        return convert_trials(self, request, queryset)
