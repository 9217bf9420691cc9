"""The revocation list and the signing keys (public halves and certificates)."""

from __future__ import annotations

from django.contrib import admin, messages

from config.adminbase import (
    ReadOnlyAdmin,
    confirm_page,
)
from config.display import utc_time
from config.errors import ServiceError
from licensing.admin.display import (
    copyable,
)
from licensing.admin.revoking import ReasonForm
from licensing.models import Revocation
from licensing.services import (
    signing_key_retire,
    signing_key_revoke,
)
from signing import keyring
from signing.models import SigningKey


@admin.register(Revocation)
class RevocationAdmin(ReadOnlyAdmin):
    """The revocation list as devices page through it; entries come only from revoking."""

    list_display = ["seq", "license_id", "revoked_at", "usable_until"]
    unix_time_fields = ("usable_until",)
    search_fields = ["=license_id"]
    # A list of a million entries: no COUNT(*) on every page view.
    show_full_result_count = False


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
        return request.user.has_perm("signing.change_signingkey")

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
