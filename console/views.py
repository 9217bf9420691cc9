"""Operator dashboard and invoice preview: staff-only pages inside the admin site.

Thin views: the numbers come from selectors (``console.selectors``, ``billing.selectors``,
and ``billing.reconciliation`` for the ledger totals ``manage.py reconcile`` prints) and
the invoice from ``billing.services.invoice_rate``; issuing goes through
``billing.services.invoice_issue``, the audited service.
"""

from __future__ import annotations

import datetime as dt

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST, require_safe

from billing import documents, downloads, limits
from billing import selectors as billing_selectors
from billing import services as billing_services
from billing.balances import receivables_by_age
from billing.exports import preview_csv
from billing.models import Invoice, InvoiceLine
from billing.offline import offline_file_answer
from billing.reconciliation import Reconciliation, ledger_check_latest, ledger_check_result
from config.admin.base import may, require
from config.admin.display import admin_url, amount, counted, money, quantity
from config.errors import ServiceError
from config.seller import is_demo
from console import charts, payments, selectors
from customers.models import Customer
from licensing import selectors as licensing_selectors
from licensing.models import NEAR_EXHAUSTION_PERCENT
from svccore import dates

DASHBOARD_DAYS = 30
# A count on the dashboard that may reach the whole fleet (silent units) is counted up to
# this and then said to be more: the page behind it lists them all.
DASHBOARD_COUNT_BOUND = 10_000
LEDGER_ROWS = 50
EXPIRING_DAYS = 30  # batches and licences ending within this many days (or in grace)
EXPIRING_ROWS = 50


def _context(request: HttpRequest, title: str) -> dict:
    return {**admin.site.each_context(request), "title": title}


def _ledger_cells(row, *, label: str | None = None) -> list:
    """One row of the ledger table, numbers grouped as ``manage.py reconcile`` prints them."""
    numbers = (row.inferences, row.billed, row.waiting, row.unbillable, row.activations,
               row.activations_billed, row.licenses, row.licenses_billed)  # fmt: skip
    name = label or format_html(
        '<a href="{}" title="{}">{}</a>',
        admin_url("customers_customer_change", row.customer_id),
        row.customer_id,
        row.customer_name,
    )
    return [name, row.sku, *(f"{n:,}" for n in numbers)]


def _bounded(count: int) -> str:
    """A dashboard count read with a bound (one more than :data:`DASHBOARD_COUNT_BOUND`):
    its page lists every unit."""
    if count > DASHBOARD_COUNT_BOUND:
        return f"more than {DASHBOARD_COUNT_BOUND:,}"
    return f"{count:,}"


def dashboard(request: HttpRequest) -> HttpResponse:
    require(request, "view_service")
    activations = selectors.activations_per_day(days=DASHBOARD_DAYS)
    inferences = billing_selectors.inferences_per_day(days=DASHBOARD_DAYS)
    top = billing_selectors.top_customers_by_usage(days=DASHBOARD_DAYS, limit=10)
    # The latest stored reconciliation: a run reads every rollup and ledger entry
    # (seconds at fleet scale), so the page shows when it ran instead of running it.
    check = ledger_check_latest()
    ledger = ledger_check_result(check) if check else Reconciliation(today=limits.now().date())
    expiring = licensing_selectors.expiring_list(days=EXPIRING_DAYS)
    context = {
        **_context(request, "Operator dashboard"),
        "days": DASHBOARD_DAYS,
        "activations_total": f"{sum(n for _, n in activations):,}",
        "inferences_total": f"{sum(n for _, n in inferences):,}",
        "activations_chart": charts.day_columns(
            activations, title=f"New activations per day (last {DASHBOARD_DAYS} days, UTC)"
        ),
        "inferences_chart": charts.day_columns(
            inferences, title=f"Inferences per day (last {DASHBOARD_DAYS} days, UTC)"
        ),
        "top_chart": charts.horizontal_bars(
            [(name, n) for _, name, n in top],
            tooltips=[f"{name} ({cid})" for cid, name, _ in top],
            title=f"Top customers by inferences (last {DASHBOARD_DAYS} days)",
        ),
        "top_customers": top,
        "near_exhaustion": selectors.batches_near_exhaustion(),
        "near_exhaustion_percent": NEAR_EXHAUSTION_PERCENT,
        "weak_devices": selectors.weak_binding_devices(),
        "weak_count": selectors.weak_binding_count(),
        # Units silent for SVC_SILENT_DAYS, and units silent beyond their lease (issue 42).
        "silent_count": _bounded(
            licensing_selectors.silent_units_count(
                days=settings.SVC_SILENT_DAYS, up_to=DASHBOARD_COUNT_BOUND + 1
            )
        ),
        "silent_days": settings.SVC_SILENT_DAYS,
        "past_lease_count": licensing_selectors.past_lease_count(),
        "releases": selectors.seat_releases(),
        "expiring": expiring[:EXPIRING_ROWS],
        "expiring_count": len(expiring),
        "expiring_days": EXPIRING_DAYS,
        "ledger": ledger,
        "ledger_check": check,
        "ledger_rows": [_ledger_cells(row) for row in ledger.rows[:LEDGER_ROWS]],
        "ledger_total": _ledger_cells(ledger.totals(), label="All customers"),
        "can_reconcile": may(request, "manage_billing"),
        **payments.receivables(receivables_by_age()),
    }
    return TemplateResponse(request, "console/dashboard.html", context)


