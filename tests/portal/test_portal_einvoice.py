"""A customer's e-invoices (issue 43): its documents as EN 16931 XML from the customer API
and the portal, never another customer's; the portal's PDF is Factur-X."""

from __future__ import annotations

import io

import facturx
from django.urls import reverse
from rest_framework.test import APIClient


def test_the_customer_api_and_portal_give_its_own_e_invoices_only(worlds):
    alpha, beta = worlds
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {alpha.key}")
    own = api.get(f"/v1/customer/invoices/{alpha.invoice.number}.xml", {"syntax": "ubl"})
    assert own.status_code == 200, own.content
    assert b"<Invoice" in own.content and alpha.invoice.number.encode() in own.content
    assert api.get(f"/v1/customer/invoices/{beta.invoice.number}.xml").status_code == 404
    client = alpha.client()
    page = client.get(reverse("portal-document", args=[alpha.invoice.number])).content.decode()
    cii_url = reverse("portal-document-xml", args=[alpha.invoice.number]) + "?syntax=cii"
    assert cii_url in page
    cii = client.get(cii_url)
    assert cii.status_code == 200 and b"CrossIndustryInvoice" in cii.content
    pdf = client.get(reverse("portal-document-pdf", args=[alpha.invoice.number])).content
    assert facturx.get_facturx_xml_from_pdf(io.BytesIO(pdf))[1] == cii.content
    other = client.get(reverse("portal-document-xml", args=[beta.invoice.number]))
    assert other.status_code == 404


def test_the_portal_shows_each_credit_note_of_an_invoice(worlds):
    """Issue 43 item 4: an invoice credited in two parts lists both credit notes."""
    from billing.services import credit_note_issue

    alpha, _beta = worlds
    number = alpha.invoice.number
    first = credit_note_issue(number=number, reason="part", lines=[{"line": 1, "quantity": "0.5"}])
    rest = credit_note_issue(number=number, reason="the rest")
    page = alpha.client().get(reverse("portal-document", args=[number])).content.decode()
    assert 'id="document-credit-notes"' in page
    for note in (first, rest):
        assert reverse("portal-document", args=[note.number]) in page
    assert "in part" in page
    shown = alpha.client().get(reverse("portal-document", args=[first.number]))
    assert shown.status_code == 200 and "part of invoice" in shown.content.decode()
