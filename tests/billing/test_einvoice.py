"""EN 16931 e-invoices (issue 43, billing.einvoice*, billing.downloads): every invoice and
credit note as UN/CEFACT CII and as UBL 2.1, validated against the official CEN
Schematron rules (XSLT 2.0, run by saxonche) and, for CII, the CII XML Schema, for every
VAT category and currency; amounts EN 16931 cannot hold (more than two decimals) refused
by name; the PDF as Factur-X (PDF/A-3b with the CII XML embedded)."""

from __future__ import annotations

import io

import facturx
import pypdf
import pytest
from django.test import override_settings
from lxml import etree

from billing import downloads
from billing.einvoice import NotExpressible
from billing.models import Invoice
from billing.services import credit_note_issue
from customers.models import Customer
from tests.billing.einvoice_validation import available, cii_schema_errors, schematron

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(not available(), reason="../shared/validators/en16931 is missing"),
]

CASES = ["S", "S-consumer", "AE", "E", "O"]
# KWD-10: a KWD price list whose amounts are whole tens of fils; its 0 % categories have
# e-invoices, its standard-rated ones not (the tax is rounded to the fils).
EXPRESSIBLE = {("KWD-10", case) for case in ("AE", "E", "O")}
EXPRESSIBLE |= {(prices, case) for prices in ("EUR", "JPY") for case in CASES}


def _valid(xml: bytes, syntax: str) -> None:
    fatal, _warnings = schematron(xml, syntax)
    assert fatal == [], fatal
    if syntax == "cii":
        assert cii_schema_errors(xml) == []


@pytest.mark.parametrize("prices", ["EUR", "JPY", "KWD-10"])
@pytest.mark.parametrize("case", CASES)
def test_every_category_and_currency_validates_as_invoice_and_credit_note(
    vat_documents, prices, case
):
    invoice = vat_documents(case, prices)
    note = credit_note_issue(number=invoice.number, reason="validation of the credit note")
    for document in (invoice, note):
        for syntax in ("cii", "ubl"):
            if (prices, case) not in EXPRESSIBLE:
                with pytest.raises(NotExpressible, match="at most 2"):
                    downloads.einvoice_xml(document, syntax)
                continue
            xml = downloads.einvoice_xml(document, syntax)
            _valid(xml, syntax)
            text = xml.decode()
            assert document.number in text and invoice.currency in text
            if document.credits_id:
                assert invoice.number in text  # the invoice it credits (BG-3)


def test_the_rules_do_catch_a_wrong_document(vat_documents):
    """The validators are not silent: a tax total changed after writing fails them."""
    xml = downloads.einvoice_xml(vat_documents("S"), "cii")
    tree = etree.fromstring(xml)
    ram = "urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100"
    (tax,) = tree.iter(f"{{{ram}}}TaxTotalAmount")
    tax.text = "1.00"
    fatal, _ = schematron(etree.tostring(tree), "cii")
    assert any("BR-CO-15" in failure for failure in fatal), fatal
    ubl = downloads.einvoice_xml(vat_documents("AE"), "ubl").replace(b"VATEX-EU-AE", b"")
    fatal, _ = schematron(ubl, "ubl")
    assert fatal, "an AE invoice without its exemption code must fail"


def test_amounts_in_fils_are_refused_by_name(vat_documents):
    invoice = vat_documents("O", "KWD")
    with pytest.raises(NotExpressible, match=r"line 1 amount 4\.125 KWD has 3 decimals"):
        downloads.einvoice_xml(invoice, "ubl")
    # Its PDF is the invoice: PDF/A-3b without an e-invoice inside.
    pdf = downloads.facturx_pdf(invoice)
    assert pdf.startswith(b"%PDF-") and b"factur-x.xml" not in pdf


def _catalog(pdf: bytes):
    reader = pypdf.PdfReader(io.BytesIO(pdf))
    assert not reader.is_encrypted
    return reader, reader.trailer["/Root"]


def test_the_pdf_is_facturx_pdfa3_with_the_cii_inside(vat_documents):
    invoice = vat_documents("AE")
    pdf = downloads.facturx_pdf(invoice)
    name, embedded = facturx.get_facturx_xml_from_pdf(io.BytesIO(pdf), check_xsd=True)
    assert name == "factur-x.xml" and embedded == downloads.einvoice_xml(invoice, "cii")
    reader, catalog = _catalog(pdf)
    # PDF/A-3b as far as can be checked without a PDF/A validator: the identification in
    # the XMP metadata, an sRGB output intent with its ICC profile, every font embedded,
    # and the XML an associated file of the document (/AF) with a relationship and MIME
    # type, as PDF/A-3 and Factur-X require.
    xmp = catalog["/Metadata"].get_object().get_data().decode()
    assert "<pdfaid:part>3</pdfaid:part>" in xmp and "<pdfaid:conformance>B" in xmp
    assert "urn:factur-x:pdfa:CrossIndustryDocument:invoice:1p0#" in xmp
    assert "<fx:ConformanceLevel>EN 16931</fx:ConformanceLevel>" in xmp
    (intent,) = [i.get_object() for i in catalog["/OutputIntents"]]
    assert intent["/S"] == "/GTS_PDFA1" and intent["/DestOutputProfile"].get_object().get_data()
    (spec,) = [f.get_object() for f in catalog["/AF"]]
    assert spec["/AFRelationship"] in ("/Data", "/Alternative")
    assert spec["/EF"]["/F"].get_object()["/Subtype"] == "/text/xml"
    for page in reader.pages:
        for font in page["/Resources"]["/Font"].values():
            descendants = font.get_object().get("/DescendantFonts") or [font]
            for each in descendants:
                descriptor = each.get_object()["/FontDescriptor"].get_object()
                assert {"/FontFile", "/FontFile2", "/FontFile3"} & set(descriptor), descriptor
    text = "\n".join(page.extract_text() for page in reader.pages)
    assert "Reverse charge: VAT to be accounted for by the recipient" in text