@require_POST
def dashboard_reconcile(request: HttpRequest) -> HttpResponse:
    """Reconcile the ledger now and store it (the dashboard shows the latest run)."""
    require(request, "manage_billing")
    check = billing_services.ledger_check_run()
    found = len(check.problems)
    messages.add_message(
        request,
        messages.ERROR if found else messages.SUCCESS,
        f"Ledger reconciled in {check.seconds:.1f} s: "
        + (f"{counted(found, 'problem')} found." if found else "no problems."),
    )
    return HttpResponseRedirect(reverse("console-dashboard") + "#ledger")


class InvoicePreviewForm(forms.Form):
    customer = forms.ModelChoiceField(
        queryset=Customer.objects.order_by("name"), to_field_name="id", empty_label="Choose…"
    )
    period_days = forms.IntegerField(
        min_value=1,
        max_value=3660,
        initial=30,
        label="Period (days)",
        help_text="The first invoice's length; later ones start where the last one ended.",
    )
    currency = forms.RegexField(
        regex=r"^[A-Za-z]{3}\Z",
        required=False,
        help_text="A customer buying in several currencies gets one invoice per currency; "
        "default: the first.",
    )


def _window(rated: dict) -> str:
    return dates.period(rated["period_start"], rated["period_end"])


def _lines_shown(rated: dict) -> list[dict]:
    """Rated or issued lines as the console's tables show them: the kind's name,
    quantities grouped without trailing zeros, prices and amounts with the currency's
    decimals and separators (config.admin.display, the one formatting home)."""
    kinds = dict(InvoiceLine.Kind.choices)
    currency = rated["currency"]
    return [
        {
            **line,
            "kind_label": kinds.get(line["kind"], line["kind"]),
            "quantity": quantity(line["quantity"]),
            "unit_price": amount(line["unit_price"], currency),
            "amount": amount(line["amount"], currency),
        }
        for line in rated["lines"]
    ]


def _today() -> dt.datetime:
    return limits.start_of_day(limits.now())


@require_safe
def invoice_preview(request: HttpRequest) -> HttpResponse:
    """A customer's next invoice exactly as "Issue" would issue it (a draft: issued and
    rolled back), and a rolling-window estimate beside it (nothing stored); the estimate
    downloads as CSV."""
    require(request, "view_service")
    form = InvoicePreviewForm(
        request.GET if "customer" in request.GET else None, initial={"period_days": 30}
    )
    context = {**_context(request, "Invoice preview"), "form": form}
    if form.is_bound and form.is_valid():
        customer = form.cleaned_data["customer"]
        period_days = form.cleaned_data["period_days"]
        currencies = billing_services.customer_currencies(customer_id=customer.pk)
        currency = (form.cleaned_data.get("currency") or currencies[0]).upper()
        context["currency"] = currency
        # One invoice per currency: the others are a link away.
        context["other_currencies"] = [other for other in currencies if other != currency]
        try:
            rated = billing_services.invoice_rate(
                customer_id=customer.pk, period_days=period_days, currency=currency
            )
        except ServiceError as exc:
            form.add_error(None, exc.detail)
            rated = None
        if rated and request.GET.get("format") == "csv":
            response = HttpResponse(
                preview_csv(rated, customer_name=customer.name),
                content_type="text/csv; charset=utf-8",
            )
            response["Content-Disposition"] = (
                f'attachment; filename="invoice-estimate-{customer.pk}-{period_days}d'
                f'{"" if len(currencies) == 1 else "-" + currency}.csv"'
            )
            return response
        try:
            draft = billing_services.invoice_draft(
                customer_id=customer.pk, period_days=period_days, end=_today(), currency=currency
            )
        except ServiceError as exc:
            draft, context["draft_refused"] = None, exc.detail
        if draft:
            context |= {
                "draft": draft,
                "draft_lines": _lines_shown(draft),
                "draft_total": money(draft["total"], draft["currency"]),
                "draft_caption": f"{customer} for {_window(draft)}, in {draft['currency']}",
            }
        if rated:
            context |= {
                "rated": rated,
                "lines": _lines_shown(rated),
                "total": money(rated["total"], rated["currency"]),
                "estimate_caption": f"{customer}: {_window(rated)} (estimate), in "
                f"{rated['currency']}",
            }
    context["can_issue"] = may(request, "manage_billing")
    return TemplateResponse(request, "console/invoice_preview.html", context)


