"""An issued document as OASIS UBL 2.1 (``Invoice`` or ``CreditNote``), EN 16931 core
(:mod:`billing.einvoice` explains the choices). It carries what XRechnung adds as
mandatory (the buyer reference, the seller's contact, electronic addresses), but its
customisation id is EN 16931's: it is checked against EN 16931's rules, not XRechnung's.
Elements are written in the order the UBL 2.1 schema requires."""

from __future__ import annotations

from lxml import etree

from billing.einvoice import EN16931, INVOICE, EDocument, EParty, ETax, xml_text

CAC = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
CBC = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"
ROOTS = {
    INVOICE: "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2",
    "381": "urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2",
}
NS = {"cac": CAC, "cbc": CBC}


def _el(parent, tag: str, text: str | None = None, **attributes: str):
    prefix, name = tag.split(":")
    element = etree.SubElement(
        parent, f"{{{NS[prefix]}}}{name}", {k: xml_text(v) for k, v in attributes.items()}
    )
    if text is not None:
        element.text = xml_text(text)
    return element


def _address(parent, party: EParty) -> None:
    address = _el(parent, "cac:PostalAddress")
    if party.street:
        _el(address, "cbc:StreetName", party.street[0])
    if len(party.street) > 1:
        _el(address, "cbc:AdditionalStreetName", party.street[1])
    if party.city:
        _el(address, "cbc:CityName", party.city)
    if party.postcode:
        _el(address, "cbc:PostalZone", party.postcode)
    if len(party.street) > 2:
        _el(_el(address, "cac:AddressLine"), "cbc:Line", ", ".join(party.street[2:]))
    _el(_el(address, "cac:Country"), "cbc:IdentificationCode", party.country)


def _party(parent, tag: str, party: EParty) -> None:
    element = _el(_el(parent, tag), "cac:Party")
    if party.email:
        _el(element, "cbc:EndpointID", party.email, schemeID="EM")
    if party.identifier:
        _el(_el(element, "cac:PartyIdentification"), "cbc:ID", party.identifier)
    _address(element, party)
    if party.vat_id:
        scheme = _el(element, "cac:PartyTaxScheme")
        _el(scheme, "cbc:CompanyID", party.vat_id)
        _el(_el(scheme, "cac:TaxScheme"), "cbc:ID", "VAT")
    legal = _el(element, "cac:PartyLegalEntity")
    _el(legal, "cbc:RegistrationName", party.name)
    if party.registration:
        _el(legal, "cbc:CompanyID", party.registration)
    if not party.identifier and (party.phone or party.email):
        contact = _el(element, "cac:Contact")
        if party.phone:
            _el(contact, "cbc:Telephone", party.phone)
        if party.email:
            _el(contact, "cbc:ElectronicMail", party.email)


def _category(parent, tag: str, tax: ETax, *, reasons: bool) -> None:
    category = _el(parent, tag)
    _el(category, "cbc:ID", tax.category)
    if tax.rate is not None:
        _el(category, "cbc:Percent", tax.rate)
    if reasons and tax.exemption_code:
        _el(category, "cbc:TaxExemptionReasonCode", tax.exemption_code)
    if reasons and tax.exemption_reason:
        _el(category, "cbc:TaxExemptionReason", tax.exemption_reason)
    _el(_el(category, "cac:TaxScheme"), "cbc:ID", "VAT")


def ubl_tree(doc: EDocument) -> etree._Element:
    invoice = doc.type_code == INVOICE
    kind = "Invoice" if invoice else "CreditNote"
    root = etree.Element(
        f"{{{ROOTS[doc.type_code]}}}{kind}", nsmap={None: ROOTS[doc.type_code], **NS}
    )
    _el(root, "cbc:CustomizationID", EN16931)
    _el(root, "cbc:ID", doc.number)
    _el(root, "cbc:IssueDate", doc.issued.isoformat())
    if invoice and doc.due:
        _el(root, "cbc:DueDate", doc.due.isoformat())
    _el(root, f"cbc:{kind}TypeCode", doc.type_code)
    for note in doc.notes + [t.exemption_reason for t in doc.taxes if t.exemption_reason]:
        _el(root, "cbc:Note", note)
    _el(root, "cbc:DocumentCurrencyCode", doc.currency)
    _el(root, "cbc:BuyerReference", doc.buyer.identifier)
    period = _el(root, "cac:InvoicePeriod")
    _el(period, "cbc:StartDate", doc.period_start.isoformat())
    _el(period, "cbc:EndDate", doc.period_end.isoformat())
    if doc.credits:
        reference = _el(_el(root, "cac:BillingReference"), "cac:InvoiceDocumentReference")
        _el(reference, "cbc:ID", doc.credits)
        if doc.credits_issued:
            _el(reference, "cbc:IssueDate", doc.credits_issued.isoformat())
    _party(root, "cac:AccountingSupplierParty", doc.seller)
    _party(root, "cac:AccountingCustomerParty", doc.buyer)
    if doc.iban and invoice:
        means = _el(root, "cac:PaymentMeans")
        _el(means, "cbc:PaymentMeansCode", doc.payment_means)
        _el(means, "cbc:PaymentID", doc.number)
        account = _el(means, "cac:PayeeFinancialAccount")
        _el(account, "cbc:ID", doc.iban)
        if doc.bic:
            _el(_el(account, "cac:FinancialInstitutionBranch"), "cbc:ID", doc.bic)
    _el(_el(root, "cac:PaymentTerms"), "cbc:Note", doc.payment_terms)
    total = _el(root, "cac:TaxTotal")
    _el(total, "cbc:TaxAmount", doc.tax_total, currencyID=doc.currency)
    for row in doc.taxes:
        subtotal = _el(total, "cac:TaxSubtotal")
        _el(subtotal, "cbc:TaxableAmount", row.taxable, currencyID=doc.currency)
        _el(subtotal, "cbc:TaxAmount", row.tax, currencyID=doc.currency)
        _category(subtotal, "cac:TaxCategory", row, reasons=True)
    sums = _el(root, "cac:LegalMonetaryTotal")
    for tag, value in (
        ("cbc:LineExtensionAmount", doc.net_total),
        ("cbc:TaxExclusiveAmount", doc.net_total),
        ("cbc:TaxInclusiveAmount", doc.gross_total),
        ("cbc:PayableAmount", doc.gross_total),
    ):
        _el(sums, tag, value, currencyID=doc.currency)
    quantity_tag = "cbc:InvoicedQuantity" if invoice else "cbc:CreditedQuantity"
    for line in doc.lines:
        element = _el(root, f"cac:{kind}Line")
        _el(element, "cbc:ID", str(line.position))
        _el(element, quantity_tag, line.quantity, unitCode="C62")
        _el(element, "cbc:LineExtensionAmount", line.amount, currencyID=doc.currency)
        item = _el(element, "cac:Item")
        _el(item, "cbc:Description", line.description)
        _el(item, "cbc:Name", line.name)
        _el(_el(item, "cac:SellersItemIdentification"), "cbc:ID", line.sku)
        _category(item, "cac:ClassifiedTaxCategory", doc.taxes[0], reasons=False)
        price = _el(element, "cac:Price")
        _el(price, "cbc:PriceAmount", line.unit_price, currencyID=doc.currency)
    return root


def ubl_xml(doc: EDocument) -> bytes:
    return etree.tostring(ubl_tree(doc), xml_declaration=True, encoding="UTF-8", pretty_print=True)
