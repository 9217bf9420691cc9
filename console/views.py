"""Operator dashboard and invoice preview: staff-only pages inside the admin site.

Thin views: the numbers come from selectors (``console.selectors``, ``billing.selectors``,
and ``billing.reconciliation`` for the ledger totals ``manage.py reconcile`` prints) and
the invoice from ``billing.services.invoice_rate``; issuing goes through
``billing.services.invoice_issue``, the audited service.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from billing import limits
from billing import selectors as billing_selectors
from billing import services as billing_services
from billing.exports import preview_csv
from billing.models import InvoiceLine
from billing.reconciliation import Reconciliation, ledger_check_latest, ledger_check_result
from config.display import amount, money, utc_time
from config.errors import ServiceError
from console import charts, selectors
from customers.models import Customer
from licensing import selectors as licensing_selectors
from licensing.models import NEAR_EXHAUSTION_PERCENT
from svccore.money import exact

DASHBOARD_DAYS = 30
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
        '{} <span class="svc-nowrap">({})</span>', row.customer_name, row.customer_id
    )
    return [name, row.sku, *(f"{n:,}" for n in numbers)]


def dashboard(request: HttpRequest) -> HttpResponse:
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
        "releases": selectors.seat_releases(),
        "expiring": expiring[:EXPIRING_ROWS],
        "expiring_count": len(expiring),
        "expiring_days": EXPIRING_DAYS,
        "ledger": ledger,
        "ledger_check": check,
        "ledger_rows": [_ledger_cells(row) for row in ledger.rows[:LEDGER_ROWS]],
        "ledger_total": _ledger_cells(ledger.totals(), label="All customers"),
        "can_reconcile": request.user.has_perm("billing.add_ledgercheck"),
    }
    return TemplateResponse(request, "console/dashboard.html", context)


@require_POST
def dashboard_reconcile(request: HttpRequest) -> HttpResponse:
    """Reconcile the ledger now and store it (the dashboard shows the latest run)."""
    if not request.user.has_perm("billing.add_ledgercheck"):
        raise PermissionDenied
    check = billing_services.ledger_check_run()
    found = len(check.problems)
    messages.add_message(
        request,
        messages.ERROR if found else messages.SUCCESS,
        f"Ledger reconciled in {check.seconds:.1f} s: "
        + (f"{found} problem(s) found." if found else "no problems."),
    )
    return HttpResponseRedirect(reverse("console-dashboard") + "#ledger")


class InvoicePreviewForm(forms.Form):
    customer = forms.ModelChoiceField(
        queryset=Customer.objects.order_by("name"), to_field_name="id"
    )
    period_days = forms.IntegerField(min_value=1, max_value=3660, initial=30, label="Period (days)")


def _window(rated: dict) -> tuple[str, str]:
    return utc_time(rated["period_start"]), utc_time(rated["period_end"])


def _lines_shown(rated: dict) -> list[dict]:
    """The rated lines as the preview table shows them: the kind's name, quantities
    without trailing zeros, prices and amounts with the currency's decimals."""
    kinds = dict(InvoiceLine.Kind.choices)
    currency = rated["currency"]
    return [
        {
            **line,
            "kind_label": kinds.get(line["kind"], line["kind"]),
            "quantity": f"{exact(line['quantity'], 0):f}",
            "unit_price": amount(line["unit_price"], currency),
            "amount": amount(line["amount"], currency),
        }
        for line in rated["lines"]
    ]


def invoice_preview(request: HttpRequest) -> HttpResponse:
    """Rate a customer's invoice for a period (nothing stored); download it as CSV; or
    issue it (stored, numbered, audited)."""
    data = request.POST if request.method == "POST" else request.GET
    form = InvoicePreviewForm(data if "customer" in data else None, initial={"period_days": 30})
    rated = None
    if form.is_bound and form.is_valid():
        customer_id = form.cleaned_data["customer"].pk
        period_days = form.cleaned_data["period_days"]
        if request.method == "POST":
            if not request.user.has_perm("billing.add_invoice"):
                raise PermissionDenied
            try:
                invoice = billing_services.invoice_issue(
                    customer_id=customer_id, period_days=period_days
                )
            except ServiceError as exc:
                messages.error(request, exc.detail)
            else:
                messages.success(
                    request,
                    f"Invoice {invoice.number} issued: {money(invoice.total, invoice.currency)}.",
                )
            return HttpResponseRedirect(
                f"{reverse('console-invoice-preview')}?customer={customer_id}"
                f"&period_days={period_days}"
            )
        try:
            rated = billing_services.invoice_rate(customer_id=customer_id, period_days=period_days)
        except ServiceError as exc:
            form.add_error(None, exc.detail)
        else:
            if request.GET.get("format") == "csv":
                response = HttpResponse(
                    preview_csv(rated, customer_name=form.cleaned_data["customer"].name),
                    content_type="text/csv; charset=utf-8",
                )
                response["Content-Disposition"] = (
                    f'attachment; filename="invoice-preview-{customer_id}-{period_days}d.csv"'
                )
                return response
    context = {
        **_context(request, "Invoice preview"),
        "form": form,
        "rated": rated,
        "lines": _lines_shown(rated) if rated else [],
        "total": money(rated["total"], rated["currency"]) if rated else "",
        "period": _window(rated) if rated else None,
        "can_issue": request.user.has_perm("billing.add_invoice"),
    }
    return TemplateResponse(request, "console/invoice_preview.html", context)