class InvoiceIssueForm(forms.Form):
    customer = forms.ModelChoiceField(queryset=Customer.objects.all(), to_field_name="id")
    period_days = forms.IntegerField(min_value=1, max_value=3660)
    period_end = forms.IntegerField(min_value=0)
    expected_total = forms.DecimalField(max_digits=16, decimal_places=4)
    currency = forms.RegexField(regex=r"^[A-Za-z]{3}\Z", required=False)


@require_POST
def invoice_issue(request: HttpRequest) -> HttpResponse:
    """Confirm, then issue, the draft the preview showed: the confirmation page shows its
    lines and total again; the invoice is issued only if it still totals that
    (``expected_total``), then its document is shown."""
    require(request, "manage_billing")
    form = InvoiceIssueForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The invoice to issue was not fully given; preview it again.")
        return HttpResponseRedirect(reverse("console-invoice-preview"))
    data = form.cleaned_data
    customer, period_days = data["customer"], data["period_days"]
    currency = data.get("currency") or None
    end = dt.datetime.fromtimestamp(data["period_end"], tz=dt.UTC)
    back = f"{reverse('console-invoice-preview')}?customer={customer.pk}&period_days={period_days}"
    if currency:
        back += f"&currency={currency}"
    refused = ""
    if request.POST.get("confirmed") == "yes":
        try:
            invoice = billing_services.invoice_issue(
                customer_id=customer.pk,
                period_days=period_days,
                end=end,
                expected_total=data["expected_total"],
                currency=currency,
            )
        except ServiceError as exc:
            refused = exc.detail
        else:
            messages.success(
                request,
                f"Invoice {invoice.number} issued to {customer.name}: "
                f"{money(invoice.total, invoice.currency)}.",
            )
            return HttpResponseRedirect(reverse("console-document", args=[invoice.number]))
    try:
        draft = billing_services.invoice_draft(
            customer_id=customer.pk, period_days=period_days, end=end, currency=currency
        )
    except ServiceError as exc:
        messages.error(request, refused or exc.detail)
        return HttpResponseRedirect(back)
    total = money(draft["total"], draft["currency"])
    context = {
        **_context(request, "Issue invoice"),
        "customer": customer,
        "period": _window(draft),
        "period_days": period_days,
        "period_end": draft["period_end"],
        # What the operator now confirms: a total that changed is shown, never issued.
        "expected_total": draft["total"],
        "total": total,
        # VAT as issuing would decide it now (billing.vat): shown, not confirmed (the
        # net total is what contract §6 rates and what a changed draft is caught by).
        "tax_total": money(draft["tax_total"], draft["currency"]),
        "gross_total": money(draft["gross_total"], draft["currency"]),
        "lines": _lines_shown(draft),
        "currency": draft["currency"],
        "caption": f"{customer} for {_window(draft)}, in {draft['currency']}",
        "year": limits.now().year,
        "back": back,
        "refused": refused,
    }
    return TemplateResponse(request, "console/invoice_confirm.html", context)


def _document(number: str) -> Invoice:
    try:
        return billing_selectors.invoice_get(number=number)
    except ServiceError:
        raise Http404(f"no invoice or credit note {number}") from None


def _require_view(request: HttpRequest) -> None:
    require(request, "view_service")


