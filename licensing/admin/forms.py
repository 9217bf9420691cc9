"""The forms of the licensing pages: issuing a batch or a licence, renewing."""

from __future__ import annotations

import uuid

from django import forms
from django.contrib import messages

from config.admin.base import (
    confirm_page,
)
from config.admin.display import counted, money, utc_time
from config.errors import ServiceError
from customers.models import Customer
from licensing.models import (
    License,
    Sku,
)
from licensing.services.renewals import license_renew, renewal_quote
from svccore.claims import (
    API_QUOTA_MAX,
    DEVICE_ID_MAX,
    MAX_OFFLINE_DAYS_MAX,
    MAX_STREAMS_MAX,
    TERM_DAYS_MAX,
    TRIAL_DAYS_MAX,
    UNITS_MAX,
)


def sku_choices():
    """The catalogue's SKUs after an empty "Choose…": a SKU is chosen, never preselected
    (the first in the list sold perpetual licences by default)."""
    codes = Sku.objects.order_by("code").values_list("code", "name")
    return [("", "Choose…"), *((code, f"{code} ({name})") for code, name in codes)]


class BatchIssueForm(forms.Form):
    customer = forms.ModelChoiceField(
        queryset=Customer.objects.order_by("name"), empty_label="Choose…"
    )
    sku = forms.ChoiceField(label="SKU", choices=sku_choices)
    units = forms.IntegerField(min_value=1, max_value=UNITS_MAX)
    term_days = forms.IntegerField(
        min_value=0,
        max_value=TERM_DAYS_MAX,
        required=False,
        help_text="Empty: the SKU's default term. 0: perpetual.",
    )
    max_offline_days = forms.IntegerField(
        label="Max offline days",
        min_value=1,
        max_value=MAX_OFFLINE_DAYS_MAX,
        required=False,
        help_text="Check-in lease: days a camera may run analytics without a sync. Empty: "
        "the SKU's (none: no lease).",
    )
    trial_days = forms.IntegerField(
        label="Trial days",
        min_value=0,
        max_value=TRIAL_DAYS_MAX,
        required=False,
        help_text="A trial batch: each camera runs this many days from its own activation, "
        "unbilled until the batch is converted to paid. Empty: the SKU's (a trial SKU's "
        "batches are trials); 0: sold, not a trial.",
    )


class LicenseIssueForm(forms.Form):
    customer = forms.ModelChoiceField(
        queryset=Customer.objects.order_by("name"), empty_label="Choose…"
    )
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
    max_offline_days = forms.IntegerField(
        label="Max offline days",
        min_value=1,
        max_value=MAX_OFFLINE_DAYS_MAX,
        required=False,
        help_text="Check-in lease: days a camera may run analytics without a sync. Empty: "
        "the SKU's (none: no lease).",
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
    # The term the shown amounts are for ("": each SKU's): another term is quoted first.
    quoted_term = forms.CharField(widget=forms.HiddenInput, required=False, max_length=8)


def _term_text(term_days: int | None) -> str:
    return "" if term_days is None else str(term_days)


def _quotes(queryset, *, target: str, term_days: int | None) -> tuple[list[dict], list[str]]:
    """Each row's renewal as it would be now (new end, units, amount), or why it would be
    refused; and the total per currency."""
    return renewal_quotes([(row.pk, {target: row.pk}, term_days) for row in queryset])


def renewal_quotes(asked: list[tuple[str, dict, int | None]]) -> tuple[list[dict], list[str]]:
    """For each (shown as, ``renewal_quote``'s target, term) the renewal as it would be
    now, or why it would be refused; and the total per currency."""
    rows, totals = [], {}
    for what, target, term_days in asked:
        try:
            quote = renewal_quote(term_days=term_days, **target)
        except ServiceError as exc:
            rows.append({"what": what, "refused": exc.detail})
            continue
        totals[quote.currency] = totals.get(quote.currency, 0) + quote.amount
        rows.append(
            {
                "what": what,
                "customer": f"{quote.customer_name} ({quote.customer_id})",
                "sku": quote.sku,
                "term": counted(quote.term_days, "day"),
                "ends": utc_time(quote.previous_expires_at),
                "new_end": utc_time(quote.expires_at),
                "basis": quote.basis,
                "units": f"{quote.units:,}",
                "unit_price": money(quote.unit_price, quote.currency),
                "amount": money(quote.amount, quote.currency),
            }
        )
    return rows, [money(total, currency) for currency, total in sorted(totals.items())]


ONE = {"batches": "batch", "licences": "licence"}
# New ends named in a renewal's message; past these, "and N more".
ENDS_SHOWN = 5


def renew_with_term(model_admin, request, queryset, *, target: str, what: str):
    """An admin action that asks for the term first, then renews each selected batch or
    direct licence through ``license_renew``, one idempotency key per row and form."""
    posted = "apply" in request.POST
    form = RenewForm(
        request.POST if posted else None,
        initial={"request_key": uuid.uuid4().hex, "quoted_term": ""},
    )
    term_days, recalculated = None, False
    if posted and form.is_valid():
        term_days = form.cleaned_data["term_days"]
        # Renew only what the page showed: a term changed since is quoted first.
        recalculated = form.cleaned_data["quoted_term"] != _term_text(term_days)
    if posted and form.is_valid() and not recalculated:
        ends: list[str] = []
        replayed = 0
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
            if result.replayed:
                replayed += 1
            else:
                ends.append(f"{row.pk} now ends {utc_time(result.renewal.expires_at)}")
        if ends:
            shown = ", ".join(ends[:ENDS_SHOWN])
            more = f" and {len(ends) - ENDS_SHOWN:,} more" if len(ends) > ENDS_SHOWN else ""
            model_admin.message_user(
                request,
                f"Renewed {counted(len(ends), ONE[what], what)} ({shown}{more}); billed "
                "once each as a renewal line. Cameras fetch their renewed licences at their "
                "next sync.",
            )
        if replayed:
            model_admin.message_user(
                request,
                f"{counted(replayed, ONE[what], what)} already renewed by this form (sent "
                "twice): nothing renewed or billed again.",
                messages.WARNING,
            )
        return None
    quotes, totals = _quotes(queryset, target=target, term_days=term_days)
    if form.is_bound and form.is_valid():
        form = RenewForm(
            {**request.POST.dict(), "quoted_term": _term_text(term_days)},
            initial=form.initial,
        )
    else:
        form.initial["quoted_term"] = ""
    return confirm_page(
        model_admin,
        request,
        queryset,
        template="admin/renew_confirm.html",
        title=f"Renew {what}",
        form=form,
        action_name=request.POST.get("action", ""),
        rows=list(queryset),
        quotes=quotes,
        totals=totals,
        recalculated=recalculated,
    )
