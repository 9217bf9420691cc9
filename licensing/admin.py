"""Catalogue, batches, licences and the fleet in the operator console.

Batches and licences are issued and revoked through the services the API uses
(``batch_issue``, ``license_issue``, ``license_revoke``); no admin page saves them
directly. The signing key never reaches the database, so no page can show it; tokens
are shown (with a copy button) because an operator sends them to customers. Signing keys
(public halves and certificates) are listed read-only and retired or revoked through
``signing_key_retire`` / ``signing_key_revoke``.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django import forms
from django.contrib import admin, messages
from django.db.models import F
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from config import clock
from config.adminbase import (
    IndexedSearchMixin,
    LicenseRevokeMixin,
    NoEditAdmin,
    ReadOnlyAdmin,
    ReasonForm,
    choices_filter,
    confirm_page,
    money,
    pretty_json,
    revoke_with_reason,
    service_form_view,
    utc_time,
)
from config.errors import ServiceError
from customers.models import Customer
from devices import states
from devices.hardware import SOURCES
from licensing import signing
from licensing.models import (
    NEAR_EXHAUSTION_PERCENT,
    Activation,
    Batch,
    License,
    Renewal,
    Revocation,
    SeatRelease,
    SigningKey,
    Sku,
    is_near_exhaustion,
    near_exhaustion_condition,
)
from licensing.renewals import license_renew
from licensing.seats import ReleasePolicy, seat_release
from licensing.services import (
    batch_issue,
    license_issue,
    license_revoke,
    signing_key_retire,
    signing_key_revoke,
)
from svccore.claims import API_QUOTA_MAX, DEVICE_ID_MAX, MAX_STREAMS_MAX, TERM_DAYS_MAX, UNITS_MAX

# --- display helpers -----------------------------------------------------------------


def progress_bar(*, activated: int, purchased: int):
    """A bar of the units activated out of those purchased, red near exhaustion, then
    ``9/10``; it never wraps."""
    share = activated / purchased if purchased else 0
    near = is_near_exhaustion(activated=activated, purchased=purchased)
    colour = "#ba2121" if near else "#417690"
    return format_html(
        '<span class="svc-progress{}" title="{} of {} units activated">'
        '<span class="svc-progress-bar">'
        '<span style="width:{}%;background:{}"></span></span>'
        ' <span style="color:{}">{}</span></span>',
        " near-exhaustion" if near else "",
        activated,
        purchased,
        f"{share * 100:.0f}",
        colour,
        colour if near else "inherit",
        f"{activated}/{purchased}",
    )


def copyable(text: str, *, element_id: str):
    return format_html(
        '<textarea id="{}" class="svc-token" readonly rows="4">{}</textarea><br>'
        '<button type="button" class="button" onclick="var t=document.getElementById(\'{}\');'
        "t.select();if(navigator.clipboard){{navigator.clipboard.writeText(t.value);}}"
        "else{{document.execCommand('copy');}}this.textContent='Copied';\">Copy</button>",
        element_id,
        text,
        element_id,
    )


def revoked_or_valid(lic: License, *, full: bool = False):
    """The licence's revocation: "valid", or "revoked" in red with when and why as a
    tooltip (``full``: also written out after it)."""
    if lic.revoked_at is None:
        return "valid"
    why = f"{utc_time(lic.revoked_at)}: {lic.revoke_reason or 'no reason given'}"
    return format_html(
        '<span class="svc-red" title="{}">revoked</span>{}', why, f" {why}" if full else ""
    )


# What the console calls each state of devices.license_state.
LICENSE_STATE_WORDS = {
    states.NOT_YET_VALID: "not yet valid",
    states.ACTIVE: "active",
    states.GRACE: "grace",
    states.EXPIRED: "expired",
    states.REVOKED: "revoked",
}


def license_state(lic: License, now: dt.datetime | None = None) -> str:
    """The licence's state as a device would see it (spec §3, from its signed claims),
    or revoked; "active (perpetual)" for an ``exp`` of 0."""
    moment = (now or clock.now()).timestamp()
    state = states.license_state(lic.claims, moment, revoked=lic.revoked_at is not None)
    if state == states.ACTIVE and not lic.claims["exp"]:
        return "active (perpetual)"
    return LICENSE_STATE_WORDS[state]


def _admin_link(obj, label: str | None = None):
    if obj is None:
        return "-"
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, label or obj.pk)


# --- forms of the issue pages ----------------------------------------------------------


def _sku_choices():
    return [(code, code) for code in Sku.objects.order_by("code").values_list("code", flat=True)]


class BatchIssueForm(forms.Form):
    customer = forms.ModelChoiceField(queryset=Customer.objects.order_by("name"))
    sku = forms.ChoiceField(label="SKU", choices=_sku_choices)
    units = forms.IntegerField(min_value=1, max_value=UNITS_MAX)
    term_days = forms.IntegerField(
        min_value=0,
        max_value=TERM_DAYS_MAX,
        required=False,
        help_text="Empty: the SKU's default term. 0: perpetual.",
    )


class LicenseIssueForm(forms.Form):
    customer = forms.ModelChoiceField(queryset=Customer.objects.order_by("name"))
    sku = forms.ChoiceField(label="SKU", choices=_sku_choices)
    device_id = forms.CharField(
        max_length=DEVICE_ID_MAX, help_text="The camera's fingerprint, or * for an unbound key."
    )
    term_days = forms.IntegerField(
        min_value=0, max_value=TERM_DAYS_MAX, required=False, help_text="Empty: the SKU's term."
    )
    api_quota = forms.IntegerField(
        min_value=0,
        max_value=API_QUOTA_MAX,
        required=False,
        help_text="Empty: the SKU's quota. 0: unmetered.",
    )
    max_streams = forms.IntegerField(
        min_value=1, max_value=MAX_STREAMS_MAX, required=False, help_text="Empty: SKU cap."
    )
    activation = forms.ChoiceField(
        choices=License.Activation.choices,
        initial=License.Activation.OPTIONAL,
        help_text="optional: works air-gapped without contacting the service.",
    )


# --- catalogue -------------------------------------------------------------------------


@admin.register(Sku)
class SkuAdmin(admin.ModelAdmin):
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
        "allowance_per_unit",
        "unit_prices",
    ]
    list_filter = ["currency", "term_days"]
    search_fields = ["code", "name"]

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


# --- batches ---------------------------------------------------------------------------


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
class BatchAdmin(LicenseRevokeMixin, NoEditAdmin):
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
    list_filter = [NearExhaustionFilter, "sku", "issued_at"]
    empty_times = {"expires_at": "perpetual"}
    search_fields = ["id", "customer__id", "customer__name", "license__id"]
    list_select_related = ["customer", "license"]
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
        "license_link",
        "key_state_full",
        "batch_key",
        "key_claims",
    ]
    readonly_fields = fields
    actions = ["revoke_batch_keys", "renew_batches"]

    @admin.display(description="customer", ordering="customer__name")
    def customer_link(self, batch: Batch):
        return _admin_link(batch.customer, str(batch.customer))

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
        return _admin_link(batch.license)

    @admin.display(description="batch id", ordering="id")
    def batch_id(self, batch: Batch):
        if batch.license.revoked_at is None:
            return batch.id
        return format_html('{}<br><span class="svc-red">key revoked</span>', batch.id)

    @admin.display(description="customer", ordering="customer__name")
    def customer_name(self, batch: Batch):
        url = reverse("admin:customers_customer_change", args=[batch.customer_id])
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
            batch = batch_issue(
                customer_id=data["customer"].pk,
                sku=data["sku"],
                units=data["units"],
                term_days=data["term_days"],
            )
            self.message_user(
                request,
                f"Batch {batch.id} issued: {batch.units_purchased} units of {batch.sku} at "
                f"{batch.unit_price} {batch.currency}. Copy the batch key below for the customer.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(reverse("admin:licensing_batch_change", args=[batch.pk]))

        return service_form_view(
            self,
            request,
            form_class=BatchIssueForm,
            title="Issue batch",
            intro="Sell a customer a batch of units: one batch key, exchanged by each camera "
            "for its own licence on first boot. The unit price is fixed now from the volume tier.",
            perform=perform,
            submit_label="Issue batch",
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

    @admin.action(description="Renew selected batches for another term…", permissions=["revoke"])
    def renew_batches(self, request, queryset):
        return renew_with_term(self, request, queryset, target="batch_id", what="batches")


# --- renewals (issue 16) ----------------------------------------------------------------


class RenewForm(forms.Form):
    term_days = forms.IntegerField(
        min_value=1,
        max_value=TERM_DAYS_MAX,
        required=False,
        label="Term (days)",
        widget=forms.NumberInput(attrs={"autofocus": True}),
        help_text="Days to add; empty: each SKU's term. Before its end the term runs from "
        "that end; after it but within grace, from the old end; after grace, from now.",
    )
    # Made when the form is first shown: a form posted twice renews once.
    request_key = forms.CharField(widget=forms.HiddenInput, max_length=64)


ONE = {"batches": "batch", "licences": "licence"}


def renew_with_term(model_admin, request, queryset, *, target: str, what: str):
    """An admin action that asks for the term first, then renews each selected batch or
    direct licence through ``license_renew``, one idempotency key per row and form."""
    posted = "apply" in request.POST
    form = RenewForm(request.POST if posted else None, initial={"request_key": uuid.uuid4().hex})
    if posted and form.is_valid():
        done = 0
        for row in queryset:
            try:
                result = license_renew(
                    idempotency_key=f"admin-{form.cleaned_data['request_key']}-{row.pk}",
                    term_days=form.cleaned_data["term_days"],
                    **{target: row.pk},
                )
            except ServiceError as exc:
                model_admin.message_user(request, exc.detail, messages.ERROR)
                continue
            done += not result.replayed
        if done:
            model_admin.message_user(
                request,
                f"Renewed {done} {what if done > 1 else ONE[what]}; billed once each as a "
                "renewal line. Cameras fetch "
                "their renewed licences at their next sync.",
            )
        return None
    return confirm_page(
        model_admin,
        request,
        queryset,
        template="admin/renew_confirm.html",
        title=f"Renew {what}",
        form=form,
        action_name=request.POST.get("action", ""),
        rows=list(queryset),
    )


# --- licences --------------------------------------------------------------------------


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


def _catalogue_skus() -> list[tuple[str, str]]:
    return [(code, code) for code in Sku.objects.order_by("code").values_list("code", flat=True)]


# The SKUs of the catalogue, not a SELECT DISTINCT over millions of licences.
LicenseSkuFilter = choices_filter("sku", "SKU", _catalogue_skus)
# The fingerprint sources a device reports (devices.hardware), not a SELECT DISTINCT.
FingerprintSourceFilter = choices_filter(
    "fingerprint_source", "fingerprint source", lambda: [(s, s) for s in SOURCES]
)


class ActivationModeFilter(admin.SimpleListFilter):
    title = "activation"
    parameter_name = "activation"

    def lookups(self, request, model_admin):
        return License.Activation.choices

    def queryset(self, request, queryset):
        if self.value() == License.Activation.REQUIRED:
            # Units are always optional (licensing.activation signs them so): saying it
            # lets the small index of the other kinds serve this filter.
            return queryset.exclude(kind=License.Kind.UNIT).filter(activation=self.value())
        if self.value() is not None:
            return queryset.filter(activation=self.value())
        return queryset


@admin.register(License)
class LicenseAdmin(IndexedSearchMixin, LicenseRevokeMixin, NoEditAdmin):
    # What finds a licence and says whether it works, narrow enough for a 1000 px window
    # (licence and customer ids are long); the SKU, activation mode and issue time are
    # filters and on the licence's page.
    list_display = ["id", "kind", "customer_link", "device_id", "expires_at", "state"]
    # Each filter has an index (licensing.models, issue 15); the issue time is a date
    # filter, not a date hierarchy (whose year links read every row).
    list_filter = ["kind", RevokedFilter, LicenseSkuFilter, ActivationModeFilter, "issued_at"]
    empty_times = {"expires_at": "perpetual", "revoked_at": "not revoked"}
    # A licence, batch or customer id whole, or part of a customer's name; else device
    # ids by their start, in device-id order (config.adminbase.IndexedSearchMixin).
    search_exact = ("id", "batch_id")
    search_related = {"customer": ("=id", "name")}
    search_prefix = "device_id"
    list_select_related = ["customer", "batch"]
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
        "unit_price_shown",
        "state",
        "revoked_at",
        "revoke_reason",
        "license_token",
        "token_claims",
    ]
    readonly_fields = fields
    actions = ["revoke_licenses", "renew_licenses"]

    @admin.display(description="customer", ordering="customer__name")
    def customer_link(self, lic: License):
        return _admin_link(lic.customer, str(lic.customer))

    @admin.display(description="batch")
    def batch_link(self, lic: License):
        return _admin_link(lic.batch)

    @admin.display(description="state")
    def state(self, lic: License):
        state = license_state(lic)
        return format_html('<span class="svc-red">{}</span>', state) if lic.revoked_at else state

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
        def perform(data):
            lic = license_issue(
                customer_id=data["customer"].pk,
                sku=data["sku"],
                device_id=data["device_id"],
                term_days=data["term_days"],
                api_quota=data["api_quota"],
                max_streams=data["max_streams"],
                activation=data["activation"],
            )
            self.message_user(
                request,
                f"Licence {lic.id} issued for device {lic.device_id}.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(reverse("admin:licensing_license_change", args=[lic.pk]))

        return service_form_view(
            self,
            request,
            form_class=LicenseIssueForm,
            title="Issue licence",
            intro="A direct licence for one camera (the end-user path), priced at one unit.",
            perform=perform,
            submit_label="Issue licence",
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

    @admin.action(
        description="Renew selected direct licences for another term…", permissions=["revoke"]
    )
    def renew_licenses(self, request, queryset):
        return renew_with_term(self, request, queryset, target="license_id", what="licences")


# --- fleet -----------------------------------------------------------------------------


@admin.register(Activation)
class ActivationAdmin(IndexedSearchMixin, LicenseRevokeMixin, ReadOnlyAdmin):
    # The fleet at a glance in a 1000 px window: which device, whose, how well bound,
    # since when and whether its licence still works. The licence, fingerprint source,
    # SDK version and client address are on the activation's page, the SKU on its
    # batch's (SKU and source are filters too).
    list_display = [
        "device_id",
        "batch_link",
        "customer",
        "weak_binding",
        "activated_at",
        "revoked",
    ]
    # Each filter has an index (licensing.models, issue 15); the activation time is a
    # date filter, not a date hierarchy (whose year links read every row).
    list_filter = ["weak_binding", FingerprintSourceFilter, "batch__sku", "activated_at"]
    # A licence id whole, a batch by its id, its customer's id or part of the
    # customer's name; else device ids by their start, in device-id order
    # (config.adminbase.IndexedSearchMixin).
    search_exact = ("license_id",)
    search_related = {"batch": ("=id", "=customer__id", "customer__name")}
    search_prefix = "device_id"
    list_select_related = ["batch", "batch__customer", "license", "license__seat_release"]
    actions = ["revoke_units", "release_seats"]

    def lookup_allowed(self, lookup, value, request=None):
        # A customer's fleet, linked from its page (customers.admin), without a filter
        # listing every customer.
        return lookup == "batch__customer__id__exact" or super().lookup_allowed(
            lookup, value, request
        )

    @admin.display(description="licence", ordering="license__id")
    def license_link(self, record: Activation):
        return _admin_link(record.license)

    @admin.display(description="batch", ordering="batch__id")
    def batch_link(self, record: Activation):
        return _admin_link(record.batch)

    @admin.display(description="customer", ordering="batch__customer__name")
    def customer(self, record: Activation):
        return _admin_link(record.batch.customer, str(record.batch.customer))

    @admin.display(description="SKU", ordering="batch__sku")
    def sku(self, record: Activation) -> str:
        return record.batch.sku

    @admin.display(description="licence state", ordering="license__revoked_at")
    def revoked(self, record: Activation):
        state = revoked_or_valid(record.license)
        if hasattr(record.license, "seat_release"):
            state = format_html('{} <span class="svc-nowrap">(seat released)</span>', state)
        if record.transfer_of_id:
            state = format_html('{} <span class="svc-nowrap">(transfer)</span>', state)
        return state

    @admin.action(description="Revoke unit licences of selected devices…", permissions=["revoke"])
    def revoke_units(self, request, queryset):
        return revoke_with_reason(
            self,
            request,
            queryset,
            license_id_of=lambda record: record.license_id,
            revoke=license_revoke,
            action_name="revoke_units",
            what="unit licences",
        )

    @admin.action(
        description="Release seats of selected devices (dead or replaced cameras)…",
        permissions=["revoke"],
    )
    def release_seats(self, request, queryset):
        return revoke_with_reason(
            self,
            request,
            queryset,
            license_id_of=lambda record: record.license_id,
            revoke=seat_release,
            action_name="release_seats",
            what="seats",
            verb="Release",
            message="Released {n} {what}: the units are revoked and the next cameras "
            "activated on their batches take the seats as transfers, not billed again.",
            template="admin/seat_release_confirm.html",
            explanation={"policy": _policy_text()},
        )


def _policy_text() -> str:
    policy = ReleasePolicy.configured()
    return f"{policy.percent:g}% of a batch's units, at least one, per {policy.days} days"


@admin.register(SeatRelease)
class SeatReleaseAdmin(ReadOnlyAdmin):
    """Seats operators gave back to their batches, and the activation that took each."""

    list_display = ["released_at", "device_id", "license_link", "batch_link", "reason", "taken_by"]
    list_select_related = ["batch", "license", "replacement"]
    search_fields = ["=device_id", "=license__id", "=batch__id"]
    date_hierarchy = "released_at"

    @admin.display(description="licence", ordering="license__id")
    def license_link(self, release: SeatRelease):
        return _admin_link(release.license)

    @admin.display(description="batch", ordering="batch__id")
    def batch_link(self, release: SeatRelease):
        return _admin_link(release.batch)

    @admin.display(description="taken by")
    def taken_by(self, release: SeatRelease) -> str:
        replacement = getattr(release, "replacement", None)
        return replacement.device_id if replacement else "free (the next activation)"


@admin.register(Renewal)
class RenewalAdmin(ReadOnlyAdmin):
    """Batches and direct licences renewed in place, and what each is billed once."""

    list_display = [
        "renewed_at",
        "batch_or_license",
        "customer_link",
        "sku",
        "basis",
        "previous_expires_at",
        "expires_at",
        "units",
    ]
    list_select_related = ["customer", "batch", "license"]
    search_fields = ["=batch__id", "=license__id", "=customer__id", "=idempotency_key"]
    list_filter = ["basis", "renewed_at"]

    @admin.display(description="batch or licence")
    def batch_or_license(self, renewal: Renewal):
        return _admin_link(renewal.batch or renewal.license)

    @admin.display(description="customer", ordering="customer__name")
    def customer_link(self, renewal: Renewal):
        return _admin_link(renewal.customer, renewal.customer.name)


@admin.register(Revocation)
class RevocationAdmin(ReadOnlyAdmin):
    """The revocation list as devices page through it; entries come only from revoking."""

    list_display = ["seq", "license_id", "revoked_at", "usable_until"]
    unix_time_fields = ("usable_until",)
    search_fields = ["=license_id"]
    # A list of a million entries: no COUNT(*) on every page view.
    show_full_result_count = False


# --- signing keys ------------------------------------------------------------------------


@admin.register(SigningKey)
class SigningKeyAdmin(ReadOnlyAdmin):
    """Every key of the authority with its state; rows come from ``key_install`` and the
    server registering its configured key, and change only through the key services."""

    list_display = [
        "kid",
        "use_short",
        "state",
        "valid_from",
        "valid_until",
        "retired_at",
        "revoked_at",
    ]
    list_filter = ["use"]
    search_fields = ["=kid", "fingerprint"]
    fields = [
        "kid",
        "use",
        "state",
        "fingerprint",
        "public_key",
        "valid_from",
        "valid_until",
        "created_at",
        "retired_at",
        "revoked_at",
        "revoke_reason",
        "key_certificate",
    ]
    readonly_fields = fields
    actions = ["retire_keys", "revoke_keys"]

    def has_revoke_permission(self, request) -> bool:
        return request.user.has_perm("licensing.change_signingkey")

    @admin.display(description="state")
    def state(self, key: SigningKey) -> str:
        return signing.key_state(key)

    @admin.display(description="use", ordering="use")
    def use_short(self, key: SigningKey) -> str:
        return key.use

    @admin.display(description="valid from", ordering="not_before")
    def valid_from(self, key: SigningKey) -> str:
        if not key.certificate:
            return "not certified"
        return utc_time(key.not_before) if key.not_before else "any time"

    @admin.display(description="valid until", ordering="not_after")
    def valid_until(self, key: SigningKey) -> str:
        return utc_time(key.not_after) if key.not_after else "no end"

    @admin.display(description="certificate")
    def key_certificate(self, key: SigningKey):
        return copyable(key.certificate, element_id="key-certificate") if key.certificate else "-"

    @admin.action(description="Retire selected keys (sign nothing more)", permissions=["revoke"])
    def retire_keys(self, request, queryset):
        done = 0
        for key in queryset:
            try:
                signing_key_retire(kid=key.kid)
                done += 1
            except ServiceError as exc:
                self.message_user(request, exc.detail, messages.ERROR)
        if done:
            self.message_user(
                request,
                f"Retired {done} signing keys; what they signed keeps verifying until it expires.",
            )

    @admin.action(description="Revoke selected keys…", permissions=["revoke"])
    def revoke_keys(self, request, queryset):
        form = ReasonForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            done = 0
            for key in queryset:
                try:
                    signing_key_revoke(kid=key.kid, reason=form.cleaned_data["reason"])
                    done += 1
                except ServiceError as exc:
                    self.message_user(request, exc.detail, messages.ERROR)
            if done:
                self.message_user(
                    request,
                    f"Revoked {done} signing keys; nothing they signed is accepted any more, "
                    "and devices refuse them at their next sync.",
                )
            return None
        return confirm_page(
            self,
            request,
            queryset,
            template="admin/key_revoke_confirm.html",
            title="Revoke signing keys",
            form=form,
            action_name="revoke_keys",
            rows=[],
            keys=list(queryset),
        )
