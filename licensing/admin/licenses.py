"""Licences: state, tokens, revocation and renewal."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.utils.html import format_html

from config.admin.base import (
    NoEditAdmin,
    choices_filter,
    service_form_view,
)
from config.admin.display import admin_url, customer_link, money, pretty_json, utc_time
from config.drafts import drafted
from licensing.admin.addons import AddOnMixin, addon_action, grants_shown
from licensing.admin.display import (
    admin_link,
    copyable,
    unit_state_badge,
)
from licensing.admin.forms import (
    LicenseIssueForm,
    renew_with_term,
)
from licensing.admin.holding import HoldMixin, LeaseStateMixin, hold_action
from licensing.admin.revoking import LicenseRevokeMixin, revoke_with_reason
from licensing.admin.search import AnyPartSearchMixin
from licensing.models import (
    License,
    Sku,
)
from licensing.services import (
    license_issue,
    license_revoke,
)
from licensing.unit_states import unit_state_of


class RevokedFilter(admin.SimpleListFilter):
    title = "revoked"
    parameter_name = "revoked"

    def lookups(self, request, model_admin):
        return [("yes", "revoked"), ("no", "not revoked")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(revoked_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(revoked_at__isnull=True)
        return queryset


def catalogue_skus() -> list[tuple[str, str]]:
    return [(code, code) for code in Sku.objects.order_by("code").values_list("code", flat=True)]


# The SKUs of the catalogue, not a SELECT DISTINCT over millions of licences.
LicenseSkuFilter = choices_filter("sku", "SKU", catalogue_skus)


class ActivationModeFilter(admin.SimpleListFilter):
    title = "activation"
    parameter_name = "activation"

    def lookups(self, request, model_admin):
        return License.Activation.choices

    def queryset(self, request, queryset):
        if self.value() == License.Activation.REQUIRED:
            # Units are always optional (licensing.services.activation signs them so): saying it
            # lets the small index of the other kinds serve this filter.
            return queryset.exclude(kind=License.Kind.UNIT).filter(activation=self.value())
        if self.value() is not None:
            return queryset.filter(activation=self.value())
        return queryset


@admin.register(License)
class LicenseAdmin(
    LeaseStateMixin, AnyPartSearchMixin, LicenseRevokeMixin, HoldMixin, AddOnMixin, NoEditAdmin
):
    add_capability = "issue_licences"
    # What finds a licence and says whether it works, narrow enough for a 1000 px window
    # (licence and customer ids are long); the SKU, activation mode and issue time are
    # filters and on the licence's page.
    list_display = ["id", "kind", "customer_link", "device_id", "expires_at", "state"]
    # Each filter has an index (licensing.models, issue 15); the issue time is a date
    # filter, not a date hierarchy (whose year links read every row).
    list_filter = ["kind", RevokedFilter, LicenseSkuFilter, ActivationModeFilter, "issued_at"]
    empty_times = {"expires_at": "perpetual", "revoked_at": "not revoked"}
    # A licence, batch or customer id whole, or part of a customer's name; else any part
    # of a device id or licence id, any case, in device-id order
    # (licensing.admin.search.AnyPartSearchMixin).
    search_exact = ("id", "batch_id")
    search_related = {"customer": ("=id", "name")}
    search_contains = ("device_id", "id")
    list_select_related = ["customer", "batch", "seat_release"]
    fields = [
        "id",
        "kind",
        "customer_link",
        "sku",
        "device_id",
        "activation",
        "batch_link",
        "issued_at",
        "expires_at",
        "grace_days",
        "max_offline_days",
        "checked_in_at",
        "unit_price_shown",
        "state",
        "addons",
        "revoked_at",
        "revoke_reason",
        "license_token",
        "token_claims",
    ]
    readonly_fields = fields
    actions = [
        "revoke_licenses",
        "renew_licenses",
        "suspend_licenses",
        "reinstate_licenses",
        "add_addon_licenses",
        "remove_addon_licenses",
    ]

    @admin.display(description="customer", ordering="customer__name")
    def customer_link(self, lic: License):
        return customer_link(lic.customer)

    @admin.display(description="batch")
    def batch_link(self, lic: License):
        return admin_link(lic.batch)

    @admin.display(description="state")
    def state(self, lic: License):
        # The portal's words and colours (licensing.unit_states); a perpetual term is the
        # term's end beside the state, not a state of its own.
        badge = unit_state_badge(unit_state_of(lic, source=self.lease_source(lic)))
        if lic.expires_at is None and lic.revoked_at is None:
            return format_html('{} <span class="svc-nowrap">(no end)</span>', badge)
        return badge

    @admin.display(description="add-ons")
    def addons(self, lic: License):
        if lic.kind == License.Kind.DIRECT:
            return grants_shown(lic.pk)
        if lic.kind == License.Kind.UNIT:
            batch = lic.batch
            carries = (
                "carries"
                if lic.addons_version == batch.addons_version
                else "receives at its next sync"
            )
            return format_html(
                "its batch's, which it {}: {}", carries, grants_shown(batch.license_id)
            )
        return "the batch's (on the batch's page)" if lic.kind == License.Kind.BATCH_KEY else "none"

    @admin.display(description="unit price", ordering="unit_price")
    def unit_price_shown(self, lic: License) -> str | None:
        return money(lic.unit_price, lic.currency) or None

    @admin.display(description="token")
    def license_token(self, lic: License):
        return copyable(lic.token, element_id="licence-token")

    @admin.display(description="claims")
    def token_claims(self, lic: License):
        return pretty_json(lic.claims)

    def add_view(self, request, form_url="", extra_context=None):
        def issued(data) -> License:
            return license_issue(
                customer_id=data["customer"].pk,
                sku=data["sku"],
                device_id=data["device_id"],
                term_days=data["term_days"],
                api_quota=data["api_quota"],
                max_streams=data["max_streams"],
                activation=data["activation"],
                max_offline_days=data["max_offline_days"],
            )

        def confirm(data):
            # The licence as issuing it would make it (price, end), then rolled back.
            lic = drafted(lambda: issued(data), lambda lic: lic)
            price = money(lic.unit_price, lic.currency) if lic.unit_price is not None else ""
            return format_html(
                "<p>Issue a <strong>{}</strong> licence for device <strong>{}</strong> to "
                "<strong>{}</strong>: <strong id='confirm-amount'>{}</strong>, billed on the "
                "customer's next invoice. It {}.</p>",
                lic.sku,
                lic.device_id,
                data["customer"],
                price or "no charge",
                f"ends {utc_time(lic.expires_at)}" if lic.expires_at else "never ends (perpetual)",
            ), f"Yes, issue the licence ({price or 'no charge'})"

        def perform(data):
            lic = issued(data)
            self.message_user(
                request,
                f"Licence {lic.id} issued for device {lic.device_id}.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(admin_url("licensing_license_change", lic.pk))

        return service_form_view(
            self,
            request,
            form_class=LicenseIssueForm,
            title="Issue licence",
            intro="A direct licence for one camera (the end-user path), priced at one unit.",
            perform=perform,
            submit_label="Check the licence…",
            confirm=confirm,
        )

    @admin.action(description="Revoke selected licences…", permissions=["revoke"])
    def revoke_licenses(self, request, queryset):
        return revoke_with_reason(
            self,
            request,
            queryset,
            license_id_of=lambda lic: lic.pk,
            revoke=license_revoke,
            action_name="revoke_licenses",
            what="licences",
        )

    @admin.action(description="Suspend selected licences…", permissions=["suspend"])
    def suspend_licenses(self, request, queryset):
        return hold_action(
            self, request, queryset, scope="license_id", id_of=lambda lic: lic.pk,
            action_name="suspend_licenses", what="licences", suspend=True,
        )  # fmt: skip

    @admin.action(description="Reinstate selected licences…", permissions=["suspend"])
    def reinstate_licenses(self, request, queryset):
        return hold_action(
            self, request, queryset, scope="license_id", id_of=lambda lic: lic.pk,
            action_name="reinstate_licenses", what="licences", suspend=False,
        )  # fmt: skip

    @admin.action(
        description="Renew selected direct licences for another term…", permissions=["renew"]
    )
    def renew_licenses(self, request, queryset):
        return renew_with_term(self, request, queryset, target="license_id", what="licences")

    @admin.action(description="Add an add-on to selected direct licences…", permissions=["addon"])
    def add_addon_licenses(self, request, queryset):
        return addon_action(
            self, request, queryset, target="license_id", what="licences",
            action_name="add_addon_licenses", add=True,
        )  # fmt: skip

    @admin.action(
        description="Remove an add-on from selected direct licences…", permissions=["addon"]
    )
    def remove_addon_licenses(self, request, queryset):
        return addon_action(
            self, request, queryset, target="license_id", what="licences",
            action_name="remove_addon_licenses", add=False,
        )  # fmt: skip
