"""The fleet: activations, seat releases and renewals."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.utils.html import format_html

from config import clock
from config.admin.base import (
    ReadOnlyAdmin,
    choices_filter,
)
from config.admin.display import customer_link, money
from devices.hardware import REPORTED_SOURCES
from licensing import leases
from licensing.admin.display import (
    admin_link,
    unit_state_badge,
)
from licensing.admin.holding import LeaseStateMixin
from licensing.admin.identity import components_html, rebinding_history_html
from licensing.admin.revoking import LicenseRevokeMixin, revoke_with_reason
from licensing.admin.search import AnyPartSearchMixin
from licensing.fleet_serializers import NOT_SEEN_DAYS_MAX
from licensing.models import (
    Activation,
    Renewal,
    SeatRelease,
)
from licensing.selectors import not_seen_since
from licensing.services import (
    license_revoke,
)
from licensing.services.seats import ReleasePolicy, seat_release
from licensing.unit_states import unit_state_of

# Every fingerprint source a device reports (devices.hardware, "explicit" for an id its
# caller gave), not a SELECT DISTINCT.
FingerprintSourceFilter = choices_filter(
    "fingerprint_source", "fingerprint source", lambda: [(s, s) for s in REPORTED_SOURCES]
)


class NotSeenFilter(admin.SimpleListFilter):
    """Units not seen for more than a number of days (issue 42), never-seen ones
    included; the parameter is the API's (``not_seen_days``)."""

    title = "last seen"  # Django shows "By last seen"
    parameter_name = "not_seen_days"
    DAYS = (1, 7, 30, 90)

    def lookups(self, request, model_admin):
        # "never" units are in every choice: they were not seen in those days either.
        return [
            (str(days), f"more than {days} day{'s' if days > 1 else ''} ago, or never")
            for days in self.DAYS
        ]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if not value.isascii() or not value.isdigit() or int(value) > NOT_SEEN_DAYS_MAX:
            # A hand-typed value: Django's admin answers IncorrectLookupParameters
            # with its "?e=1" page, never a 500.
            raise IncorrectLookupParameters(f"not_seen_days: not a number of days: {value!r}")
        return queryset.filter(not_seen_since(int(value)))


class PastLeaseFilter(admin.SimpleListFilter):
    """Units whose check-in lease ended (issue 42): the camera refuses analytics until it
    syncs (:func:`licensing.leases.past_lease`)."""

    title = "lease"  # Django shows "By lease"
    parameter_name = "past_lease"

    def lookups(self, request, model_admin):
        return [("1", "silent beyond its lease")]

    def queryset(self, request, queryset):
        if self.value() is None:
            return queryset
        if self.value() != "1":
            raise IncorrectLookupParameters(f"past_lease: only 1 is known: {self.value()!r}")
        return leases.past_lease(queryset, now=clock.now())


