"""The console's payments (issue 43): the invoice list's state and balance columns and
state filter, the invoice page's payments and its record-a-payment form (confirmed
first), the bank statement upload (checked, then imported), the dashboard's
receivables by age; a viewer sees them and records nothing."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from billing.payment_models import Payment
from billing.payments import payment_record
from config import clock
from operators.services import roles_ensure
from tests.billing.payment_support import credit_note, invoice
from tests.billing.test_camt053 import v08

pytestmark = pytest.mark.django_db


def test_invoice_list_shows_state_and_balance_and_filters_by_state(admin_client, customer):
    paid = invoice(customer, "119.00", tax="19.00")
    payment_record(number=paid.number, amount="119.00")
    late = invoice(customer, "2500.00", issued_at=clock.now() - dt.timedelta(days=45))
    void = invoice(customer, "10.00")
    credit_note(void)
    url = reverse("admin:billing_invoice_changelist")
    page = admin_client.get(url).content.decode()
    assert "2,500.00 EUR" in page and "overdue" in page and "void (credited)" in page
    overdue = admin_client.get(f"{url}?state=overdue").content.decode()
    assert late.number in overdue and paid.number not in overdue and void.number not in overdue
    assert paid.number in admin_client.get(f"{url}?state=paid").content.decode()


def test_record_a_payment_from_the_invoice_page(admin_client, customer):
    inv = invoice(customer, "1190.00", tax="190.00")
    page = admin_client.get(reverse("console-document", args=[inv.number])).content.decode()
    assert 'id="invoice-state">open<' in page and "No payment recorded." in page
    add = re.search(r'id="document-payment" href="([^"]+)"', page)[1].replace("&amp;", "&")
    assert admin_client.get(add).status_code == 200
    form = {"invoice": inv.number, "amount": "1000.00", "paid_on": "", "reference": "SEPA-1",
            "note": ""}  # fmt: skip
    asked = admin_client.post(reverse("admin:billing_payment_add"), form).content.decode()
    assert "goes from 1,190.00 EUR (open) to 190.00 EUR" in asked
    assert not Payment.objects.exists()
    digest = re.search(r'name="_confirmed" value="([0-9a-f]+)"', asked)[1]
    done = admin_client.post(reverse("admin:billing_payment_add"), {**form, "_confirmed": digest})
    assert done.status_code == 302 and done.url == reverse("console-document", args=[inv.number])
    page = admin_client.get(done.url).content.decode()
    assert "partly paid" in page and "SEPA-1" in page and "190.00 EUR" in page
    refused = admin_client.post(reverse("admin:billing_payment_add"), {**form, "amount": "1.001"})
    assert "more decimals" in refused.content.decode()


def test_statement_upload_checks_then_imports(admin_client, customer):
    inv = invoice(customer, "10.00")
    url = reverse("console-statement")
    assert admin_client.get(url).status_code == 200
    upload = SimpleUploadedFile("statement.xml", v08("10.00", inv.number), "application/xml")
    checked = admin_client.post(url, {"file": upload}).content.decode()
    assert "What importing would do: 1 matched" in checked and not Payment.objects.exists()
    carried = re.search(r'name="statement" value="([^"]+)"', checked)[1]
    done = admin_client.post(url, {"statement": carried, "import": "1"}).content.decode()
    assert "Imported: 1 matched" in done and Payment.objects.count() == 1
    bad = SimpleUploadedFile("x.xml", b"<Document", "application/xml")
    assert "not well-formed" in admin_client.post(url, {"file": bad}).content.decode()


def test_dashboard_shows_receivables_by_age(admin_client, customer):
    invoice(customer, "100.00")
    invoice(customer, "250.00", issued_at=clock.now() - dt.timedelta(days=75))
    page = admin_client.get(reverse("console-dashboard")).content.decode()
    panel = page.split('id="receivables"', 1)[1].split("</table>", 1)[0]
    assert "EUR" in panel and "100.00 EUR" in panel and "250.00 EUR" in panel
    assert "350.00 EUR" in panel  # the total


def test_a_viewer_sees_payments_and_records_none(django_user_model, customer):
    roles_ensure()
    user = django_user_model.objects.create_user("viewer-1", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    client.force_login(user)
    inv = invoice(customer, "10.00")
    page = client.get(reverse("console-document", args=[inv.number])).content.decode()
    assert 'id="invoice-state"' in page and "document-payment" not in page
    assert client.get(reverse("admin:billing_payment_add")).status_code == 403
    assert client.get(reverse("console-statement")).status_code == 403
