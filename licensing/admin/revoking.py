"""Revoking from the console: an action that asks for a reason first, then revokes each
selected row's licence through a service (``license_revoke``, ``seat_release``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse

from config.admin.base import confirm_page, may
from config.admin.display import counted, utc_time_html
from config.errors import ServiceError
from licensing.models import License


class LicenseRevokeMixin:
    """Permissions of the actions on licences and what holds them: revoking, renewing
    and releasing seats."""

    def has_revoke_permission(self, request) -> bool:
        return may(request, "revoke_licences")

    def has_renew_permission(self, request) -> bool:
        return may(request, "renew_licences")

    def has_release_permission(self, request) -> bool:
        return may(request, "release_seats")


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=500,
        widget=forms.TextInput(attrs={"size": 60, "autofocus": True}),
        help_text="Recorded on the licence and in the audit log.",
    )


def _counted(n: int, what: str) -> str:
    """``1 unit licence``, ``2 unit licences``: ``what`` is the plural."""
    return counted(n, what.removesuffix("s"), what)


def _already_done(result: Any, revoked_before: bool) -> bool:
    """Whether the service found the work done already: a seat release says so itself
    (``already_released``; a revoked unit's seat may still be released), a revocation
    by the licence having been revoked before the action."""
    already_released = getattr(result, "already_released", None)
    if already_released is not None:
        return already_released
    return revoked_before


def details(license_ids: list[str]) -> list[dict[str, Any]]:
    """What an operator decides a revocation on, per licence: its kind, customer,
    device, batch, SKU and end (in the order given)."""
    found = License.objects.select_related("customer").in_bulk(license_ids)
    rows = []
    for license_id in license_ids:
        lic = found.get(license_id)
        if lic is None:
            continue
        rows.append(
            {
                "license_id": lic.pk,
                "kind": lic.get_kind_display(),
                "customer": f"{lic.customer.name} ({lic.customer_id})",
                "device": "" if lic.device_id == "*" else lic.device_id,
                "batch": lic.batch_id or "",
                "sku": lic.sku,
                "ends": utc_time_html(lic.expires_at) or "perpetual",
                "revoked": lic.revoked_at is not None,
            }
        )
    return rows


def revoke_with_reason(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    queryset,
    *,
    license_id_of: Callable[[Any], str],
    revoke: Callable[..., Any],
    action_name: str,
    what: str,
    verb: str = "Revoke",
    message: str = "Revoked {what}; devices drop them at their next sync.",
    already: str = "revoked",
    template: str = "admin/revoke_confirm.html",
    explanation: dict[str, Any] | None = None,
) -> HttpResponse | None:
    """An admin action that asks for a reason first, then revokes each selected row's
    licence through ``revoke`` (the ``license_revoke`` service, or another service that
    takes ``license_id`` and ``reason``, such as ``seat_release``)."""
    form = ReasonForm(request.POST if "apply" in request.POST else None)
    if "apply" in request.POST and form.is_valid():
        rows = list(queryset)
        # What was revoked before this action: revoking again changes nothing (the first
        # time and reason stay), so it is not counted as done (issue 41).
        revoked_before = set(
            License.objects.filter(
                pk__in=[license_id_of(row) for row in rows], revoked_at__isnull=False
            ).values_list("pk", flat=True)
        )
        done = unchanged = 0
        for row in rows:
            license_id = license_id_of(row)
            try:
                result = revoke(license_id=license_id, reason=form.cleaned_data["reason"])
            except ServiceError as exc:
                model_admin.message_user(request, exc.detail, messages.ERROR)
                continue
            if _already_done(result, license_id in revoked_before):
                unchanged += 1
            else:
                done += 1
        if done:
            model_admin.message_user(request, message.format(n=done, what=_counted(done, what)))
        if unchanged:
            model_admin.message_user(
                request,
                f"{_counted(unchanged, what)} {'was' if unchanged == 1 else 'were'} already "
                f"{already}: nothing changed (the first time and reason stay).",
                messages.WARNING,
            )
        return None
    license_ids = [license_id_of(row) for row in queryset]
    return confirm_page(
        model_admin,
        request,
        queryset,
        template=template,
        title=f"{verb} {what}",
        form=form,
        action_name=action_name,
        rows=[(row, license_id_of(row)) for row in queryset],
        details=details(license_ids),
        verb=verb,
        target=_counted(len(license_ids), what),
        **(explanation or {}),
    )
