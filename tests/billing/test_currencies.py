"""A customer buying in several currencies (issue 38, contract §6): one invoice per
customer, currency and period, each complete on its own, numbered from the same series;
the preview, the API, the console and ``issue_invoices`` all handle it, none answers 500
and no customer's invoice blocks another's."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pytest
from django.core.management import call_command

from billing.models import Invoice
from billing.services import invoice_issue, invoice_issue_all
from licensing.models import Sku
from tests.billing.conftest import hour, record
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db

JAN, FEB, MAR = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2, 3))


@pytest.fixture
def usd_sku(db):
    """DETECT-STD priced in US dollars, as a second catalogue entry."""
    entry = Sku.objects.get(pk="DETECT-STD")
    entry.pk, entry.currency = "DETECT-USD", "USD"
    entry.unit_price_tiers = [{"from_units": 1, "unit_price": "99"}]
    entry.overage_tiers = [{"from_inferences": 0, "price_per_1000": "0.60"}]
    entry.save()
    return entry


@pytest.fixture
def two_currencies(customer, usd_sku, make_batch, activate, direct, upload):
    """January: a VISION-PRO camera (EUR 240.00) and a DETECT-USD direct licence (USD
    99.00) with 120 000 inferences over its 50 000 x 31/30 allowance (USD 0.60 / 1000)."""
    vision = make_batch(units=3, sku="VISION-PRO")
    activate(vision, "cam-eur", at=JAN + dt.timedelta(days=2))
    dollars = direct("DETECT-USD", "cam-usd", at=JAN + dt.timedelta(days=3))
    assert upload(dollars, [record(hour(JAN) + 9 * 86400, inferences=120_000)]).status_code == 200
    return customer


def test_a_two_currency_customer_gets_two_invoices_with_consecutive_numbers(two_currencies):
    out = io.StringIO()
    call_command("issue_invoices", "--period-days", "31", "--end", "2026-02-01", stdout=out)
    invoices = list(Invoice.objects.filter(customer=two_currencies).order_by("seq"))
    assert [invoice.currency for invoice in invoices] == ["EUR", "USD"]
    assert invoices[1].seq == invoices[0].seq + 1
    assert all(invoice.number.startswith("INV-") for invoice in invoices)
    eur, usd = invoices
    assert [(line.kind, line.amount) for line in eur.lines.order_by("position")] == [
        ("unit_activation", Decimal("240.00"))
    ]
    # 120 000 - 51 666.667 allowance = 68 333.333 -> 68.333 x 0.60 = 41.00
    assert [(line.kind, line.amount) for line in usd.lines.order_by("position")] == [
        ("direct_license", Decimal("99.00")),
        ("metered_overage", Decimal("41.00")),
    ]
    assert (eur.total, usd.total) == (Decimal("240.00"), Decimal("140.00"))
    assert eur.period_start == usd.period_start == JAN and eur.period_end == usd.period_end
    assert "2 invoices issued" in out.getvalue()
    # Re-run: nothing billed twice, both skipped.
    again = [
        r for r in invoice_issue_all(period_days=31, end=FEB) if r.customer_id == eur.customer_id
    ]
    assert [r.invoice for r in again] == [None, None]
    code, output = _reconcile("--deep")
    assert code == 0, output


def test_each_currency_has_its_own_periods_and_later_sales(two_currencies, direct):
    invoice_issue_all(period_days=31, end=FEB)
    # February: only USD owed; the EUR invoice is not issued, the USD one follows on.
    direct("DETECT-USD", "cam-usd-2", at=FEB + dt.timedelta(days=2))
    results = [
        r for r in invoice_issue_all(period_days=28, end=MAR) if r.customer_id == two_currencies.id
    ]
    assert [(r.invoice.currency if r.invoice else None) for r in results] == [None, "USD"]
    assert "owes nothing in EUR" in results[0].note
    assert results[1].invoice.period_start == FEB


def test_the_api_issues_and_previews_one_currency_at_a_time(two_currencies, admin_api):
    day = int(FEB.timestamp())
    body = {"customer_id": two_currencies.id, "period_days": 31, "period_end": day}
    refused = admin_api.post("/v1/admin/invoices", body, format="json")
    assert refused.status_code == 409
    assert "buys in EUR, USD" in refused.json()["detail"]
    preview = admin_api.get(f"/v1/admin/invoice/{two_currencies.id}?period_days=30")
    assert preview.status_code == 409 and "EUR or USD" in preview.json()["detail"]
    usd = admin_api.post("/v1/admin/invoices", body | {"currency": "USD"}, format="json")
    assert usd.status_code == 201, usd.json()
    assert usd.json()["currency"] == "USD" and usd.json()["total"] == 140.0
    eur = admin_api.post("/v1/admin/invoices", body | {"currency": "EUR"}, format="json")
    assert eur.status_code == 201 and eur.json()["total"] == 240.0
    for currency in ("EUR", "USD"):
        answer = admin_api.get(
            f"/v1/admin/invoice/{two_currencies.id}?period_days=3660&currency={currency}"
        )
        assert answer.status_code == 200 and answer.json()["currency"] == currency
        assert {line["sku"] for line in answer.json()["lines"]} == (
            {"VISION-PRO"} if currency == "EUR" else {"DETECT-USD"}
        )


def test_the_console_previews_and_issues_each_currency(two_currencies, admin_client, server_clock):
    with server_clock.at(FEB + dt.timedelta(hours=1)):
        page = admin_client.get(
            f"/admin/invoice-preview/?customer={two_currencies.id}&period_days=31"
        )
        assert page.status_code == 200
        text = page.content.decode()
        assert 'id="other-currencies"' in text and "currency=USD" in text
        usd = admin_client.get(
            f"/admin/invoice-preview/?customer={two_currencies.id}&period_days=31&currency=USD"
        )
        assert usd.status_code == 200 and "140.00" in usd.content.decode()
        done = admin_client.post(
            "/admin/invoice-issue/",
            {
                "customer": two_currencies.id,
                "period_days": 31,
                "period_end": int(FEB.timestamp()),
                "expected_total": "140.00",
                "currency": "USD",
                "confirmed": "yes",
            },
        )
    assert done.status_code == 302, done.content.decode()[:500]
    assert Invoice.objects.get(customer=two_currencies).currency == "USD"


def test_one_customers_currencies_never_block_another(two_currencies):
    other = CustomerFactory()
    results = invoice_issue_all(period_days=31, end=FEB)
    issued = sorted((r.customer_id, r.invoice.currency) for r in results if r.invoice)
    assert issued == [(two_currencies.id, "EUR"), (two_currencies.id, "USD")]
    assert not any(r.refused for r in results)
    assert any(r.customer_id == other.id for r in results)
    with pytest.raises(Exception, match="buys in EUR, USD"):
        invoice_issue(customer_id=two_currencies.id, period_days=28, end=MAR)


def _reconcile(*args: str) -> tuple[int, str]:
    from django.core.management import CommandError

    out = io.StringIO()
    try:
        call_command("reconcile", *args, stdout=out, stderr=out)
    except CommandError as exc:
        return 1, out.getvalue() + str(exc)
    return 0, out.getvalue()
