"""The console's credit-note page (issue 43 item 4): the invoice's lines with what
remains of each, a quantity to credit per line, re-billing and the reason; the page
shows the credit note exactly as it would be issued (``credit_note_draft``: issued and
rolled back) before the operator confirms it."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from billing import limits
from billing import selectors as billing_selectors
from billing import services as billing_services
from billing.credit_lines import LineCredit
from billing.models import Invoice, InvoiceLine
from config.admin.base import require
from config.admin.display import money, quantity
from config.errors import ServiceError
from console.views import _context, _document, _lines_shown
from svccore import dates


class CreditNoteForm(forms.Form):
    """The reason, re-billing and, per line still creditable, ``line_<position>``: how
    much to credit (0 leaves the line alone; the default is all that remains)."""

    reason = forms.CharField(
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="Printed on the credit note and kept in the audit log.",
    )
    rebill = forms.BooleanField(
        required=False,
        label="Re-bill",
        help_text="The credited events wait again and are billed on the customer's next "
        "invoice. Unticked: a price credit, the events stay billed. In part, only unit "
        "activation and direct licence lines can be re-billed.",
    )
    previewed = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, states: list[LineCredit], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.states = [state for state in states if state.remaining_quantity > 0]
        for state in self.states:
            self.fields[f"line_{state.line.position}"] = forms.DecimalField(
                required=False,
                min_value=Decimal(0),
                max_value=state.remaining_quantity,
                decimal_places=3,
                initial=state.remaining_quantity,
                label=f"Line {state.line.position}",
            )

    def chosen(self) -> tuple[list[dict[str, Any]] | None, bool | None]:
        """(lines, rebill) for the service: ``None`` lines when every remaining
        quantity is credited; the checkbox only when the page sent its line fields (a
        bare reason, as before partial credits, takes the service's defaults)."""
        data = self.cleaned_data
        named = [s for s in self.states if f"line_{s.line.position}" in self.data]
        if not named:
            return None, None
        lines = []
        for state in self.states:
            asked = data.get(f"line_{state.line.position}")
            if asked:
                lines.append({"line": state.line.position, "quantity": asked})
        whole = len(lines) == len(self.states) and all(
            item["quantity"] == state.remaining_quantity
            for item, state in zip(lines, self.states, strict=True)
        )
        return (None if whole else lines), data.get("rebill", False)

    def clean(self) -> dict:
        data = super().clean()
        named = any(f"line_{s.line.position}" in self.data for s in self.states)
        if named and not any(data.get(f"line_{s.line.position}") for s in self.states):
            raise forms.ValidationError("Give a quantity above 0 for at least one line.")
        return data


def _fingerprint(lines: list[dict[str, Any]] | None, rebill: bool | None) -> str:
    """What a confirmation was shown for, to tell whether the form changed since."""
    shown = None if lines is None else [[i["line"], str(i["quantity"])] for i in lines]
    return json.dumps([shown, rebill])


def _line_rows(form: CreditNoteForm, invoice: Invoice) -> list[dict[str, Any]]:
    kinds = dict(InvoiceLine.Kind.choices)
    return [
        {
            "position": state.line.position,
            "kind_label": kinds.get(state.line.kind, state.line.kind),
            "sku": state.line.sku,
            "description": state.line.description,
            "billed": quantity(state.line.quantity),
            "credited": quantity(state.credited_quantity),
            "remaining": quantity(state.remaining_quantity),
            "unit": state.line.unit,
            "remaining_amount": money(state.remaining_amount, invoice.currency),
            "field": form[f"line_{state.line.position}"],
        }
        for state in form.states
    ]


def credit_note(request: HttpRequest, number: str) -> HttpResponse:
    """Choose what to credit of an invoice (every line, or quantities of some), see the
    credit note as it would be issued, then issue it and show it."""
    require(request, "manage_billing")
    invoice = _document(number)
    try:
        states = billing_services.line_credits(number=number)
    except ServiceError as exc:
        messages.error(request, exc.detail)
        return HttpResponseRedirect(reverse("console-document", args=[number]))
    if not any(state.remaining_quantity > 0 for state in states):
        notes = ", ".join(note.number for note in invoice.credit_notes.order_by("pk"))
        messages.error(request, f"invoice {number} was already credited by {notes}")
        return HttpResponseRedirect(reverse("console-document", args=[number]))
    earlier = invoice.credit_notes.exists()
    form = CreditNoteForm(
        request.POST if request.method == "POST" else None,
        states=states,
        initial={"rebill": not earlier, "previewed": _fingerprint(None, not earlier)},
    )
    lines: list[dict[str, Any]] | None = None
    rebill: bool | None = None
    if form.is_bound and form.is_valid():
        lines, rebill = form.chosen()
        shown = _fingerprint(lines, rebill)
        confirmed = form.cleaned_data["previewed"]
        if "preview" not in request.POST and (not confirmed or confirmed == shown):
            try:
                note = billing_services.credit_note_issue(
                    number=number, reason=form.cleaned_data["reason"], lines=lines, rebill=rebill
                )
            except ServiceError as exc:
                form.add_error(None, exc.detail)
            else:
                messages.success(
                    request,
                    f"Credit note {note.number} issued: {money(note.total, note.currency)}, "
                    f"{'crediting part of' if note.partial else 'reversing'} {invoice.number}.",
                )
                return HttpResponseRedirect(reverse("console-document", args=[note.number]))
        elif "preview" not in request.POST:
            form.add_error(None, "The quantities changed: review this credit note, then confirm.")
    # The real service, rolled back: the lines shown are the lines issued ("Credit of
    # INV-...", batch and licence ids), never a second negation written here.
    try:
        draft = billing_services.credit_note_draft(number=number, lines=lines, rebill=rebill)
    except ServiceError as exc:
        if lines is None and rebill is None:
            messages.error(request, exc.detail)
            return HttpResponseRedirect(reverse("console-document", args=[number]))
        form.add_error(None, exc.detail)
        lines, rebill = None, None
        draft = billing_services.credit_note_draft(number=number)
    data = form.data.copy() if form.is_bound else None
    if data is not None:
        data["previewed"] = _fingerprint(lines, rebill)
        form.data = data
    latest = billing_selectors.invoice_is_latest(invoice)
    context = {
        **_context(request, f"Credit {invoice.number}"),
        "invoice": invoice,
        "form": form,
        "line_rows": _line_rows(form, invoice),
        "period": dates.period(invoice.period_start, invoice.period_end),
        "reversed": money(draft["total"], draft["currency"]),
        "gross": money(draft["gross_total"], draft["currency"]),
        "lines": _lines_shown(draft),
        "total": money(draft["total"], draft["currency"]),
        "currency": draft["currency"],
        "partial": draft["partial"],
        "rebill": draft["rebill"],
        "caption": f"The credit note's lines (those of {invoice.number} credited, negated)",
        "latest": latest,
        "invoice_start": dates.day(invoice.period_start),
        "year": limits.now().year,
    }
    return TemplateResponse(request, "console/credit_note_confirm.html", context)
