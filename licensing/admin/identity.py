"""Suspected clones in the operator console (issue 45): the evidence beside the
original unit, and the action that revokes the copy, never the original."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils.html import format_html, format_html_join

from config.admin.base import ReadOnlyAdmin, may
from config.admin.display import customer_link
from config.errors import ServiceError
from licensing import clones, identity
from licensing.admin.display import admin_link
from licensing.models import CloneSuspicion, Rebinding
from svccore import dates


def components_html(components: dict[str, str] | None):
    """Hashed components, one per line: name and the start of its digest (the rest in
    the title), weak ones marked."""
    if not components:
        return "none reported"
    return format_html_join(
        "",
        '<div class="svc-nowrap"><code title="{}">{} {}…</code>{}</div>',
        (
            (digest, name, digest[:16], " (weak)" if identity.rules.is_weak(name) else "")
            for name, digest in sorted(components.items())
        ),
    )


@admin.register(CloneSuspicion)
class CloneSuspicionAdmin(ReadOnlyAdmin):
    """A unit's licence presented by hardware below its policy: a copy of a camera's
    state, or a repair past the rebinding bound; or its very components from two
    addresses in turn (a bit-for-bit copy). The original is the unit's first activation;
    revoking the copy refuses its components (or its address) from then on."""

    list_display = [
        "detected_at",
        "license_link",
        "customer",
        "device_id",
        "client_ip",
        "evidence_text",
        "original",
        "copy_state",
    ]
    list_select_related = ["activation", "activation__license", "activation__license__customer"]
    search_fields = ["=device_id", "=activation__license__id", "=activation__batch__id"]
    list_filter = ["detected_at"]
    actions = ["revoke_copies"]
    fields = [
        "detected_at",
        "license_link",
        "device_id",
        "client_ip",
        "evidence_text",
        "copy_components",
        "original",
        "original_components",
        "copy_state",
    ]

    @admin.display(description="licence", ordering="activation__license__id")
    def license_link(self, record: CloneSuspicion):
        return admin_link(record.activation.license)

    @admin.display(description="customer")
    def customer(self, record: CloneSuspicion):
        customer = record.activation.license.customer
        return customer_link(customer)

    @admin.display(description="evidence")
    def evidence_text(self, record: CloneSuspicion) -> str:
        return clones.evidence_text(record.evidence or {})

    @admin.display(description="original (first activation)")
    def original(self, record: CloneSuspicion):
        unit = record.activation
        return format_html(
            "{} since {}<br>{}",
            admin_link(unit, unit.device_id),
            dates.moment(unit.activated_at),
            unit.client_ip or "address not recorded",
        )

    @admin.display(description="copy's components")
    def copy_components(self, record: CloneSuspicion):
        return components_html(record.components)

    @admin.display(description="original's components")
    def original_components(self, record: CloneSuspicion):
        return components_html(record.activation.components)

    @admin.display(description="copy", ordering="copy_revoked_at")
    def copy_state(self, record: CloneSuspicion):
        if record.copy_revoked_at is None:
            return format_html('<span class="svc-red">{}</span>', "suspected")
        return f"revoked {dates.moment(record.copy_revoked_at)}"

    def has_revoke_permission(self, request) -> bool:
        return may(request, "revoke_licences")

    @admin.action(
        description="Revoke the selected copies (never the originals)", permissions=["revoke"]
    )
    def revoke_copies(self, request, queryset):
        done = 0
        for suspicion_id in queryset.values_list("pk", flat=True):
            try:
                clones.clone_copy_revoke(suspicion_id=suspicion_id)
                done += 1
            except ServiceError as exc:
                self.message_user(request, exc.detail, messages.ERROR)
        self.message_user(
            request,
            f"Revoked {done} cop{'y' if done == 1 else 'ies'}: their components are refused "
            "for the licence from now on; the originals keep their licences.",
            messages.SUCCESS,
        )


def rebinding_history_html(activation_id: int):
    rebindings = identity.rebind_history(activation_id)
    if not rebindings:
        return "never rebound"
    return format_html_join(
        "",
        "<div>{} via {}: {} (device {} → {})</div>",
        (
            (
                dates.moment(r.rebound_at),
                r.via,
                ", ".join(r.changed) or "no component changed",
                r.old_device_id,
                r.new_device_id,
            )
            for r in rebindings
        ),
    )


@admin.register(Rebinding)
class RebindingAdmin(ReadOnlyAdmin):
    """Licences moved to a repaired camera's changed components, without a seat."""

    list_display = ["rebound_at", "unit", "old_device_id", "new_device_id", "changed_text", "via"]
    list_select_related = ["activation"]
    search_fields = ["=old_device_id", "=new_device_id", "=activation__license__id"]
    list_filter = ["via", "rebound_at"]

    @admin.display(description="unit")
    def unit(self, record: Rebinding):
        return admin_link(record.activation, record.activation.license_id)

    @admin.display(description="changed")
    def changed_text(self, record: Rebinding) -> str:
        return ", ".join(record.changed) or "none"
