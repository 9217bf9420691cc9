"""Partial credit notes (issue 43 item 4): chosen lines and quantities of an invoice,
never more than was billed across several credit notes; amounts and VAT exact to the
minor unit when a line (or the invoice) ends up fully credited; a price credit by default,
the events of unit-activation and direct-licence lines back to waiting with rebill;
reconciliation clean with every kind; the API, its draft, the console and manage.py."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from billing import selectors
from billing.document_checks import document_problems
from billing.models import Invoice, LedgerEntry
from billing.periods import open_invoice
from billing.reconciliation import ledger_reconcile
from billing.services import (
    AlreadyCredited,
    CreditExceedsBilled,
    credit_note_draft,
    credit_note_issue,
)
from config.errors import InvalidInput
from tests.billing.conftest import hour, record
from tests.billing.test_ledger_audit import tamper

pytestmark = pytest.mark.django_db

D = Decimal
JAN, FEB, MAR = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2, 3))


def issue(end: str) -> None:
    call_command("issue_invoices", "--period-days", "31", "--end", end, stdout=io.StringIO())


def clean(customer_id: str) -> None:
    result = ledger_reconcile(customer_id=customer_id, deep=True)
    assert result.ok, result.problems
    assert document_problems(deep=True) == []


def activations_billed() -> int:
    return LedgerEntry.objects.filter(kind="activation").aggregate(n=Sum("quantity"))["n"] or 0


@pytest.fixture
def january(customer, make_batch, activate, direct, upload):
    """January: 5 VISION-PRO units at 240.00 (line 1), an API-METERED direct licence
    (line 2, 15.00) with 40 000 inferences (line 4, overage 35.60) and a DETECT-STD one
    (line 3, 90.00)."""
    batch = make_batch(units=10, sku="VISION-PRO")
    for n in range(5):
        activate(batch, f"cam-{n}", at=JAN + dt.timedelta(days=n + 1))
    direct("DETECT-STD", "d-1", at=JAN + dt.timedelta(days=3))
    metered = direct("API-METERED", "m-1", at=JAN + dt.timedelta(days=4))
    upload(metered, [record(hour(JAN) + 9 * 86400, inferences=40_000)])
    issue("2026-02-01")
    invoice = Invoice.objects.get()
    assert [(li.position, li.kind, li.quantity) for li in invoice.lines.order_by("position")] == [
        (1, "unit_activation", 5),
        (2, "direct_license", 1),
        (3, "direct_license", 1),
        (4, "metered_overage", D("29.667")),
    ]
    return invoice


def test_a_partial_credit_note_credits_chosen_quantities_at_the_invoice_rate(january):
    note = credit_note_issue(
        number=january.number, reason="two units never shipped", lines=[{"line": 1, "quantity": 2}]
    )
    assert (note.kind, note.credits, note.partial, note.price_only) == (
        "credit_note",
        january,
        True,
        True,
    )
    (line,) = note.lines.all()
    assert (line.credited_line, line.quantity, line.unit_price, line.amount) == (
        1,
        D(-2),
        D("240"),
        D("-480.00"),
    )
    assert line.description.startswith(f"Credit of {january.number} line 1: ")
    assert note.total == D("-480.00")
    (row,) = note.taxes.all()
    rate = january.taxes.get().rate
    assert (row.rate, row.taxable_amount) == (rate, D("-480.00"))
    assert row.tax_amount == -(D("480.00") * rate / 100).quantize(D("0.01"))
    assert note.tax_total == row.tax_amount
    # A price credit: every event stays billed, the invoice's period stands.
    assert not LedgerEntry.objects.filter(document_id=note.number).exists()
    assert not note.usage.exists()
    clean(january.customer_id)
    assert open_invoice(customer_id=january.customer_id) == january


def test_several_credit_notes_up_to_the_billed_quantity_then_refused(january):
    credit_note_issue(number=january.number, reason="a", lines=[{"line": 1, "quantity": 2}])
    credit_note_issue(number=january.number, reason="b", lines=[{"line": 1, "quantity": "3"}])
    with pytest.raises(CreditExceedsBilled) as refused:
        credit_note_issue(number=january.number, reason="c", lines=[{"line": 1, "quantity": 1}])
    assert refused.value.status_code == 409
    assert "line 1 (unit_activation VISION-PRO)" in refused.value.detail
    assert "billed 5, already credited 5, asked 1" in refused.value.detail
    with pytest.raises(CreditExceedsBilled, match="billed 29.667, already credited 0, asked 30"):
        credit_note_issue(number=january.number, reason="c", lines=[{"line": 4, "quantity": 30}])
    # The rest of the invoice, whole: lines 2 to 4, and then nothing remains.
    rest = credit_note_issue(number=january.number, reason="the rest")
    assert [li.credited_line for li in rest.lines.order_by("position")] == [2, 3, 4]
    assert (rest.partial, rest.price_only) == (True, True)
    with pytest.raises(AlreadyCredited, match="nothing of it remains"):
        credit_note_issue(number=january.number, reason="again")
    notes = Invoice.objects.filter(kind="credit_note", credits=january)
    assert sum(n.total for n in notes) == -january.total
    assert sum(n.tax_total for n in notes) == -january.tax_total
    credited = selectors.credited(january)
    assert credited.gross == -january.gross_total and credited.fully_credited
    clean(january.customer_id)


def test_bad_line_choices_are_refused_by_name(january):
    for lines, message in [
        ([{"line": 9, "quantity": 1}], "has no line 9"),
        ([{"line": 1, "quantity": 0}], "above 0"),
        ([{"line": 1, "quantity": "0.0001"}], "more than 3 decimals"),
        ([{"line": 1, "quantity": 1}, {"line": 1, "quantity": 1}], "named twice"),
        ([], "at least one"),
        ([{"line": "1", "quantity": 1}], "by its position"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            credit_note_issue(number=january.number, reason="x", lines=lines)
    assert not Invoice.objects.filter(kind="credit_note").exists()


def test_rebill_returns_exactly_the_credited_activations_to_the_next_invoice(january):
    assert activations_billed() == 5
    note = credit_note_issue(
        number=january.number, reason="re-bill at the right time",
        lines=[{"line": 1, "quantity": 2}, {"line": 2, "quantity": 1}], rebill=True,
    )  # fmt: skip
    assert (note.partial, note.price_only) == (True, False)
    assert activations_billed() == 3
    assert LedgerEntry.objects.filter(document_id=note.number).count() == 3
    clean(january.customer_id)
    # The period stands: February's invoice bills the two units and the licence again.
    issue("2026-03-01")
    february = Invoice.objects.get(kind="invoice", period_start=FEB)
    assert [(li.kind, li.sku, li.quantity) for li in february.lines.order_by("position")] == [
        ("unit_activation", "VISION-PRO", 2),
        ("direct_license", "API-METERED", 1),
    ]
    assert activations_billed() == 5
    clean(january.customer_id)
    # A second re-billing credit never takes an event already given back.
    credit_note_issue(
        number=january.number, reason="and the rest", lines=[{"line": 1, "quantity": 3}],
        rebill=True,
    )  # fmt: skip
    assert activations_billed() == 2
    clean(january.customer_id)


def test_rebill_is_refused_where_the_ledger_cannot_split_exactly(january):
    with pytest.raises(InvalidInput, match="line 4 .metered_overage API-METERED. cannot be"):
        credit_note_issue(
            number=january.number, reason="x", lines=[{"line": 4, "quantity": 10}], rebill=True
        )
    with pytest.raises(InvalidInput, match="whole units: 1.5"):
        credit_note_issue(
            number=january.number, reason="x", lines=[{"line": 1, "quantity": "1.5"}], rebill=True
        )
    # As a price credit, a partial unit is fine.
    note = credit_note_issue(
        number=january.number, reason="x", lines=[{"line": 1, "quantity": "1.5"}]
    )
    assert note.total == D("-360.00")
    clean(january.customer_id)


def test_the_whole_invoice_stays_a_reissue_and_a_price_credit_when_asked(january):
    note = credit_note_issue(number=january.number, reason="price only", rebill=False)
    assert (note.partial, note.price_only, note.total) == (False, True, -january.total)
    assert activations_billed() == 5 and not note.usage.exists()
    clean(january.customer_id)
    # The period stands: the next invoice starts on February 1st, nothing waits.
    assert open_invoice(customer_id=january.customer_id) == january
    assert ledger_reconcile(customer_id=january.customer_id).totals().waiting == 0


def test_a_partly_credited_invoice_cannot_be_reversed_whole_with_all_its_events(january):
    credit_note_issue(number=january.number, reason="a", lines=[{"line": 4, "quantity": 1}])
    with pytest.raises(InvalidInput, match="line 4 .metered_overage"):
        credit_note_issue(number=january.number, reason="rest", rebill=True)
    rest = credit_note_issue(number=january.number, reason="rest")
    assert rest.price_only and rest.partial
    clean(january.customer_id)


def test_the_draft_shows_what_would_be_issued_and_stores_nothing(january):
    draft = credit_note_draft(
        number=january.number, lines=[{"line": 4, "quantity": "10.5"}], rebill=False
    )
    assert (draft["credits"], draft["partial"], draft["rebill"]) == (january.number, True, False)
    assert [(li["quantity"], li["amount"]) for li in draft["lines"]] == [(D("-10.5"), D("-12.60"))]
    assert draft["gross_total"] == draft["total"] + draft["tax_total"]
    assert not Invoice.objects.filter(kind="credit_note").exists()
    note = credit_note_issue(
        number=january.number, reason="x", lines=[{"line": 4, "quantity": "10.5"}]
    )
    assert [li.as_dict() for li in note.lines.all()] == draft["lines"]


@pytest.mark.parametrize(
    ("prices", "splits"),
    [
        ("EUR", ["0.001", "33.333", "0.5"]),
        ("JPY", ["1", "0.001", "2.5"]),
        ("KWD", ["0.001", "7.777", "0.003"]),
    ],
)
def test_partial_credits_sum_exactly_to_the_invoice_in_each_minor_unit(
    vat_documents, prices, splits
):
    invoice = vat_documents("S", prices)
    overage = invoice.lines.get(kind="metered_overage")
    for quantity in splits:
        credit_note_issue(
            number=invoice.number, reason="split",
            lines=[{"line": overage.position, "quantity": quantity}],
        )  # fmt: skip
        assert document_problems() == []
    credit_note_issue(number=invoice.number, reason="the rest")
    notes = Invoice.objects.filter(credits=invoice)
    credited_overage = sum(
        li.amount for n in notes for li in n.lines.filter(credited_line=overage.position)
    )
    assert credited_overage == -overage.amount
    assert sum(n.total for n in notes) == -invoice.total
    assert sum(n.tax_total for n in notes) == -invoice.tax_total
    assert selectors.credited(invoice).fully_credited
    assert document_problems(deep=True) == []


def test_reconcile_catches_a_credit_beyond_the_billed_quantity(january):
    note = credit_note_issue(number=january.number, reason="x", lines=[{"line": 1, "quantity": 2}])
    tamper(
        "UPDATE billing_invoiceline SET quantity = -6, amount = -1440 WHERE invoice_id = %s",
        [note.pk],
    )
    problems = document_problems()
    assert any("credits 6 of" in p and "billed 5," in p for p in problems), problems


def test_credit_notes_through_the_admin_api(admin_api, january):
    url = f"/v1/admin/invoices/{january.number}/credit-note"
    body = {"reason": "two units", "lines": [{"line": 1, "quantity": 2}], "rebill": True}
    draft = admin_api.post(f"{url}/draft", body, format="json")
    assert draft.status_code == 200, draft.content
    assert (draft.json()["total"], draft.json()["rebill"]) == (-480.0, True)
    assert not Invoice.objects.filter(kind="credit_note").exists()
    issued = admin_api.post(url, body, format="json")
    assert issued.status_code == 201, issued.content
    shown = issued.json()
    assert (shown["partial"], shown["rebill"], shown["credits"]) == (True, True, january.number)
    assert shown["lines"][0]["credited_line"] == 1
    over = admin_api.post(
        url, {"reason": "x", "lines": [{"line": 1, "quantity": 4}]}, format="json"
    )
    assert over.status_code == 409
    assert "billed 5, already credited 2, asked 4" in over.json()["detail"]
    bad = admin_api.post(url, {"reason": "x", "lines": [{"line": 0, "quantity": 1}]}, format="json")
    assert bad.status_code == 400 and "detail" in bad.json()
    nothing = admin_api.post(url, {"reason": "x", "lines": [{"line": 9, "quantity": 1}]},
                             format="json")  # fmt: skip
    assert nothing.status_code == 400 and "has no line 9" in nothing.json()["detail"]
    invoice = admin_api.get(f"/v1/admin/invoices/{january.number}").json()
    assert invoice["credit_notes"] == [shown["number"]] == [invoice["credited_by"]]


def test_manage_py_credit_note_lines_rebill_and_dry_run(january):
    out = io.StringIO()
    call_command(
        "credit_note", january.number, "--reason", "x", "--line", "1=2", "--line", "4=1",
        "--dry-run", stdout=out,
    )  # fmt: skip
    assert "would credit -481.20 EUR net" in out.getvalue() and "nothing issued" in out.getvalue()
    assert not Invoice.objects.filter(kind="credit_note").exists()
    out = io.StringIO()
    call_command(
        "credit_note", january.number, "--reason", "x", "--line", "1=2", "--rebill", stdout=out
    )
    assert "crediting part of" in out.getvalue()
    assert activations_billed() == 3
    with pytest.raises(CommandError, match="expected POSITION=QUANTITY"):
        call_command("credit_note", january.number, "--reason", "x", "--line", "1")
    with pytest.raises(CommandError, match="already credited 2, asked 4"):
        call_command("credit_note", january.number, "--reason", "x", "--line", "1=4")


def test_the_console_form_credits_chosen_quantities_after_showing_them(admin_client, january):
    url = f"/admin/documents/{january.number}/credit-note/"
    page = admin_client.get(url).content.decode()
    assert 'name="line_1"' in page and 'name="line_4"' in page and 'name="rebill"' in page
    form = {
        "reason": "two units", "line_1": "2", "line_2": "0", "line_3": "0", "line_4": "0",
        "rebill": "", "preview": "1",
    }  # fmt: skip
    preview = admin_client.post(url, form)
    assert preview.status_code == 200
    shown = preview.content.decode()
    assert "Yes, issue the credit note for -480.00 EUR" in shown and "in part" in shown
    assert not Invoice.objects.filter(kind="credit_note").exists()
    previewed = preview.context["form"]["previewed"].value()
    # Changing the quantities after the preview shows the new draft instead of issuing.
    del form["preview"]
    changed = admin_client.post(url, {**form, "line_1": "3", "previewed": previewed})
    assert "The quantities changed" in changed.content.decode()
    done = admin_client.post(url, {**form, "previewed": previewed}, follow=True)
    note = Invoice.objects.get(kind="credit_note")
    assert note.total == D("-480.00") and note.price_only
    assert f"crediting part of {january.number}" in done.content.decode()
    original = admin_client.get(f"/admin/documents/{january.number}/").content.decode()
    assert note.number in original and "Issue credit note" in original  # more remains
    again = admin_client.get(url)
    assert again.context["form"].fields["line_1"].initial == 3  # what remains
