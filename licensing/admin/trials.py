"""Trials in the console (issue 42): the batches' trial filter, the convert action (a
confirmation page quoting each batch's units on trial, new end and amount before
anything is converted; capability ``issue_licences``: converting sells the units), and
the read-only lists of conversions and of the devices' trials."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse

from config.admin.base import ReadOnlyAdmin, confirm_page, may
from config.admin.display import counted, money, utc_time
from config.errors import ServiceError
from licensing.admin.display import admin_link
from licensing.models import TrialConversion, TrialUse
from licensing.services import trial_conversion_quote, trial_convert
from svccore.claims import TERM_DAYS_MAX


class TrialFilter(admin.SimpleListFilter):
    title = "trial"
    parameter_name = "trial"

    def lookups(self, request, model_admin):
        return [
            ("on", "on trial"),
            ("converted", "converted from a trial"),
            ("paid", "sold paid"),
        ]

    def queryset(self, request, queryset):
        if self.value() == "on":
            return queryset.filter(trial_days__isnull=False)
        if self.value() == "converted":
            return queryset.filter(trial_conversion__isnull=False)
        if self.value() == "paid":
            return queryset.filter(trial_days__isnull=True, trial_conversion__isnull=True)
        return queryset


class ConvertMixin:
    """The permission of the convert action."""

    def has_convert_permission(self, request) -> bool:
        return may(request, "issue_licences")


def trial_text(batch) -> str:
    """A batch's trial in words, for its page."""
    if batch.trial_days is not None:
        return (
            f"on trial: each camera runs {counted(batch.trial_days, 'day')} from its own "
            "activation, unbilled, until the batch is converted to paid"
        )
    conversion = getattr(batch, "trial_conversion", None)
    if conversion is None:
        return "sold paid (not a trial)"
    return (
        f"converted to paid {utc_time(conversion.converted_at)} after a "
        f"{counted(conversion.trial_days, 'day')} trial: "
        f"{counted(conversion.units, 'unit')} billed, "
        f"{money(conversion.amount, conversion.currency)}"
    )


class ConvertForm(forms.Form):
    term_days = forms.IntegerField(
        min_value=1,
        max_value=TERM_DAYS_MAX,
        required=False,
        label="Paid term (days)",
        widget=forms.NumberInput(attrs={"autofocus": True}),
        help_text="From the conversion; empty: each batch's term as issued (a perpetual "
        "batch stays perpetual).",
    )
    # The term the shown amounts are for ("": each batch's): another term is quoted first.
    quoted_term = forms.CharField(widget=forms.HiddenInput, required=False, max_length=8)


def _term_text(term_days: int | None) -> str:
    return "" if term_days is None else str(term_days)


def _quotes(queryset, term_days: int | None) -> tuple[list[dict], list[str]]:
    """Each batch's conversion as it would be now, or why it would be refused; and the
    total per currency."""
    rows, totals = [], {}
    for batch in queryset:
        try:
            quote = trial_conversion_quote(batch_id=batch.pk, term_days=term_days)
        except ServiceError as exc:
            rows.append({"what": batch.pk, "refused": exc.detail})
            continue
        totals[quote.currency] = totals.get(quote.currency, 0) + quote.amount
        rows.append(
            {
                "what": quote.batch_id,
                "sku": quote.sku,
                "customer": f"{quote.customer_name} ({quote.customer_id})",
                "trial": counted(quote.trial_days, "day"),
                "new_end": utc_time(quote.expires_at) or "never (perpetual)",
                "term": counted(quote.term_days, "day") if quote.term_days else "perpetual",
                "units": f"{quote.units:,}",
                "unit_price": money(quote.unit_price, quote.currency),
                "amount": money(quote.amount, quote.currency),
            }
        )
    return rows, [money(total, currency) for currency, total in sorted(totals.items())]


