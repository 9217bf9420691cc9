"""The revocation list and the signing keys (public halves and certificates)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, OuterRef, Subquery
from django.utils.html import format_html

from config.admin.base import ReadOnlyAdmin, confirm_page, may
from config.admin.display import admin_url, counted, utc_time
from config.errors import ServiceError
from licensing.admin.display import (
    copyable,
)
from licensing.admin.revoking import ReasonForm
from licensing.models import License, Revocation
from signing import keyring
from signing.models import SigningKey
from signing.services import signing_key_retire, signing_key_revoke


def _of_license(field: str):
    """The revoked licence's ``field`` for each entry (none for a key's KEY-<kid>): a
    primary-key lookup per listed row, not a join over the list."""
    return Subquery(License.objects.filter(pk=OuterRef("license_id")).values(field)[:1])


@admin.register(Revocation)
class RevocationAdmin(ReadOnlyAdmin):
    """The revocation list, newest first, with whose licence each entry revoked; entries
    come only from revoking."""

    list_display = ["seq", "entry", "customer", "device", "reason", "revoked_at", "usable_until"]
    list_display_links = ["seq"]
    unix_time_fields = ("usable_until",)
    empty_times = {"usable_until": "never (perpetual)"}
    search_fields = ["=license_id"]
    list_filter = ["revoked_at"]
    ordering = ["-seq"]
    # A list of a million entries: no COUNT(*) on every page view.
    show_full_result_count = False

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                _customer_id=_of_license("customer_id"),
                _customer_name=_of_license("customer__name"),
                _device=_of_license("device_id"),
                _reason=_of_license("revoke_reason"),
            )
        )

    @admin.display(description="licence or key", ordering="license_id")
    def entry(self, row: Revocation):
        if row.license_id.startswith("KEY-"):
            kid = row.license_id.removeprefix("KEY-")
            url = admin_url("signing_signingkey_change", kid)
            return format_html('signing key <a href="{}">{}</a>', url, kid)
        if row._customer_id is None:
            return row.license_id
        url = admin_url("licensing_license_change", row.license_id)
        return format_html('<a href="{}">{}</a>', url, row.license_id)

    @admin.display(description="customer")
    def customer(self, row: Revocation):
        if row._customer_id is None:
            return ""
        url = admin_url("customers_customer_change", row._customer_id)
        return format_html('<a href="{}" title="{}">{}</a>', url, row._customer_id,
                           row._customer_name)  # fmt: skip

    @admin.display(description="device")
    def device(self, row: Revocation) -> str:
        return "" if row._device in (None, "*") else row._device

    @admin.display(description="reason")
    def reason(self, row: Revocation) -> str:
        return row._reason or ""


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
        return may(request, "manage_signing_keys")

    @admin.display(description="state")
    def state(self, key: SigningKey) -> str:
        return keyring.key_state(key)

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
        done = unchanged = 0
        for key in queryset:
            try:
                signing_key_retire(kid=key.kid)
            except ServiceError as exc:
                self.message_user(request, exc.detail, messages.ERROR)
                continue
            # Retiring again changes nothing: not counted as done.
            done, unchanged = (done, unchanged + 1) if key.retired_at else (done + 1, unchanged)
        if done:
            self.message_user(
                request,
                f"Retired {counted(done, 'signing key')}; what they signed keeps verifying "
                "until it expires.",
            )
        _unchanged_message(self, request, unchanged, "retired")

    @admin.action(description="Revoke selected keys…", permissions=["revoke"])
    def revoke_keys(self, request, queryset):
        keys = list(queryset)
        active = [key.kid for key in keys if keyring.key_state(key) == SigningKey.State.ACTIVE]
        form = KeyRevokeForm(request.POST if "apply" in request.POST else None, active=active)
        if "apply" in request.POST and form.is_valid():
            done = unchanged = 0
            for key in queryset:
                try:
                    signing_key_revoke(kid=key.kid, reason=form.cleaned_data["reason"])
                except ServiceError as exc:
                    self.message_user(request, exc.detail, messages.ERROR)
                    continue
                if key.revoked_at:
                    unchanged += 1  # revoked before: the first time and reason stay
                else:
                    done += 1
            _unchanged_message(self, request, unchanged, "revoked")
            if done:
                self.message_user(
                    request,
                    f"Revoked {counted(done, 'signing key')}; nothing they signed is accepted "
                    "any more, and devices refuse them at their next sync.",
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
            keys=[
                {
                    "kid": key.kid,
                    "use": key.use,
                    "state": keyring.key_state(key),
                    "fingerprint": key.fingerprint,
                    "signed": _signed_in_service(key.kid),
                }
                for key in keys
            ],
            active=active,
        )


def _unchanged_message(model_admin, request, unchanged: int, state: str) -> None:
    if unchanged:
        model_admin.message_user(
            request,
            f"{counted(unchanged, 'signing key')} {'was' if unchanged == 1 else 'were'} "
            f"already {state}: nothing changed.",
            messages.WARNING,
        )


# Each kind of licence counted in prose, singular and plural: its display label
# ("Unit (activated from a batch)") is no noun ("312 unit (activated from a batch)s").
KIND_NOUNS = {
    License.Kind.BATCH_KEY: ("batch key", "batch keys"),
    License.Kind.UNIT: ("unit licence", "unit licences"),
    License.Kind.DIRECT: ("direct licence", "direct licences"),
    License.Kind.OFFLINE: ("offline-minted licence", "offline-minted licences"),
}


def _signed_in_service(kid: str) -> str:
    """What ``kid`` signed that is still in service, by kind (``12 unit licences, 1
    batch key``): what stops working when it is revoked."""
    counts = (
        License.objects.filter(claims__kid=kid, revoked_at__isnull=True)
        .values_list("kind")
        .annotate(n=Count("id"))
        .order_by("kind")
    )
    shown = [counted(n, *KIND_NOUNS.get(kind, (kind, None))) for kind, n in counts]
    return ", ".join(shown) or "no licence in service"


class KeyRevokeForm(ReasonForm):
    """The reason; and, when the active key is among those revoked, its kid typed out."""

    kid_typed = forms.CharField(
        max_length=16,
        required=False,
        label="Type the active key's id",
        help_text="Revoking the key this server signs with stops all signing until a new "
        "key is installed and configured.",
    )

    def __init__(self, *args, active: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields[
            "reason"
        ].help_text = "Recorded on the key, in its signing_key.revoked event and in the audit log."
        self.active = active
        if not active:
            del self.fields["kid_typed"]

    def clean_kid_typed(self) -> str:
        typed = self.cleaned_data.get("kid_typed", "").strip()
        if typed not in self.active:
            raise forms.ValidationError(
                f"type {' or '.join(self.active)} to revoke the active signing key"
            )
        return typed