def document(request: HttpRequest, number: str) -> HttpResponse:
    """An issued invoice or credit note as the customer gets it, with its PDF, its
    printable page and (an invoice with something left to credit) the credit-note action."""
    _require_view(request)
    issued = _document(number)
    credited_by = [note.number for note in issued.credit_notes.order_by("pk")]
    left = billing_selectors.credited(issued) if issued.kind == Invoice.Kind.INVOICE else None
    usage = [
        {
            "sku": row.sku,
            "numbers": [
                f"{n:,}"
                for n in (
                    row.units,
                    row.allowance,
                    row.inferences,
                    row.records,
                    row.late_inferences,
                    row.late_records,
                )
            ],
        }  # fmt: skip
        for row in issued.usage.order_by("sku")
    ]
    context = {
        **documents.document_context(issued),
        **_context(request, f"{'Credit note' if issued.credits_id else 'Invoice'} {number}"),
        "credited_by": credited_by,
        "remaining": money(left.remaining_gross, issued.currency)
        if left is not None and credited_by and not left.fully_credited
        else "",
        "can_credit": left is not None
        and not left.fully_credited
        and not any(note.reissues for note in issued.credit_notes.all())
        and may(request, "manage_billing"),
        "usage": usage,
        "demo_seller": is_demo(settings.SVC_SELLER_NAME, settings.SVC_SELLER_IBAN),
        **payments.invoice_payments(request, issued),
    }
    return TemplateResponse(request, "console/document.html", context)


def document_pdf(request: HttpRequest, number: str) -> HttpResponse:
    _require_view(request)
    issued = _document(number)
    return downloads.pdf_response(issued)


def document_xml(request: HttpRequest, number: str) -> HttpResponse:
    """The document's EN 16931 XML (``?syntax=cii``, the default, or ``ubl``); one that
    cannot be an e-invoice goes back to its page saying why."""
    _require_view(request)
    issued = _document(number)
    try:
        return downloads.xml_response(issued, request.GET.get("syntax", "cii"))
    except ServiceError as exc:
        messages.error(request, exc.detail)
        return HttpResponseRedirect(reverse("console-document", args=[issued.number]))


def document_print(request: HttpRequest, number: str) -> HttpResponse:
    _require_view(request)
    return HttpResponse(documents.document_html(_document(number)))


# --- air-gapped cameras' files (issue 44) --------------------------------------------------

OFFLINE_FILE_MAX_BYTES = 1 << 20


class OfflineFileForm(forms.Form):
    """One field for both files an air-gapped camera writes (request or usage), as a file
    or as the text the camera printed (a QR code read on a phone)."""

    file = forms.FileField(
        required=False,
        label="File from the camera",
        help_text="An activation request (.svcreq) or a usage file (.svcuse).",
    )
    text = forms.CharField(
        required=False,
        label="Or its text",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text="As the camera printed it; line breaks and spaces are ignored.",
    )

    def clean(self) -> dict:
        data = super().clean()
        upload = data.get("file")
        if upload is not None:
            if upload.size > OFFLINE_FILE_MAX_BYTES:
                raise forms.ValidationError("The file is larger than 1 MiB: not a camera's file.")
            try:
                data["content"] = upload.read().decode("ascii")
            except UnicodeDecodeError:
                raise forms.ValidationError("The file is not a camera's file (not text).") from None
        else:
            data["content"] = data.get("text", "")
        if not data["content"].strip():
            raise forms.ValidationError("Choose the file the camera wrote, or paste its text.")
        return data


def offline_answer_download(made) -> HttpResponse:
    """The answer file as a download (``made``: billing.offline.OfflineFileAnswer)."""
    response = HttpResponse(made.answer + "\n", content_type="application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{made.filename}"'
    response["X-Svc-Exchange"] = made.message
    return response


def offline_files(request: HttpRequest) -> HttpResponse:
    """Air-gapped cameras: answer a file a technician carried (an operator with
    ``issue_licences``), and the units that exchanged files with their last exchange."""
    require(request, "view_service")
    form = OfflineFileForm(
        request.POST if request.method == "POST" else None, request.FILES or None
    )
    if request.method == "POST":
        require(request, "issue_licences")
        if form.is_valid():
            try:
                made = offline_file_answer(
                    text=form.cleaned_data["content"],
                    channel="console",
                    actor=request.user.get_username(),
                )
            except ServiceError as exc:
                form.add_error(None, exc.detail)
            else:
                return offline_answer_download(made)
    context = {
        **_context(request, "Air-gapped cameras"),
        "form": form,
        "may_answer": may(request, "issue_licences"),
        "units": licensing_selectors.offline_units(),
    }
    return TemplateResponse(request, "console/offline.html", context)
