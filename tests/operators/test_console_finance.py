"""Finance in the console (issue 26): the preview shows the next invoice exactly as
"Issue" issues it (a draft, nothing stored), issuing asks for confirmation with the total
and refuses a total that changed, the issued document has its PDF and a credit-note
action whose confirmation shows what it reverses."""

from __future__ import annotations

import datetime as dt
import io
import re
from decimal import Decimal

import pypdf
import pytest

from audit.models import AuditEntry
from billing.models import DocumentSequence, Invoice
from events.models import Event
from licensing.services import license_issue

pytestmark = pytest.mark.django_db


@pytest.fixture
def owed(customer, server_clock):
    """Three direct DETECT-STD licences issued three days ago: 270.00 EUR owed."""
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with server_clock.at(today - dt.timedelta(days=3)):
        for n in range(3):
            license_issue(customer_id=customer.pk, sku="DETECT-STD", device_id=f"cam-{n}")
    return customer


def _preview(admin_client, customer):
    return admin_client.get(
        "/admin/invoice-preview/", {"customer": customer.pk, "period_days": 30}
    ).content.decode()


def _issue_form(page: str) -> dict:
    form = page[page.index('id="invoice-issue-form"') :]
    form = form[: form.index("</form>")]
    fields = r'name="(customer|period_days|period_end|expected_total)" value="([^"]*)"'
    return dict(re.findall(fields, form))


def test_the_preview_is_a_draft_of_the_next_invoice_and_stores_nothing(admin_client, owed):
    page = _preview(admin_client, owed)
    assert "Next invoice: what “Issue” issues" in page
    assert "Issue this invoice (270.00 EUR)…" in page
    assert "Estimate: the last 30 days, ending now" in page
    assert not Invoice.objects.exists()
    assert not DocumentSequence.objects.filter(last__gt=0).exists()  # the number given back
    assert not AuditEntry.objects.filter(action="invoice.issue").exists()
    assert not Event.objects.filter(type="invoice.issued").exists()


def test_issuing_confirms_the_total_then_shows_the_issued_document(admin_client, owed):
    form = _issue_form(_preview(admin_client, owed))
    assert Decimal(form["expected_total"]) == Decimal("270")
    confirm = admin_client.post("/admin/invoice-issue/", form).content.decode()
    assert "Yes, issue the invoice for 270.00 EUR" in confirm
    assert 'VAT on top: <span id="confirm-tax">51.30 EUR</span>' in confirm
    assert owed.name in confirm and "Direct licences" in confirm
    assert not Invoice.objects.exists()  # asked, not issued

    response = admin_client.post("/admin/invoice-issue/", {**form, "confirmed": "yes"}, follow=True)
    invoice = Invoice.objects.get()
    assert response.redirect_chain == [(f"/admin/documents/{invoice.number}/", 302)]
    assert invoice.total == Decimal("270.00")
    assert int(invoice.period_end.timestamp()) == int(form["period_end"])
    page = response.content.decode()
    assert f"Invoice {invoice.number} issued to {owed.name}: 270.00 EUR." in page
    assert "Download PDF" in page and "Issue credit note…" in page

    pdf = admin_client.get(f"/admin/documents/{invoice.number}/pdf/")
    assert pdf["Content-Type"] == "application/pdf"
    text = pypdf.PdfReader(io.BytesIO(pdf.content)).pages[0].extract_text()
    assert f"Invoice {invoice.number}" in text and "Net total 270.00 EUR" in text
    # VAT on top (the test run's seller is in DE, the customer too): 19 % of 270.00.
    assert "VAT 19 % on 270.00 51.30" in text and "Total due 321.30 EUR" in text


def test_a_total_that_changed_since_the_confirmation_is_not_issued(admin_client, owed):
    form = _issue_form(_preview(admin_client, owed))
    stale = {**form, "expected_total": "180.00", "confirmed": "yes"}
    page = admin_client.post("/admin/invoice-issue/", stale).content.decode()
    assert not Invoice.objects.exists()
    assert "now totals 270.00 EUR, not the 180.00 EUR confirmed" in page
    # The page asks again, with the total as it is now.
    assert "Yes, issue the invoice for 270.00 EUR" in page
    entry = AuditEntry.objects.get(action="invoice.issue")
    assert entry.result == "failed" and "not the 180.00 EUR confirmed" in entry.message


def test_a_credit_note_confirms_what_it_reverses(admin_client, owed):
    form = _issue_form(_preview(admin_client, owed))
    admin_client.post("/admin/invoice-issue/", {**form, "confirmed": "yes"})
    invoice = Invoice.objects.get()
    url = f"/admin/documents/{invoice.number}/credit-note/"
    confirm = admin_client.get(url).content.decode()
    assert f"Credit invoice <strong>{invoice.number}</strong>" in confirm
    assert "Yes, issue the credit note for -270.00 EUR" in confirm
    assert "-3" in confirm and "-270.00" in confirm  # the negated line
    refused = admin_client.post(url, {"reason": ""}).content.decode()
    assert "This field is required" in refused and not Invoice.objects.filter(kind="credit_note")

    response = admin_client.post(url, {"reason": "wrong SKU agreed"}, follow=True)
    note = Invoice.objects.get(kind="credit_note")
    assert response.redirect_chain == [(f"/admin/documents/{note.number}/", 302)]
    page = response.content.decode()
    assert f"Credit note {note.number} issued: -270.00 EUR, reversing {invoice.number}." in page
    assert "Issue credit note…" not in page
    original = admin_client.get(f"/admin/documents/{invoice.number}/").content.decode()
    assert "Credited by <a" in original and "Issue credit note…" not in original


def test_unknown_documents_are_404(admin_client):
    for url in ("/admin/documents/INV-1999-000001/", "/admin/documents/INV-1999-000001/pdf/",
                "/admin/documents/INV-1999-000001/credit-note/"):  # fmt: skip
        assert admin_client.get(url).status_code == 404, url


def test_a_customer_is_edited_in_the_console_and_its_page_shows_its_business(
    admin_client, owed, make_batch
):
    batch = make_batch(units=10)
    url = f"/admin/customers/customer/{owed.pk}/change/"
    page = admin_client.get(url).content.decode()
    for section in ("customer-batches", "customer-invoices", "customer-usage",
                    "customer-expiring", "customer-save"):  # fmt: skip
        assert f'id="{section}"' in page, section
    assert batch.pk in page and "0/10" in page

    response = admin_client.post(
        url,
        {"name": owed.name, "contact": "billing@nordlicht.example",
         "billing_address": "Hafenstraße 1\r\n20457 Hamburg", "tax_id": "DE123456789"},
        follow=True,
    )  # fmt: skip
    page = response.content.decode()
    assert f"Customer {owed.pk} updated: contact, billing address, tax id." in page
    owed.refresh_from_db()
    assert (owed.billing_address, owed.tax_id) == ("Hafenstraße 1\n20457 Hamburg", "DE123456789")
    entry = AuditEntry.objects.get(action="customer.update")
    assert entry.detail["changes"]["tax_id"] == {"before": "", "after": "DE123456789"}


def test_a_viewer_sees_a_customer_but_cannot_change_it(client, owed, django_user_model):
    from django.contrib.auth.models import Group

    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    viewer.groups.add(Group.objects.get(name="viewer"))
    client.force_login(viewer)
    url = f"/admin/customers/customer/{owed.pk}/change/"
    page = client.get(url).content.decode()
    assert "you may view, not change" in page and 'id="customer-save"' not in page
    assert client.post(url, {"name": "Renamed"}).status_code == 403
    owed.refresh_from_db()
    assert owed.name != "Renamed"