def convert_trials(
    model_admin: admin.ModelAdmin, request: HttpRequest, queryset
) -> HttpResponse | None:
    """Quote each selected trial batch's conversion (the term asked first), then convert
    each through ``trial_convert``: idempotent per batch, so a form posted twice converts
    once."""
    posted = "apply" in request.POST
    form = ConvertForm(request.POST if posted else None, initial={"quoted_term": ""})
    term_days, recalculated = None, False
    if posted and form.is_valid():
        term_days = form.cleaned_data["term_days"]
        recalculated = form.cleaned_data["quoted_term"] != _term_text(term_days)
    if posted and form.is_valid() and not recalculated:
        done, billed = [], {}
        for batch in queryset:
            try:
                result = trial_convert(batch_id=batch.pk, term_days=term_days)
            except ServiceError as exc:
                model_admin.message_user(request, exc.detail, messages.ERROR)
                continue
            if result.replayed:
                model_admin.message_user(
                    request,
                    f"Batch {batch.pk} was already converted "
                    f"({utc_time(result.conversion.converted_at)}): nothing converted or "
                    "billed again.",
                    messages.WARNING,
                )
                continue
            conversion = result.conversion
            done.append(f"{batch.pk} ({counted(conversion.units, 'unit')})")
            billed[conversion.currency] = billed.get(conversion.currency, 0) + conversion.amount
        if done:
            amounts = " + ".join(money(total, cur) for cur, total in sorted(billed.items()))
            model_admin.message_user(
                request,
                f"Converted {counted(len(done), 'trial batch', 'trial batches')} to paid: "
                f"{', '.join(done)}; billed once, {amounts}, as trial conversion lines on the "
                "next invoices. Their cameras fetch their paid licences at their next sync.",
                messages.SUCCESS,
            )
        return None
    quotes, totals = _quotes(queryset, term_days)
    if form.is_bound and form.is_valid():
        form = ConvertForm({**request.POST.dict(), "quoted_term": _term_text(term_days)})
    return confirm_page(
        model_admin,
        request,
        queryset,
        template="admin/trial_convert_confirm.html",
        title="Convert trial batches to paid",
        form=form,
        action_name=request.POST.get("action", ""),
        rows=list(queryset),
        quotes=quotes,
        totals=totals,
        recalculated=recalculated,
    )


@admin.register(TrialConversion)
class TrialConversionAdmin(ReadOnlyAdmin):
    """Trial batches converted to paid, and what each is billed once."""

    list_display = [
        "converted_at",
        "batch_link",
        "customer_link",
        "sku",
        "trial_days",
        "expires_at",
        "units",
        "amount",
    ]
    empty_times = {"expires_at": "perpetual"}
    list_select_related = ["customer", "batch"]
    search_fields = ["=batch__id", "=customer__id"]
    list_filter = ["sku", "converted_at"]

    @admin.display(description="amount billed")
    def amount(self, conversion: TrialConversion) -> str:
        return money(conversion.amount, conversion.currency)

    @admin.display(description="batch", ordering="batch__id")
    def batch_link(self, conversion: TrialConversion):
        return admin_link(conversion.batch)

    @admin.display(description="customer", ordering="customer__name")
    def customer_link(self, conversion: TrialConversion):
        return admin_link(conversion.customer, conversion.customer.name)


@admin.register(TrialUse)
class TrialUseAdmin(ReadOnlyAdmin):
    """Each device's trial of a SKU (one per SKU and device): a second trial of the SKU
    on another batch is refused (TRIAL_USED)."""

    list_display = ["used_at", "device_id", "sku", "batch_link", "license_link"]
    list_select_related = ["batch", "license"]
    search_fields = ["=device_id", "=batch__id", "=license__id"]
    list_filter = ["sku", "used_at"]

    @admin.display(description="batch", ordering="batch__id")
    def batch_link(self, use: TrialUse):
        return admin_link(use.batch)

    @admin.display(description="licence", ordering="license__id")
    def license_link(self, use: TrialUse):
        return admin_link(use.license)
