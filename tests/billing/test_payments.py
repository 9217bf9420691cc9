"""Payments (issue 43): an invoice's state (open, partly paid, paid, overdue, void) and
balance, read in bulk; payments recorded through the API, exact to the currency's minor
unit, immutable, corrected by a negative entry; ``invoice.paid`` when the balance is
settled."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEntry
from billing import balances
from billing.models import ImmutableError, Invoice
from billing.payment_models import Payment
from billing.payments import payment_record
from config import clock
from config.errors import Conflict, InvalidInput, NotFound
from events.models import Event
from tests.billing.payment_support import credit_note, invoice, several_credit_notes

pytestmark = pytest.mark.django_db

D = Decimal


def standing(number: str, now=None):
    return balances.standing_of(Invoice.objects.get(number=number), now)


def test_a_new_invoice_is_open_with_its_gross_total_to_pay(customer):
    inv = invoice(customer, "1190.00", tax="190.00")
    s = standing(inv.number)
    assert (s.state, s.balance, s.paid, s.credited) == ("open", D("1190.00"), 0, 0)
    assert s.due == inv.issued_at + dt.timedelta(days=30)


def test_partial_then_full_payment_and_one_paid_event(customer):
    inv = invoice(customer, "1190.00", tax="190.00")
    payment_record(number=inv.number, amount="190.00", reference="part 1")
    assert (standing(inv.number).state, standing(inv.number).balance) == (
        "partly_paid",
        D("1000.00"),
    )
    assert not Event.objects.filter(type="invoice.paid").exists()
    payment_record(number=inv.number, amount="1000", reference="rest")
    s = standing(inv.number)
    assert (s.state, s.balance, s.paid) == ("paid", 0, D("1190.00"))
    event = Event.objects.get(type="invoice.paid")
    assert event.customer_id == customer.id
    assert event.data["invoice_number"] == inv.number
    assert (event.data["paid"], event.data["balance"], event.data["currency"]) == (
        "1190.00",
        "0.00",
        "EUR",
    )
    assert AuditEntry.objects.filter(action="payment.record", target=inv.number).count() == 2


def test_overpayment_is_recorded_as_a_credit_not_refused(customer):
    inv = invoice(customer, "100.00")
    payment_record(number=inv.number, amount="120.00")
    s = standing(inv.number)
    assert (s.state, s.balance) == ("paid", D("-20.00"))


def test_a_credited_invoice_is_void_and_no_longer_payable(customer):
    inv = invoice(customer, "119.00", tax="19.00")
    credit_note(inv)
    s = standing(inv.number)
    assert (s.state, s.balance, s.payable) == ("void", 0, False)
    # Past its due date it is still void, never overdue.
    later = clock.now() + dt.timedelta(days=90)
    assert standing(inv.number, later).state == "void"


def test_paid_then_credited_shows_the_refund_owed(customer):
    inv = invoice(customer, "50.00")
    payment_record(number=inv.number, amount="50.00")
    credit_note(inv)
    s = standing(inv.number)
    assert (s.state, s.balance) == ("void", D("-50.00"))


def test_partly_credited_invoice_keeps_the_rest_to_pay(customer):
    inv = invoice(customer, "100.00")
    credit_note(inv, "40.00")
    s = standing(inv.number)
    assert (s.state, s.balance, s.credited) == ("open", D("60.00"), D("-40.00"))
    if not several_credit_notes():
        return
    credit_note(inv, "60.00")  # two partial credit notes: nothing left
    assert standing(inv.number).state == "void"


def test_past_due_with_a_balance_is_overdue_even_partly_paid(customer):
    inv = invoice(customer, "100.00", issued_at=clock.now() - dt.timedelta(days=45))
    assert standing(inv.number).state == "overdue"
    assert standing(inv.number).days_overdue == 15
    payment_record(number=inv.number, amount="30.00")
    assert (standing(inv.number).state, standing(inv.number).balance) == ("overdue", D("70.00"))


@pytest.mark.parametrize(
    ("currency", "amount", "ok"),
    [("EUR", "10.01", True), ("EUR", "10.001", False), ("JPY", "1000", True),
     ("JPY", "1000.5", False), ("KWD", "1.234", True), ("KWD", "1.2345", False)],
)  # fmt: skip
def test_amounts_are_exact_to_the_currency_minor_unit(customer, currency, amount, ok):
    inv = invoice(customer, "5000", currency=currency)
    if ok:
        assert payment_record(number=inv.number, amount=amount).amount == D(amount)
    else:
        with pytest.raises(InvalidInput, match="more decimals"):
            payment_record(number=inv.number, amount=amount)


def test_payments_are_immutable_and_corrected_by_a_negative_entry(customer):
    inv = invoice(customer, "100.00")
    payment = payment_record(number=inv.number, amount="100.00")
    with pytest.raises(ImmutableError):
        payment.save()
    with pytest.raises(ImmutableError):
        payment.delete()
    with pytest.raises(InvalidInput, match="needs a note"):
        payment_record(number=inv.number, amount="-100.00")
    with pytest.raises(Conflict):
        payment_record(number=inv.number, amount="-150.00", note="typo")
    payment_record(number=inv.number, amount="-100.00", note="booked to the wrong invoice")
    assert standing(inv.number).state == "open"
    assert Payment.objects.filter(invoice=inv).count() == 2


def test_refusals(customer):
    inv = invoice(customer, "100.00")
    note = credit_note(invoice(customer, "10.00"))
    with pytest.raises(NotFound):
        payment_record(number="INV-2026-999999", amount="1")
    with pytest.raises(InvalidInput, match="credit note"):
        payment_record(number=note.number, amount="1")
    with pytest.raises(InvalidInput, match="future"):
        payment_record(
            number=inv.number, amount="1", paid_on=clock.now().date() + dt.timedelta(days=2)
        )
    with pytest.raises(InvalidInput, match="not be 0"):
        payment_record(number=inv.number, amount="0.00")
    with pytest.raises(InvalidInput):
        payment_record(number=inv.number, amount=1.5)
    failed = AuditEntry.objects.filter(action="payment.record", result="failed")
    assert failed.count() == 5


def test_state_filter_agrees_with_the_rule(customer):
    now = clock.now()
    open_ = invoice(customer, "10.00")
    part = invoice(customer, "10.00")
    payment_record(number=part.number, amount="4.00")
    paid = invoice(customer, "10.00")
    payment_record(number=paid.number, amount="10.00")
    late = invoice(customer, "10.00", issued_at=now - dt.timedelta(days=40))
    void = invoice(customer, "10.00")
    credit_note(void)
    rows = balances.with_balances(Invoice.objects.filter(kind="invoice"))
    for state, expected in (("open", open_), ("partly_paid", part), ("paid", paid),
                            ("overdue", late), ("void", void)):  # fmt: skip
        found = list(rows.filter(balances.state_filter(state, now)))
        assert found == [expected], state
        assert balances.standing_of(found[0], now).state == state


def test_receivables_by_age_per_currency_in_one_query(customer):
    now = clock.now()
    invoice(customer, "100.00")
    invoice(customer, "200.00", issued_at=now - dt.timedelta(days=40))  # 10 days late
    invoice(customer, "300.00", issued_at=now - dt.timedelta(days=100))  # 70 days late
    invoice(customer, "400.00", issued_at=now - dt.timedelta(days=200))  # 170 days late
    paid = invoice(customer, "999.00", issued_at=now - dt.timedelta(days=200))
    payment_record(number=paid.number, amount="999.00")
    invoice(customer, "5000", currency="JPY", issued_at=now - dt.timedelta(days=75))
    with CaptureQueriesContext(connection) as queries:
        ages = balances.receivables_by_age(now)
    assert len(queries) == 1
    assert ages["EUR"] == {
        "not yet due": D("100.00"),
        "1-30": D("200.00"),
        "31-60": 0,
        "61-90": D("300.00"),
        "over 90": D("400.00"),
    }
    assert ages["JPY"]["31-60"] == D("5000")


# --- the API ------------------------------------------------------------------------


def test_api_records_and_lists_payments(customer, admin_api):
    inv = invoice(customer, "1190.00", tax="190.00")
    url = f"/v1/admin/invoices/{inv.number}/payments"
    answer = admin_api.post(
        url, {"amount": "500.00", "paid_on": "2026-01-05", "reference": "BANK-1"}, format="json"
    )
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["invoice_number"], body["amount"], body["source"]) == (inv.number, 500.0, "manual")
    assert b'"amount":500.00' in answer.content  # exact, the currency's decimals
    listed = admin_api.get(url).json()
    assert listed["invoice"]["state"] == "partly_paid"
    assert listed["invoice"]["balance"] == 690.0
    assert [p["reference"] for p in listed["payments"]] == ["BANK-1"]
    detail = admin_api.get(f"/v1/admin/invoices/{inv.number}").json()
    assert (detail["state"], detail["balance"]) == ("partly_paid", 690.0)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"amount": 10.5}, 400, "decimal number"),
        ({"amount": "10.005"}, 400, "more decimals"),
        ({"amount": "10", "paid_on": "yesterday"}, 400, "paid_on"),
        ({"amount": "10", "colour": "red"}, 400, "unknown field"),
        ({}, 400, "amount"),
    ],
)
def test_api_refuses_bad_payments_with_a_detail(customer, admin_api, body, status, words):
    inv = invoice(customer, "100.00")
    answer = admin_api.post(f"/v1/admin/invoices/{inv.number}/payments", body, format="json")
    assert answer.status_code == status
    assert words in answer.json()["detail"]


def test_api_a_credit_note_has_no_payments_400(customer, admin_api):
    note = credit_note(invoice(customer, "10.00"))
    answer = admin_api.get(f"/v1/admin/invoices/{note.number}/payments")
    assert answer.status_code == 400 and "credit note" in answer.json()["detail"]


def test_api_unknown_invoice_is_404(admin_api, db):
    answer = admin_api.post("/v1/admin/invoices/INV-2026-000404/payments", {"amount": "1"},
                            format="json")  # fmt: skip
    assert answer.status_code == 404
    assert admin_api.get("/v1/admin/invoices/INV-2026-000404/payments").status_code == 404


def test_invoice_list_shows_state_and_balance_without_a_query_per_row(customer, admin_api):
    for n in range(3):
        inv = invoice(customer, "100.00")
        payment_record(number=inv.number, amount=f"{n + 1}0.00")
    credit_note(invoice(customer, "10.00"))
    with CaptureQueriesContext(connection) as few:
        admin_api.get("/v1/admin/invoices?limit=2")
    for _ in range(6):
        invoice(customer, "100.00")
    with CaptureQueriesContext(connection) as many:
        page = admin_api.get("/v1/admin/invoices?limit=20").json()
    assert len(many) == len(few)
    states = {d["number"]: (d["state"], d["balance"]) for d in page["invoices"]}
    assert sorted(state for state, _ in states.values() if state).count("void") == 1
    notes = [d for d in page["invoices"] if d["kind"] == "credit_note"]
    assert notes and notes[0]["state"] is None and notes[0]["balance"] is None
