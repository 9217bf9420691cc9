"""Revoking from the console: an action that asks for a reason first, then revokes each
selected row's licence through a service (``license_revoke``, ``seat_release``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse

from config.adminbase import confirm_page
from config.errors import ServiceError


class LicenseRevokeMixin:
    """Permission for the revoke-with-reason actions on licences and what holds them."""

    def has_revoke_permission(self, request) -> bool:
        return request.user.has_perm("licensing.change_license")


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=500,
        widget=forms.TextInput(attrs={"size": 60, "autofocus": True}),
        help_text="Recorded on the licence and in the audit log.",
    )


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
    message: str = "Revoked {n} {what}; devices drop them at their next sync.",
    template: str = "admin/revoke_confirm.html",
    explanation: dict[str, Any] | None = None,
) -> HttpResponse | None:
    """An admin action that asks for a reason first, then revokes each selected row's
    licence through ``revoke`` (the ``license_revoke`` service, or another service that
    takes ``license_id`` and ``reason``, such as ``seat_release``)."""
    form = ReasonForm(request.POST if "apply" in request.POST else None)
    if "apply" in request.POST and form.is_valid():
        done = 0
        for row in queryset:
            try:
                revoke(license_id=license_id_of(row), reason=form.cleaned_data["reason"])
                done += 1
            except ServiceError as exc:
                model_admin.message_user(request, exc.detail, messages.ERROR)
        if done:
            model_admin.message_user(request, message.format(n=done, what=what))
        return None
    return confirm_page(
        model_admin,
        request,
        queryset,
        template=template,
        title=f"{verb} {what}",
        form=form,
        action_name=action_name,
        rows=[(row, license_id_of(row)) for row in queryset],
        verb=verb,
        **(explanation or {}),
    )