@admin.register(Activation)
class ActivationAdmin(LeaseStateMixin, AnyPartSearchMixin, LicenseRevokeMixin, ReadOnlyAdmin):
    lease_license_id = "license_id"
    # The fleet at a glance in a 1000 px window: which device, whose, how well bound,
    # since when and whether its licence still works. The licence, fingerprint source,
    # SDK version and client address are on the activation's page, the SKU on its
    # batch's (SKU and source are filters too).
    list_display = [
        "device_id",
        "batch_and_customer",
        "binding",
        "activated_at",
        "last_seen_at",
        "revoked",
    ]
    empty_times = {"last_seen_at": "never"}
    # Each filter has an index (licensing.models, issue 15); the activation time is a
    # date filter, not a date hierarchy (whose year links read every row).
    list_filter = [
        "weak_binding",
        FingerprintSourceFilter,
        "batch__sku",
        "activated_at",
        NotSeenFilter,
        PastLeaseFilter,
    ]
    # A licence id whole, a batch by its id, its customer's id or part of the
    # customer's name; else any part of a device id, any case, in device-id order
    # (licensing.admin.search.AnyPartSearchMixin).
    search_exact = ("license_id",)
    search_related = {"batch": ("=id", "=customer__id", "customer__name")}
    search_contains = ("device_id",)
    list_select_related = ["batch", "batch__customer", "license", "license__seat_release"]
    actions = ["revoke_units", "release_seats"]

    def lookup_allowed(self, lookup, value, request=None):
        # A customer's fleet, linked from its page (console.admin), without a filter
        # listing every customer.
        # The dashboard's silent units: those not revoked (NotSeenFilter with it).
        return lookup in (
            "batch__customer__id__exact",
            "license__revoked_at__isnull",
        ) or super().lookup_allowed(lookup, value, request)

    @admin.display(description="licence", ordering="license__id")
    def license_link(self, record: Activation):
        return admin_link(record.license)

    @admin.display(description="batch", ordering="batch__id")
    def batch_link(self, record: Activation):
        return admin_link(record.batch)

    @admin.display(description="batch and customer", ordering="batch__id")
    def batch_and_customer(self, record: Activation):
        # One column, the customer under its batch: seven columns beside the filters
        # overflowed a 1280 px window by a few pixels, as many as the ids' letters.
        return format_html(
            '<span class="svc-nowrap">{}</span><br>{}',
            admin_link(record.batch),
            customer_link(record.batch.customer),
        )

    def get_fields(self, request, obj=None):
        # The activation's page says the binding in words too, not the boolean's icon.
        fields = super().get_fields(request, obj)
        # Issue 45: the hashed components and the rebinding history, not raw JSON.
        shown = {
            "weak_binding": "binding",
            "components": "identity_components",
            "components_sha256": "rebinding_history",
        }
        return [shown.get(name, name) if isinstance(name, str) else name for name in fields]

    @admin.display(description="identity components (hashed)")
    def identity_components(self, record: Activation):
        return components_html(record.components)

    @admin.display(description="rebinding history")
    def rebinding_history(self, record: Activation):
        return rebinding_history_html(record.pk)

    @admin.display(description="binding", ordering="weak_binding")
    def binding(self, record: Activation):
        # Words beside the mark: a green tick beside "weak" read as good (issue 45).
        # Strong: a tick; weak: a red cross and the source that makes it weak.
        if not record.weak_binding:
            parts = len(record.components or {})
            return format_html(
                '<span class="svc-nowrap">✓ hardware-bound{}</span>',
                f" ({parts} components)" if parts else "",
            )
        return format_html(
            '<span class="svc-red svc-nowrap">✗ weak: {}</span>',
            record.fingerprint_source or "source not reported",
        )

    @admin.display(description="SKU", ordering="batch__sku")
    def sku(self, record: Activation) -> str:
        return record.batch.sku

    @admin.display(description="state", ordering="license__revoked_at")
    def revoked(self, record: Activation):
        # The unit's state as the portal shows it (licensing.unit_states).
        state = unit_state_badge(unit_state_of(record.license, source=self.lease_source(record)))
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
        permissions=["release"],
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
            message="Released {what}: the units are revoked and the next cameras "
            "activated on their batches take the seats as transfers, not billed again.",
            already="released",
            template="admin/seat_release_confirm.html",
            explanation={"policy": policy_text()},
        )


def policy_text() -> str:
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
        return admin_link(release.license)

    @admin.display(description="batch", ordering="batch__id")
    def batch_link(self, release: SeatRelease):
        return admin_link(release.batch)

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
        "amount",
    ]
    list_select_related = ["customer", "batch", "license"]
    search_fields = ["=batch__id", "=license__id", "=customer__id", "=idempotency_key"]
    list_filter = ["basis", "renewed_at"]

    @admin.display(description="amount billed")
    def amount(self, renewal: Renewal) -> str:
        return money(renewal.units * renewal.unit_price, renewal.currency)

    @admin.display(description="batch or licence")
    def batch_or_license(self, renewal: Renewal):
        return admin_link(renewal.batch or renewal.license)

    @admin.display(description="customer", ordering="customer__name")
    def customer_link(self, renewal: Renewal):
        return admin_link(renewal.customer, renewal.customer.name)
