"""Suspending and reinstating from the console (issue 42): actions on licences, batches
and customers that ask for a reason on a confirmation page, then call
``license_suspend`` / ``license_reinstate`` for each selected row (capability
``suspend_licences``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse

from config.admin.base import confirm_page, may
from config.admin.display import counted
from config.errors import ServiceError
from licensing import leases
from licensing.models import Suspension
from licensing.services import license_reinstate, license_suspend


class HoldMixin:
    """The permission of the suspend and reinstate actions."""

    def has_suspend_permission(self, request) -> bool:
        return may(request, "suspend_licences")


class LeaseStateMixin:
    """A list whose rows show a unit's state with its hold and lease: each page's rows
    get them from one more query after the page is read (:func:`licensing.leases.attach`);
    ``lease_license_id`` names the row's licence id attribute."""

    lease_license_id = "pk"

    def get_changelist(self, request, **kwargs):
        base = super().get_changelist(request, **kwargs)
        attribute = self.lease_license_id

        class WithLeases(base):
            def get_results(self, request):
                super().get_results(request)
                leases.attach(self.result_list, lambda row: getattr(row, attribute))

        return WithLeases

    def lease_source(self, row):
        """``row`` with its hold and lease (read now on a page that is not a list)."""
        if not hasattr(row, "held"):
            leases.attach([row], lambda one: getattr(one, self.lease_license_id))
        return row


class SuspendForm(forms.Form):
    reason = forms.CharField(
        max_length=500,
        widget=forms.TextInput(attrs={"size": 60, "autofocus": True}),
        help_text="Recorded with the suspension, in the audit log and the event.",
    )


class ReinstateForm(forms.Form):
    reason = forms.CharField(
        max_length=500,
        required=False,
        widget=forms.TextInput(attrs={"size": 60, "autofocus": True}),
        help_text="Optional: recorded in the audit log and the event.",
    )


def hold_action(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    queryset,
    *,
    scope: str,  # "license_id", "batch_id" or "customer_id": the service's argument
    id_of: Callable[[Any], str],
    action_name: str,
    what: str,  # plural: "licences", "batches", "customers"
    suspend: bool,
) -> HttpResponse | None:
    """Ask for a reason, then suspend (or reinstate) each selected row."""
    form_class = SuspendForm if suspend else ReinstateForm
    form = form_class(request.POST if "apply" in request.POST else None)
    verb = "Suspend" if suspend else "Reinstate"
    if "apply" in request.POST and form.is_valid():
        service = license_suspend if suspend else license_reinstate
        done = unchanged = 0
        for row in queryset:
            try:
                hold = service(reason=form.cleaned_data["reason"], **{scope: id_of(row)})
            except ServiceError as exc:
                model_admin.message_user(request, exc.detail, messages.ERROR)
                continue
            done += hold.changed
            unchanged += not hold.changed
        singular = what.removesuffix("es") if what.endswith("ches") else what.removesuffix("s")
        if done:
            effect = (
                "their cameras refuse analytics from their next sync; video keeps running"
                if suspend
                else "their cameras resume analytics at their next sync"
            )
            model_admin.message_user(
                request,
                f"{'Suspended' if suspend else 'Reinstated'} {counted(done, singular, what)}; "
                f"{effect}.",
                messages.SUCCESS,
            )
        if unchanged:
            state = "suspended" if suspend else "not suspended"
            model_admin.message_user(
                request,
                f"{counted(unchanged, singular, what)} {'was' if unchanged == 1 else 'were'} "
                f"already {state}: nothing changed.",
                messages.WARNING,
            )
        return None
    ids = [id_of(row) for row in queryset]
    held = set(
        Suspension.objects.filter(kind=scope.removesuffix("_id"), target__in=ids).values_list(
            "target", flat=True
        )
    )
    singular = what.removesuffix("es") if what.endswith("ches") else what.removesuffix("s")
    return confirm_page(
        model_admin,
        request,
        queryset,
        template="admin/hold_confirm.html",
        title=f"{verb} {what}",
        form=form,
        action_name=action_name,
        rows=[(row, id_of(row)) for row in queryset],
        holds=[{"id": i, "held": i in held} for i in ids],
        suspend=suspend,
        scope=scope.removesuffix("_id"),
        verb=verb,
        target=counted(len(ids), singular, what),
    )
