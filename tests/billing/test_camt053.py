"""Bank statement import (issue 43): CAMT.053 (.02 to .08) credits matched to invoices
by number, each entry once; unmatched entries reported with what is needed to act; a
malformed or hostile file is a 400 naming the problem and imports nothing."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from audit.models import AuditEntry
from billing import balances, camt053
from billing.models import Invoice
from billing.payment_models import Payment
from billing.statements import statement_import
from config.errors import InvalidInput
from events.models import Event
from tests.billing.payment_support import credit_note, invoice
from tests.portal.conftest import account_for

pytestmark = pytest.mark.django_db

D = Decimal
HERE = Path(__file__).parent / "camt053"


def v02(inv1: str, amount1: str, inv2: str, amount2: str) -> bytes:
    text = (HERE / "statement-v02.xml").read_text()
    for key, value in (("{INV1}", inv1), ("{AMOUNT1}", amount1), ("{INV2}", inv2),
                       ("{AMOUNT2}", amount2)):  # fmt: skip
        text = text.replace(key, value)
    return text.encode()


def v08(amount: str, ustrd1: str, ustrd2: str = "", currency: str = "EUR") -> bytes:
    text = (HERE / "statement-v08.xml").read_text()
    for key, value in (("{AMOUNT}", amount), ("{USTRD1}", ustrd1), ("{USTRD2}", ustrd2),
                       ("{CCY}", currency)):  # fmt: skip
        text = text.replace(key, value)
    return text.encode()


def state(number: str) -> tuple[str, Decimal]:
    s = balances.standing_of(Invoice.objects.get(number=number))
    return s.state, s.balance


def test_a_statement_pays_the_invoices_it_names_once(customer):
    one = invoice(customer, "1190.00", tax="190.00")
    two = invoice(customer, "250.00")
    data = v02(one.number, "1190.00", two.number, "100.00")
    report = statement_import(data=data)
    assert (report["matched"], report["unmatched"], report["skipped"]) == (2, 1, 1)
    rows = {row["entry_id"]: row for row in report["entries"]}
    first = rows["2026112700012345"]
    assert first["outcome"] == "matched" and first["debtor"].startswith("Acme Cameras")
    assert first["payments"] == [
        {"invoice_number": one.number, "amount": D("1190.00"), "balance": D("0.00"),
         "state": "paid"}
    ]  # fmt: skip
    assert rows["2026112700012346"]["payments"][0]["state"] == "partly_paid"
    unmatched = rows["2026112700012347"]
    assert unmatched["outcome"] == "unmatched"
    assert "no invoice number" in unmatched["reason"]
    assert (unmatched["amount"], unmatched["booked_on"]) == (D("75.00"), "2026-11-27")
    assert state(one.number) == ("paid", 0)
    assert state(two.number) == ("partly_paid", D("150.00"))
    payment = Payment.objects.get(invoice=one)
    assert (payment.source, payment.bank_entry_id, str(payment.paid_on)) == (
        "camt053",
        "2026112700012345",
        "2026-11-27",
    )
    assert Event.objects.filter(type="invoice.paid").count() == 1

    again = statement_import(data=data)  # the same file again: nothing twice
    assert (again["matched"], again["already_imported"], again["unmatched"]) == (0, 2, 1)
    assert Payment.objects.count() == 2
    assert Event.objects.filter(type="invoice.paid").count() == 1
    entries = AuditEntry.objects.filter(action="payment.import")
    assert entries.count() == 2
    entry = entries.first()
    assert entry.target == "DE89370400440532013000-2026-331"
    assert entry.detail["bytes"] == len(data) and len(entry.detail["sha256"]) == 64
    assert "<Document" not in str(entry.detail)  # the counts, never the file


def test_one_entry_pays_several_invoices_when_the_amount_is_their_balances(customer):
    a, b = invoice(customer, "100.00"), invoice(customer, "50.50")
    report = statement_import(data=v08("150.50", f"{a.number} and {b.number}"))
    row = report["entries"][0]
    assert row["outcome"] == "matched" and row["reason"] == ""
    assert [(p["invoice_number"], p["amount"]) for p in row["payments"]] == [
        (a.number, D("100.00")),
        (b.number, D("50.50")),
    ]
    assert state(a.number)[0] == state(b.number)[0] == "paid"
    assert report["skipped"] == 1  # the pending entry


def test_an_amount_that_is_not_their_sum_goes_to_the_first_and_is_reported(customer):
    a, b = invoice(customer, "100.00"), invoice(customer, "50.50")
    row = statement_import(data=v08("120.00", f"{a.number}, {b.number}"))["entries"][0]
    assert [p["invoice_number"] for p in row["payments"]] == [a.number]
    assert "not the sum" in row["reason"] and a.number in row["reason"]
    assert state(a.number) == ("paid", D("-20.00"))  # overpaid: a credit
    assert state(b.number) == ("open", D("50.50"))


def test_a_number_split_over_two_remittance_lines_is_found(customer):
    a = invoice(customer, "10.00")
    row = statement_import(data=v08("10.00", "Rechnung " + a.number[:7], a.number[7:]))
    assert row["entries"][0]["payments"][0]["invoice_number"] == a.number


def test_unknown_invoice_and_currency_mismatch_are_unmatched(customer):
    yen = invoice(customer, "5000", currency="JPY")
    report = statement_import(data=v08("50.00", "INV-2026-999999"))
    assert report["entries"][0]["outcome"] == "unmatched"
    assert "unknown invoice INV-2026-999999" in report["entries"][0]["reason"]
    report = statement_import(data=v08("5000.00", yen.number, currency="EUR"))
    reason = report["entries"][0]["reason"]
    assert "currency mismatch" in reason and f"{yen.number} is in JPY" in reason
    assert not Payment.objects.exists()


def test_a_credited_invoice_paid_by_the_bank_shows_a_credit(customer):
    inv = invoice(customer, "40.00")
    credit_note(inv)
    statement_import(data=v08("40.00", inv.number))
    assert state(inv.number) == ("void", D("-40.00"))


def test_dry_run_reports_and_imports_nothing(customer):
    a = invoice(customer, "10.00")
    report = statement_import(data=v08("10.00", a.number), dry_run=True)
    assert report["dry_run"] and report["matched"] == 1
    assert not Payment.objects.exists() and not Event.objects.filter(type="invoice.paid").exists()


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "empty"),
        (b"<Document", "not well-formed"),
        (b"<?xml version='1.0'?><x/>", "not a CAMT.053"),
        (b'<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.052.001.02"/>', "not a CAMT.053"),
        (b'<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02"/>', "no statement"),
        (
            b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            b'<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02">&x;</Document>',
            "DOCTYPE",
        ),
        (
            b'<!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
            b"<d>&b;</d>",
            "DOCTYPE",
        ),
    ],
)
def test_malformed_and_hostile_files_are_refused_whole(customer, data, words):
    with pytest.raises(InvalidInput, match=words):
        statement_import(data=data)


def test_an_entry_problem_refuses_the_file_and_imports_nothing(customer):
    a = invoice(customer, "10.00")
    good = v08("10.00", a.number).decode()
    bad = good.replace('<Amt Ccy="EUR">500.00</Amt>', '<Amt Ccy="EUR">lots</Amt>')
    bad = bad.replace("<Cd>PDNG</Cd>", "<Cd>BOOK</Cd>")
    with pytest.raises(InvalidInput, match="entry 2: amount 'lots' is not a number"):
        statement_import(data=bad.encode())
    assert not Payment.objects.exists()


def test_the_api_imports_and_answers_400_for_a_bad_file(customer, admin_api):
    a = invoice(customer, "10.00")
    url = "/v1/admin/payments/camt053"
    dry = admin_api.post(url, {"statement": v08("10.00", a.number).decode(), "dry_run": True},
                         format="json")  # fmt: skip
    assert dry.status_code == 200 and dry.json()["dry_run"] is True
    answer = admin_api.post(url, {"statement": v08("10.00", a.number).decode()}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["matched"] == 1
    assert b'"amount":10.00' in answer.content
    bad = admin_api.post(url, {"statement": "<Document"}, format="json")
    assert bad.status_code == 400 and "not well-formed" in bad.json()["detail"]
    xxe = admin_api.post(url, {"statement": '<!DOCTYPE a [<!ENTITY x SYSTEM "http://example.com/">]><a>&x;</a>'}, format="json")  # fmt: skip  # noqa: E501
    assert xxe.status_code == 400 and "DOCTYPE" in xxe.json()["detail"]


def _row(page: str, number: str) -> str:
    return page.split(f">{number}<", 1)[1].split("</tr>", 1)[0]


def test_the_portal_shows_paid_after_an_import(customer, admin_api, client):
    """End to end: an invoice the portal lists as payable reads paid after the bank
    statement naming it is imported through the API."""
    inv = invoice(customer, "119.00", tax="19.00")
    client.force_login(account_for(customer, "ap@customer.example.com").user)
    before = _row(client.get(reverse("portal-invoices")).content.decode(), inv.number)
    assert "open" in before and "119.00" in before
    admin_api.post("/v1/admin/payments/camt053",
                   {"statement": v08("119.00", inv.number).decode()}, format="json")  # fmt: skip
    after = _row(client.get(reverse("portal-invoices")).content.decode(), inv.number)
    assert "paid" in after and "0.00" in after and "open" not in after
    page = client.get(reverse("portal-document", args=[inv.number])).content.decode()
    assert 'id="standing"' in page and "paid" in page.split('id="standing"', 1)[1][:400]


def test_svcctl_free_parser_reads_both_versions():
    assert camt053.NAMESPACES >= {
        "urn:iso:std:iso:20022:tech:xsd:camt.053.001.02",
        "urn:iso:std:iso:20022:tech:xsd:camt.053.001.08",
    }
    statements = camt053.parse(v08("1.00", "x"))
    assert statements[0].account == "NL91ABNA0417164300"
    assert statements[0].entries[0].booked_on.isoformat() == "2026-11-27"


def test_management_command_imports_with_a_dry_run(customer, tmp_path):
    a = invoice(customer, "10.00")
    path = tmp_path / "statement.xml"
    path.write_bytes(v08("10.00", a.number))
    out = io.StringIO()
    call_command("import_camt053", str(path), "--dry-run", stdout=out)
    assert "matched" in out.getvalue() and "dry run" in out.getvalue()
    assert not Payment.objects.exists()
    call_command("import_camt053", str(path), stdout=io.StringIO())
    assert Payment.objects.count() == 1
