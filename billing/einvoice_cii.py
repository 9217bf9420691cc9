"""An issued document as UN/CEFACT Cross Industry Invoice (D16B), the XML of Factur-X
and ZUGFeRD, profile EN 16931 (:mod:`billing.einvoice` explains the choices). Elements
are written in the order the CII schema requires."""

from __future__ import annotations

import datetime as dt

from lxml import etree

from billing.einvoice import EDocument, EParty, ETax, xml_text

RSM = "urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100"
RAM = "urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100"
UDT = "urn:un:unece:uncefact:data:standard:UnqualifiedDataType:100"
QDT = "urn:un:unece:uncefact:data:standard:QualifiedDataType:100"
NSMAP = {"rsm": RSM, "ram": RAM, "udt": UDT, "qdt": QDT}
FACTURX_EN16931 = "urn:cen.eu:en16931:2017"
LINE_TAGS = ("ram:LineOne", "ram:LineTwo", "ram:LineThree")


def _el(parent, tag: str, text: str | None = None, **attributes: str):
    prefix, name = tag.split(":")
    element = etree.SubElement(
        parent, f"{{{NSMAP[prefix]}}}{name}", {k: xml_text(v) for k, v in attributes.items()}
    )
    if text is not None:
        element.text = xml_text(text)
    return element


def _date(parent, tag: str, day: dt.date, *, qualified: bool = False) -> None:
    holder = _el(parent, tag)
    _el(holder, "qdt:DateTimeString" if qualified else "udt:DateTimeString",
        f"{day:%Y%m%d}", format="102")  # fmt: skip


def _party(parent, tag: str, party: EParty) -> None:
    element = _el(parent, tag)
    if party.identifier:
        _el(element, "ram:ID", party.identifier)
    _el(element, "ram:Name", party.name)
    if party.registration:
        legal = _el(element, "ram:SpecifiedLegalOrganization")
        _el(legal, "ram:ID", party.registration)
    if party.phone or (party.email and not party.identifier):
        contact = _el(element, "ram:DefinedTradeContact")
        if party.phone:
            phone = _el(contact, "ram:TelephoneUniversalCommunication")
            _el(phone, "ram:CompleteNumber", party.phone)
        if party.email:
            mail = _el(contact, "ram:EmailURIUniversalCommunication")
            _el(mail, "ram:URIID", party.email)
    address = _el(element, "ram:PostalTradeAddress")
    if party.postcode:
        _el(address, "ram:PostcodeCode", party.postcode)
    # Three address lines: any further ones join the third.
    street = party.street[:2] + ([", ".join(party.street[2:])] if party.street[2:] else [])
    for tag_name, line in zip(
        ("ram:LineOne", "ram:LineTwo", "ram:LineThree"), street, strict=False
    ):
        _el(address, tag_name, line)
    if party.city:
        _el(address, "ram:CityName", party.city)
    _el(address, "ram:CountryID", party.country)
    if party.email:
        uri = _el(element, "ram:URIUniversalCommunication")
        _el(uri, "ram:URIID", party.email, schemeID="EM")
    if party.vat_id:
        registration = _el(element, "ram:SpecifiedTaxRegistration")
        _el(registration, "ram:ID", party.vat_id, schemeID="VA")


def _line_tax(parent, tax: ETax) -> None:
    element = _el(parent, "ram:ApplicableTradeTax")
    _el(element, "ram:TypeCode", "VAT")
    _el(element, "ram:CategoryCode", tax.category)
    if tax.rate is not None:
        _el(element, "ram:RateApplicablePercent", tax.rate)


