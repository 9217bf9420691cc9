"""Payments in the console (issue 43): every payment recorded, read-only, and the form
that records one (with a confirmation naming the balance after it); the invoice list's
state filter. Payments are never edited: a negative correcting entry undoes one."""

from __future__ import annotations

import datetime as dt

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.urls import reverse

from billing import balances
from billing.models import Invoice
from billing.payment_models import Payment
from billing.payments import exact_amount, payment_record
from config import clock
from config.admin.base import NoEditAdmin, service_form_view
from config.admin.display import money
from config.errors import InvalidInput, NotFound


class StateFilter(admin.SimpleListFilter):
    """An invoice's state (billing.balances), as a WHERE clause on the annotated list."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [(state, balances.STATE_LABELS[state]) for state in balances.STATES]

    def queryset(self, request, queryset):
        if self.value() in balances.STATES:
            return queryset.filter(balances.state_filter(self.value()))
        return queryset


class PaymentForm(forms.Form):
    invoice = forms.CharField(max_length=32, help_text="The invoice paid, INV-YYYY-NNNNNN.")
    amount = forms.CharField(
        max_length=24,
        help_text="In the invoice's currency, exact to its minor unit; negative: a "
        "correcting entry (needs a note).",
    )
    paid_on = forms.DateField(required=False, help_text="YYYY-MM-DD; empty: today.")
    reference = forms.CharField(max_length=200, required=False)
    note = forms.CharField(max_length=300, required=False, help_text="Why (a correction).")


@admin.register(Payment)
class PaymentAdmin(NoEditAdmin):
    add_capability = "manage_billing"
    list_display = ["paid_on", "invoice", "amount_shown", "source", "reference", "recorded_by"]
    list_filter = ["source", "currency"]
    search_fields = ["invoice__number", "invoice__customer__id", "reference", "bank_entry_id"]
    list_select_related = ["invoice"]
    fields = ["invoice", "amount", "currency", "paid_on", "reference", "source",
              "bank_entry_id", "recorded_by", "recorded_at", "note"]  # fmt: skip
    readonly_fields = fields

    @admin.display(description="amount", ordering="amount")
    def amount_shown(self, row: Payment) -> str:
        return money(row.amount, row.currency)

    def add_view(self, request, form_url="", extra_context=None):
        def confirm(data):
            invoice = Invoice.objects.filter(number=data["invoice"].strip()).first()
            if invoice is None:
                raise NotFound(f"invoice {data['invoice'].strip()} does not exist")
            standing = balances.standing_of(invoice)
            if standing is None:
                raise InvalidInput(f"{invoice.number} is a credit note")
            value = exact_amount(data["amount"], invoice.currency)
            after = standing.balance - value
            text = (
                f"Record {money(value, invoice.currency)} against {invoice.number} of "
                f"{invoice.customer.name} ({invoice.customer_id}), paid on "
                f"{data['paid_on'] or clock.now().astimezone(dt.UTC).date()}: its balance "
                f"goes from {money(standing.balance, invoice.currency)} ({standing.label}) to "
                f"{money(after, invoice.currency)}. Payments are never edited."
            )
            return text, f"Yes, record {money(value, invoice.currency)}"

        def perform(data):
            payment = payment_record(
                number=data["invoice"].strip(),
                amount=data["amount"],
                paid_on=data["paid_on"],
                reference=data["reference"],
                note=data["note"],
            )
            standing = balances.standing_of(payment.invoice)
            self.message_user(
                request,
                f"Payment of {money(payment.amount, payment.currency)} recorded against "
                f"{payment.invoice.number}: {standing.label}, balance "
                f"{money(standing.balance, payment.currency)}.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(reverse("console-document", args=[payment.invoice.number]))

        return service_form_view(
            self, request, form_class=PaymentForm, title="Record a payment", perform=perform,
            submit_label="Review", confirm=confirm,
            intro="A payment received for an invoice (a bank statement is imported on the "
            "statement page).",
        )  # fmt: skip
