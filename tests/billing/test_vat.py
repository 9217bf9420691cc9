"""VAT per EN 16931 category (issue 43, billing.vat): the category decided from the
seller's country (the test run's seller: DE) and the customer's country, VAT id and
exemption; tax per rate rounded half-up once to the currency's minor unit on top of
contract §6's net total; rows fixed at issue (a rate change never re-prices an issued
invoice); credit notes negate them; the API, CSV and reconciliation show them."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from billing import exports
from billing.document_checks import document_problems
from billing.models import ImmutableError, InvoiceTax, VatRate
from billing.services import credit_note_issue
from billing.vat import REVERSE_CHARGE_NOTE, vat_rate, vat_rate_save
from config.errors import InvalidInput, MisconfiguredService
from customers.services import customer_create, customer_update
from tests.billing.test_ledger_audit import tamper

pytestmark = pytest.mark.django_db


def _half_up(value: Decimal, places: int) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


@pytest.mark.parametrize(
    ("case", "category", "rate", "note"),
    [
        ("S", "S", Decimal("19.00"), ""),
        ("S-consumer", "S", Decimal("21.00"), ""),  # NL consumer: NL's rate (Article 58)
        ("AE", "AE", Decimal("0.00"), REVERSE_CHARGE_NOTE),
        ("O", "O", Decimal("0.00"), "Article 44"),
        ("E", "E", Decimal("0.00"), "Exempt under a test arrangement"),
    ],
)
def test_each_category_is_decided_and_taxed_on_top_of_the_net_total(
    vat_documents, case, category, rate, note
):
    invoice = vat_documents(case)
    row = invoice.taxes.get()
    assert (row.category, row.rate) == (category, rate)
    assert note in row.exemption_reason
    assert row.taxable_amount == invoice.total == sum(line.amount for line in invoice.lines.all())
    assert row.tax_amount == _half_up(invoice.total * rate / 100, 2) == invoice.tax_total
    assert invoice.gross_total == invoice.total + invoice.tax_total
    if rate:
        assert invoice.tax_total > 0
    assert document_problems() == []


@pytest.mark.parametrize(("currency", "places"), [("EUR", 2), ("JPY", 0), ("KWD", 3)])
def test_tax_is_rounded_once_per_rate_to_the_minor_unit(vat_documents, currency, places):
    invoice = vat_documents("S", currency)
    assert invoice.tax_total == _half_up(invoice.total * Decimal("0.19"), places)
    assert invoice.tax_total.as_tuple().exponent >= -3
    assert document_problems() == []


def test_a_rate_change_never_reprices_an_issued_invoice(vat_documents):
    before = vat_documents("S")
    old = VatRate.objects.get(country="DE", valid_to__isnull=True)
    today = before.issued_at.date()
    vat_rate_save(
        rate_id=old.pk, country="DE", rate=old.rate, valid_from=old.valid_from,
        valid_to=today - dt.timedelta(days=1),
    )  # fmt: skip
    vat_rate_save(country="DE", rate=Decimal("21"), valid_from=today)
    assert vat_rate("DE", today) == Decimal("21")
    before.refresh_from_db()
    assert before.taxes.get().rate == Decimal("19.00")
    after = vat_documents("S")
    assert after.taxes.get().rate == Decimal("21.00")
    assert after.tax_total == _half_up(after.total * Decimal("0.21"), 2)
    # The credit note of the earlier invoice keeps its 19 %.
    note = credit_note_issue(number=before.number, reason="rate test")
    assert note.taxes.get().rate == Decimal("19.00") and note.tax_total == -before.tax_total


def test_a_credit_note_negates_its_invoices_tax(vat_documents):
    invoice = vat_documents("AE")
    note = credit_note_issue(number=invoice.number, reason="wrong customer")
    (row,) = note.taxes.all()
    original = invoice.taxes.get()
    assert (row.category, row.rate, row.exemption_reason) == (
        original.category, original.rate, original.exemption_reason,
    )  # fmt: skip
    assert (row.taxable_amount, row.tax_amount) == (-original.taxable_amount, 0)
    assert (note.buyer_country, note.buyer_vat_id) == ("FR", "FR40303265045")
    assert document_problems() == []


def test_overlapping_rates_and_missing_rates_are_refused(vat_documents):
    with pytest.raises(InvalidInput, match="DE already has 19.00 % from 1 January 2024 on"):
        vat_rate_save(country="DE", rate=Decimal("16"), valid_from=dt.date(2026, 7, 1))
    with pytest.raises(InvalidInput, match="percentage"):
        vat_rate_save(country="CH", rate=Decimal("100"), valid_from=dt.date(2026, 1, 1))
    VatRate.objects.filter(country="DE").delete()
    with pytest.raises(MisconfiguredService, match="no VAT rate of DE"):
        vat_documents("S")


def test_tax_rows_are_immutable_and_tampering_is_reported(vat_documents):
    invoice = vat_documents("S")
    row = invoice.taxes.get()
    with pytest.raises(ImmutableError):
        row.save()
    if connection.vendor == "postgresql":  # the database refuses it too (migration 0016)
        with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
            InvoiceTax.objects.filter(pk=row.pk).update(tax_amount=Decimal("1.00"))
    tamper("UPDATE billing_invoicetax SET tax_amount = 1 WHERE id = %s", [row.pk])
    problems = document_problems()
    assert any(f"{invoice.number} VAT S 19.00 %" in p for p in problems), problems


def test_the_api_and_csv_carry_net_tax_and_gross(vat_documents, admin_api):
    invoice = vat_documents("S", "KWD")
    answer = admin_api.get(f"/v1/admin/invoices/{invoice.number}").json()
    assert answer["total"] == float(invoice.total)
    assert answer["tax_total"] == float(invoice.tax_total)
    assert answer["gross_total"] == float(invoice.gross_total)
    assert answer["tax_breakdown"] == [
        {"category": "S", "rate": 19, "taxable_amount": float(invoice.total),
         "tax_amount": float(invoice.tax_total), "exemption_reason": ""}
    ]  # fmt: skip
    assert (answer["buyer_country"], answer["buyer_vat_id"]) == ("DE", "DE136695976")
    listed = admin_api.get("/v1/admin/invoices").json()["invoices"][0]
    assert listed["gross_total"] == float(invoice.gross_total)
    out = io.StringIO()
    exports.write_csv(exports.invoice_rows([invoice]), out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert {(r["vat_category"], r["vat_rate"]) for r in rows} == {("S", "19")}
    assert {Decimal(r["document_tax_total"]) for r in rows} == {invoice.tax_total}
    assert {Decimal(r["document_gross_total"]) for r in rows} == {invoice.gross_total}


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"country": "ZZ"}, "ISO 3166 alpha-2"),
        ({"country": "DE", "vat_id": "DE123456789"}, "not a valid EU VAT id"),
        ({"country": "DE", "vat_id": "FR40303265045"}, "not of the customer's country DE"),
        ({"vat_id": "DE136695976"}, "needs the customer's country"),
        ({"country": "CH", "vat_id": "CHE-123.456.789 MWST"}, "not a valid CH VAT number"),
    ],
)
def test_a_customers_tax_identity_is_checked(admin_api, fields, says):
    answer = admin_api.post(
        "/v1/admin/customers", {"name": "Tax Identity AG", "kind": "oem", **fields}, format="json"
    )
    assert answer.status_code == 400, answer.json()
    assert says in answer.json()["detail"]


def test_a_customers_tax_identity_is_stored_compact_and_editable(admin_api):
    customer = customer_create(name="Grenzhandel SARL", kind="oem", country="fr",
                               vat_id="FR 40 303 265 045")  # fmt: skip
    assert (customer.country, customer.vat_id) == ("FR", "FR40303265045")
    answer = admin_api.patch(
        f"/v1/admin/customers/{customer.pk}", {"country": "AT", "vat_id": ""}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    assert (answer.json()["country"], answer.json()["vat_id"]) == ("AT", "")
    with pytest.raises(InvalidInput, match="not of the customer's country AT"):
        customer_update(customer_id=customer.pk, vat_id="FR40303265045")


def test_finance_edits_the_rate_table_in_the_console(admin_client):
    from audit.models import AuditEntry

    add = "/admin/billing/vatrate/add/"
    overlap = admin_client.post(add, {"country": "de", "rate": "16", "valid_from": "2030-07-01"})
    assert overlap.status_code == 200
    assert "DE already has 19.00 % from 1 January 2024 on" in overlap.content.decode()
    old = VatRate.objects.get(country="DE", valid_to__isnull=True)
    change = f"/admin/billing/vatrate/{old.pk}/change/"
    ended = admin_client.post(
        change,
        {"country": "DE", "rate": "19", "valid_from": "2024-01-01", "valid_to": "2030-06-30"},
    )
    assert ended.status_code == 302, ended.content.decode()[-2000:]
    added = admin_client.post(add, {"country": "de", "rate": "16", "valid_from": "2030-07-01"})
    assert added.status_code == 302
    assert vat_rate("DE", dt.date(2030, 6, 30)) == Decimal("19")
    assert vat_rate("DE", dt.date(2030, 7, 1)) == Decimal("16")
    saved = AuditEntry.objects.filter(action="vat_rate.save", result="ok")
    assert [e.detail["rate"] for e in saved.order_by("id")] == ["19.00", "16.00"]
