"""The forms of the licensing pages: issuing a batch or a licence, renewing."""

from __future__ import annotations

import uuid

from django import forms
from django.contrib import messages

from config.adminbase import (
    confirm_page,
)
from config.errors import ServiceError
from customers.models import Customer
from licensing.models import (
    License,
    Sku,
)
from licensing.services.renewals import license_renew
from svccore.claims import API_QUOTA_MAX, DEVICE_ID_MAX, MAX_STREAMS_MAX, TERM_DAYS_MAX, UNITS_MAX


def sku_choices():
    return [(code, code) for code in Sku.objects.order_by("code").values_list("code", flat=True)]


class BatchIssueForm(forms.Form):
    customer = forms.ModelChoiceField(queryset=Customer.objects.order_by("name"))
    sku = forms.ChoiceField(label="SKU", choices=sku_choices)
    units = forms.IntegerField(min_value=1, max_value=UNITS_MAX)
    term_days = forms.IntegerField(
        min_value=0,
        max_value=TERM_DAYS_MAX,
        required=False,
        help_text="Empty: the SKU's default term. 0: perpetual.",
    )


class LicenseIssueForm(forms.Form):
    customer = forms.ModelChoiceField(queryset=Customer.objects.order_by("name"))
    sku = forms.ChoiceField(label="SKU", choices=sku_choices)
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
