"""Admin pages that write through a service, never through a raw model save.

An admin "add" page here is a plain form whose valid data goes to one service call
(``customer_create``, ``batch_issue``, ``license_issue``); a :class:`ServiceError` comes
back as a form error with the service's own message, so the admin applies exactly the
rules the API applies, and a failed attempt is still in the audit log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from config.errors import ServiceError


def service_form_view(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    *,
    form_class: type[forms.Form],
    title: str,
    perform: Callable[[dict[str, Any]], HttpResponse],
    submit_label: str,
    intro: str = "",
) -> HttpResponse:
    if not model_admin.has_add_permission(request):
        raise PermissionDenied
    if request.method == "POST":
        form = form_class(request.POST)
        if form.is_valid():
            try:
                return perform(form.cleaned_data)
            except ServiceError as exc:
                form.add_error(None, exc.detail)
    else:
        form = form_class(initial=request.GET.dict())
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": opts,
        "app_label": opts.app_label,
        "title": title,
        "intro": intro,
        "form": form,
        "submit_label": submit_label,
        "has_view_permission": model_admin.has_view_permission(request),
    }
    return TemplateResponse(request, "admin/service_form.html", context)


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
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": opts,
        "app_label": opts.app_label,
        "title": f"{verb} {what}",
        "verb": verb,
        "rows": [(row, license_id_of(row)) for row in queryset],
        "selected": [row.pk for row in queryset],
        "form": form,
        "action_name": action_name,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        **(explanation or {}),
    }
    return TemplateResponse(request, template, context)
