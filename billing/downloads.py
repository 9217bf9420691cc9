"""What an issued document is downloaded as (issue 43): the PDF as Factur-X (PDF/A-3b
with the document's CII XML embedded, profile EN 16931, by the ``factur-x`` library),
and the e-invoice XML alone, CII or UBL. The API, the console, the portal and ``svcctl``
all answer through here.

A document that cannot be an EN 16931 e-invoice (:class:`billing.einvoice.NotExpressible`:
amounts in fils, or issued before VAT) is still downloaded as its PDF (PDF/A-3b, no XML
inside); asking for its XML answers 409 naming why.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpResponse

from billing.documents import document_pdf, pdf_filename
from billing.einvoice import NotExpressible, e_document
from billing.einvoice_cii import cii_xml
from billing.einvoice_ubl import ubl_xml
from billing.models import Invoice
from config.errors import InvalidInput

log = logging.getLogger(__name__)

SYNTAXES = {"cii": cii_xml, "ubl": ubl_xml}
FORMATS = ("pdf", *SYNTAXES)


def einvoice_xml(document: Invoice, syntax: str) -> bytes:
    """The document as EN 16931 XML in ``syntax`` (``cii`` or ``ubl``)."""
    writer = SYNTAXES.get(syntax)
    if writer is None:
        raise InvalidInput(f"syntax must be one of {', '.join(SYNTAXES)}, not {syntax!r}")
    return writer(e_document(document))


def facturx_pdf(document: Invoice) -> bytes:
    """The document's PDF/A-3b with its CII XML embedded as ``factur-x.xml`` (Factur-X /
    ZUGFeRD, profile EN 16931); the plain PDF/A-3b when it has no e-invoice."""
    import facturx  # imported on first use, as WeasyPrint is

    pdf = document_pdf(document)
    try:
        xml = einvoice_xml(document, "cii")
    except NotExpressible as exc:
        log.info("%s: PDF without Factur-X XML: %s", document.number, exc.detail)
        return pdf
    kind = "Credit note" if document.kind == Invoice.Kind.CREDIT_NOTE else "Invoice"
    return facturx.generate_from_binary(
        pdf,
        xml,
        flavor="factur-x",
        level="en16931",
        check_xsd=True,  # the library's own Factur-X schema: a last check before sending
        lang="en",
        pdf_metadata={
            "author": settings.SVC_SELLER_NAME,
            "keywords": "Factur-X, EN 16931",
            "title": f"{settings.SVC_SELLER_NAME}: {kind} {document.number}",
            "subject": f"{kind} {document.number} of {settings.SVC_SELLER_NAME}",
        },
    )


def xml_filename(document: Invoice, syntax: str) -> str:
    return f"{document.number}.{syntax}.xml"


def pdf_response(document: Invoice) -> HttpResponse:
    """The document's Factur-X PDF as a download (the API, the console, the portal)."""
    response = HttpResponse(facturx_pdf(document), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{pdf_filename(document)}"'
    return response


def xml_response(document: Invoice, syntax: str) -> HttpResponse:
    """The document's e-invoice XML as a download."""
    response = HttpResponse(einvoice_xml(document, syntax), content_type="application/xml")
    name = xml_filename(document, syntax)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