def cii_tree(doc: EDocument) -> etree._Element:
    root = etree.Element(f"{{{RSM}}}CrossIndustryInvoice", nsmap=NSMAP)
    context = _el(root, "rsm:ExchangedDocumentContext")
    guideline = _el(context, "ram:GuidelineSpecifiedDocumentContextParameter")
    _el(guideline, "ram:ID", FACTURX_EN16931)
    header = _el(root, "rsm:ExchangedDocument")
    _el(header, "ram:ID", doc.number)
    _el(header, "ram:TypeCode", doc.type_code)
    _date(header, "ram:IssueDateTime", doc.issued)
    for note in doc.notes + [t.exemption_reason for t in doc.taxes if t.exemption_reason]:
        _el(_el(header, "ram:IncludedNote"), "ram:Content", note)
    transaction = _el(root, "rsm:SupplyChainTradeTransaction")
    tax = doc.taxes[0]  # one category and rate per document (billing.vat)
    for line in doc.lines:
        item = _el(transaction, "ram:IncludedSupplyChainTradeLineItem")
        _el(_el(item, "ram:AssociatedDocumentLineDocument"), "ram:LineID", str(line.position))
        product = _el(item, "ram:SpecifiedTradeProduct")
        _el(product, "ram:SellerAssignedID", line.sku)
        _el(product, "ram:Name", line.name)
        _el(product, "ram:Description", line.description)
        agreement = _el(item, "ram:SpecifiedLineTradeAgreement")
        price = _el(agreement, "ram:NetPriceProductTradePrice")
        _el(price, "ram:ChargeAmount", line.unit_price)
        delivery = _el(item, "ram:SpecifiedLineTradeDelivery")
        _el(delivery, "ram:BilledQuantity", line.quantity, unitCode="C62")
        settlement = _el(item, "ram:SpecifiedLineTradeSettlement")
        _line_tax(settlement, tax)
        summation = _el(settlement, "ram:SpecifiedTradeSettlementLineMonetarySummation")
        _el(summation, "ram:LineTotalAmount", line.amount)
    agreement = _el(transaction, "ram:ApplicableHeaderTradeAgreement")
    _el(agreement, "ram:BuyerReference", doc.buyer.identifier)
    _party(agreement, "ram:SellerTradeParty", doc.seller)
    _party(agreement, "ram:BuyerTradeParty", doc.buyer)
    _el(transaction, "ram:ApplicableHeaderTradeDelivery")
    settlement = _el(transaction, "ram:ApplicableHeaderTradeSettlement")
    _el(settlement, "ram:PaymentReference", doc.credits or doc.number)
    _el(settlement, "ram:InvoiceCurrencyCode", doc.currency)
    if doc.iban and doc.type_code == "380":
        means = _el(settlement, "ram:SpecifiedTradeSettlementPaymentMeans")
        _el(means, "ram:TypeCode", doc.payment_means)
        account = _el(means, "ram:PayeePartyCreditorFinancialAccount")
        _el(account, "ram:IBANID", doc.iban)
        if doc.bic:
            institution = _el(means, "ram:PayeeSpecifiedCreditorFinancialInstitution")
            _el(institution, "ram:BICID", doc.bic)
    for row in doc.taxes:
        element = _el(settlement, "ram:ApplicableTradeTax")
        _el(element, "ram:CalculatedAmount", row.tax)
        _el(element, "ram:TypeCode", "VAT")
        if row.exemption_reason:
            _el(element, "ram:ExemptionReason", row.exemption_reason)
        _el(element, "ram:BasisAmount", row.taxable)
        _el(element, "ram:CategoryCode", row.category)
        if row.exemption_code:
            _el(element, "ram:ExemptionReasonCode", row.exemption_code)
        if row.rate is not None:
            _el(element, "ram:RateApplicablePercent", row.rate)
    period = _el(settlement, "ram:BillingSpecifiedPeriod")
    _date(period, "ram:StartDateTime", doc.period_start)
    _date(period, "ram:EndDateTime", doc.period_end)
    terms = _el(settlement, "ram:SpecifiedTradePaymentTerms")
    _el(terms, "ram:Description", doc.payment_terms)
    if doc.due:
        _date(terms, "ram:DueDateDateTime", doc.due)
    totals = _el(settlement, "ram:SpecifiedTradeSettlementHeaderMonetarySummation")
    _el(totals, "ram:LineTotalAmount", doc.net_total)
    _el(totals, "ram:TaxBasisTotalAmount", doc.net_total)
    _el(totals, "ram:TaxTotalAmount", doc.tax_total, currencyID=doc.currency)
    _el(totals, "ram:GrandTotalAmount", doc.gross_total)
    _el(totals, "ram:DuePayableAmount", doc.gross_total)
    if doc.credits:
        reference = _el(settlement, "ram:InvoiceReferencedDocument")
        _el(reference, "ram:IssuerAssignedID", doc.credits)
        if doc.credits_issued:
            _date(reference, "ram:FormattedIssueDateTime", doc.credits_issued, qualified=True)
    return root


def cii_xml(doc: EDocument) -> bytes:
    return etree.tostring(cii_tree(doc), xml_declaration=True, encoding="UTF-8", pretty_print=True)