def test_the_admin_api_answers_each_syntax_and_says_why_not(vat_documents, admin_api):
    invoice = vat_documents("E", "JPY")
    for syntax, root in (("cii", b"CrossIndustryInvoice"), ("ubl", b"<Invoice")):
        answer = admin_api.get(f"/v1/admin/invoices/{invoice.number}.xml", {"syntax": syntax})
        assert answer.status_code == 200, answer.content
        assert answer["Content-Type"] == "application/xml"
        assert answer["Content-Disposition"] == (
            f'attachment; filename="{invoice.number}.{syntax}.xml"'
        )
        assert root in answer.content
    default = admin_api.get(f"/v1/admin/invoices/{invoice.number}.xml")
    assert b"CrossIndustryInvoice" in default.content
    wrong = admin_api.get(f"/v1/admin/invoices/{invoice.number}.xml", {"syntax": "edifact"})
    assert wrong.status_code == 400 and "syntax" in wrong.json()["detail"]
    fils = vat_documents("O", "KWD")
    refused = admin_api.get(f"/v1/admin/invoices/{fils.number}.xml", {"syntax": "ubl"})
    assert refused.status_code == 409 and "BR-DEC" in refused.json()["detail"]
    assert admin_api.get("/v1/admin/invoices/INV-1999-000001.xml").status_code == 404
    pdf = admin_api.get(f"/v1/admin/invoices/{invoice.number}.pdf")
    assert facturx.get_facturx_xml_from_pdf(io.BytesIO(pdf.content))[1] == default.content


def test_the_console_downloads_each_syntax(vat_documents, admin_client):
    invoice = vat_documents("S")
    page = admin_client.get(f"/admin/documents/{invoice.number}/").content.decode()
    assert f"/admin/documents/{invoice.number}/xml/?syntax=ubl" in page
    assert 'id="demo-seller"' in page  # the test run's seller is make run's demo one
    with override_settings(SVC_SELLER_NAME="Vision Licensing B.V.",
                           SVC_SELLER_IBAN="NL91ABNA0417164300"):  # fmt: skip
        real = admin_client.get(f"/admin/documents/{invoice.number}/").content.decode()
    assert 'id="demo-seller"' not in real
    answer = admin_client.get(f"/admin/documents/{invoice.number}/xml/", {"syntax": "ubl"})
    assert answer.status_code == 200 and b"<Invoice" in answer.content
    fils = vat_documents("S", "KWD")
    back = admin_client.get(f"/admin/documents/{fils.number}/xml/", follow=True)
    assert "EN 16931 allows amounts of at most 2" in back.content.decode()


def test_characters_xml_cannot_hold_are_left_out(vat_documents):
    """A customer's name or address may hold control characters (the API takes them);
    its e-invoice leaves them out instead of failing, and its PDF is still Factur-X."""
    invoice = vat_documents("S")
    customer = invoice.customer
    Customer.objects.filter(pk=customer.pk).update(
        name="Nord\x1dlicht\x0c GmbH", billing_address="Hafen\x1fstraße\x07 1\n20457 Hamburg"
    )
    invoice = Invoice.objects.get(pk=invoice.pk)
    assert "\x1d" in invoice.customer.name
    for syntax in ("cii", "ubl"):
        xml = downloads.einvoice_xml(invoice, syntax)
        assert b"Nordlicht GmbH" in xml and "Hafenstraße 1".encode() in xml
        _valid(xml, syntax)
    pdf = downloads.facturx_pdf(invoice)
    assert facturx.get_facturx_xml_from_pdf(io.BytesIO(pdf))[0] == "factur-x.xml"


@pytest.mark.parametrize(
    ("prices", "case"),
    [("EUR", "S"), ("EUR", "AE"), ("JPY", "S"), ("JPY", "AE"), ("KWD-10", "AE"),
     ("KWD-10", "O")],
)  # fmt: skip
def test_partial_credit_notes_validate_in_each_currency_and_category(vat_documents, prices, case):
    """Issue 43 item 4: credit notes of part of a line, then of the rest, are EN 16931
    credit notes too (zero fatal assertions), each referencing its invoice."""
    invoice = vat_documents(case, prices)
    overage = invoice.lines.get(kind="metered_overage")
    first = credit_note_issue(
        number=invoice.number,
        reason="part of the overage",
        lines=[{"line": overage.position, "quantity": "12.345"}],
    )
    rest = credit_note_issue(number=invoice.number, reason="the rest")
    for note in (first, rest):
        for syntax in ("cii", "ubl"):
            xml = downloads.einvoice_xml(note, syntax)
            _valid(xml, syntax)
            assert invoice.number in xml.decode() and note.number in xml.decode()
    assert "part of invoice" in pypdf.PdfReader(io.BytesIO(downloads.facturx_pdf(first))).pages[
        0
    ].extract_text().replace("\n", " ")
