"""What the console shows and does about payments (issue 43): an invoice's state,
balance and payments on its page, the bank statement (CAMT.053) upload with its report
(a dry run first, then the import of the same file), and the dashboard's receivables."""

from __future__ import annotations

import base64
import binascii

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from billing import balances
from billing.camt053 import MAX_BYTES
from billing.models import Invoice
from billing.payment_models import Payment
from billing.statements import statement_import
from config.admin.base import may, require
from config.admin.display import money
from config.errors import ServiceError


def invoice_payments(request: HttpRequest, document: Invoice) -> dict:
    """The payment part of an invoice's page: state, balance, payments, the action."""
    standing = balances.standing_of(document)
    if standing is None:
        return {"standing": None}
    rows = Payment.objects.filter(invoice=document).order_by("paid_on", "id")
    return {
        "standing": {
            "state": standing.label,
            "code": standing.state,
            "balance": money(standing.balance, document.currency),
            "paid": money(standing.paid, document.currency),
            "days_overdue": standing.days_overdue,
        },
        "payments": [
            {
                "paid_on": row.paid_on,
                "amount": money(row.amount, row.currency),
                "source": row.get_source_display(),
                "reference": row.reference,
                "bank_entry_id": row.bank_entry_id or "",
                "recorded_by": row.recorded_by,
                "note": row.note,
            }
            for row in rows
        ],
        "can_record_payment": may(request, "manage_billing"),
        "record_payment_url": reverse("admin:billing_payment_add") + f"?invoice={document.number}",
    }


def receivables(currency_ages: dict) -> dict:
    """The dashboard's receivables by age, formatted per currency."""
    return {
        "receivable_buckets": balances.AGE_BUCKETS,
        "receivables": [
            {
                "currency": currency,
                "cells": [money(ages[bucket], currency) for bucket in balances.AGE_BUCKETS],
                "total": money(sum(ages.values()), currency),
            }
            for currency, ages in currency_ages.items()
        ],
    }


class StatementForm(forms.Form):
    file = forms.FileField(
        required=False, label="CAMT.053 file", help_text="As your bank exports it (XML)."
    )
    statement = forms.CharField(required=False, widget=forms.HiddenInput)
    dry_run = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def data_bytes(self) -> bytes:
        upload = self.cleaned_data.get("file")
        if upload is not None:
            if upload.size > MAX_BYTES:
                raise forms.ValidationError(f"the file is over {MAX_BYTES // (1024 * 1024)} MB")
            return upload.read()
        try:
            return base64.b64decode(self.cleaned_data.get("statement") or "", validate=True)
        except (binascii.Error, ValueError):
            raise forms.ValidationError("choose the statement file again") from None


def statement_upload(request: HttpRequest) -> HttpResponse:
    """Upload a statement: its dry run is shown first, then one button imports it."""
    require(request, "manage_billing")
    report = None
    carried = ""
    form = StatementForm(request.POST or None, request.FILES or None)
    if form.is_bound and form.is_valid():
        try:
            data = form.data_bytes()
            if not data:
                raise forms.ValidationError("choose a CAMT.053 file")
            dry_run = "import" not in request.POST
            report = statement_import(data=data, dry_run=dry_run)
            carried = base64.b64encode(data).decode() if dry_run else ""
            if not dry_run:
                messages.success(
                    request,
                    f"Statement imported: {report['matched']} matched, "
                    f"{report['already_imported']} already imported, {report['unmatched']} "
                    "unmatched.",
                )
        except forms.ValidationError as problem:
            form.add_error("file", problem)
        except ServiceError as problem:
            form.add_error("file", problem.detail)
    context = {
        **admin.site.each_context(request),
        "title": "Import a bank statement",
        "form": form,
        "report": report,
        "carried": carried,
    }
    return TemplateResponse(request, "console/statement.html", context)
