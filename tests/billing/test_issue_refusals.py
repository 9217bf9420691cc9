"""Issuing never stops on one customer's broken ledger (issue 38): the customer is named
with the reason, every other customer is invoiced, the run lists what it issued and
exits 1 at the end. The broken ledger is the issue's counter reset: billed counters set
back to 0 in a declared repair (``tests.history.rewritten``), so on PostgreSQL the
rollup guard of billing migration 0009 stays armed for the run, as in production."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import CommandError, call_command

from billing.models import Invoice, UsageDaily
from billing.services import invoice_issue_all
from tests.billing.conftest import hour, record
from tests.factories import CustomerFactory
from tests.history import rewritten

pytestmark = pytest.mark.django_db

JAN, FEB, MAR = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2, 3))


@pytest.fixture
def three_customers(direct, upload):
    """Three customers (beside the ``customer`` fixture's, who owes nothing), each with a
    DETECT-STD direct licence and usage in January and in February, invoiced for
    January; the second one's billed counters then reset."""
    customers = [CustomerFactory(id=f"CUST-REFUSAL{n}") for n in range(3)]
    for n, owner in enumerate(customers):
        lic = direct("DETECT-STD", f"cam-{n}", at=JAN + dt.timedelta(days=1), owner=owner)
        records = [
            record(hour(JAN) + 5 * 86400, inferences=70_000),
            record(hour(FEB) + 5 * 86400, inferences=90_000),
        ]
        assert upload(lic, records).status_code == 200
    ids = [owner.id for owner in customers]
    results = [r for r in invoice_issue_all(period_days=31, end=FEB) if r.customer_id in ids]
    assert [result.invoice is not None for result in results] == [True, True, True]
    with rewritten():
        UsageDaily.objects.filter(customer=customers[1]).update(
            billed_records=0, billed_inferences=0
        )
    return customers


def test_issue_invoices_with_one_broken_customer_issues_the_others_and_exits_1(
    three_customers,
):
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as failed:
        call_command(
            "issue_invoices", "--period-days", "28", "--end", "2026-03-01",
            stdout=out, stderr=err,
        )  # fmt: skip
    broken = three_customers[1].id
    assert f"1 customer refused ({broken})" in str(failed.value)
    # The refused customer is named with the reason, on stderr.
    assert f"refused {broken}: " in err.getvalue()
    assert "billed counters disagree with the ledger" in err.getvalue()
    assert "would bill 2 / 140000 over 2 documents" in err.getvalue()
    # The others are invoiced and listed, the one after the broken one too.
    issued = Invoice.objects.filter(period_start=FEB)
    assert sorted(issued.values_list("customer_id", flat=True)) == [
        three_customers[0].id,
        three_customers[2].id,
    ]
    for invoice in issued:
        assert f"issued {invoice.number}: " in out.getvalue()
        assert f"({invoice.customer_id}, " in out.getvalue()
    assert "2 invoices issued, 1 customer skipped, 1 customer refused" in out.getvalue()
    # Numbers stay gapless: the refused customer's rolled-back number is reused.
    numbers = sorted(Invoice.objects.values_list("seq", flat=True))
    assert numbers == list(range(numbers[0], numbers[0] + 5))


def test_a_refused_customer_is_refused_again_until_repaired(three_customers):
    ids = [owner.id for owner in three_customers]
    first = [r for r in invoice_issue_all(period_days=28, end=MAR) if r.customer_id in ids]
    assert [(r.customer_id, r.refused) for r in first] == [
        (three_customers[0].id, False),
        (three_customers[1].id, True),
        (three_customers[2].id, False),
    ]
    again = [r for r in invoice_issue_all(period_days=28, end=MAR) if r.customer_id in ids]
    assert [r.refused for r in again] == [False, True, False]
    assert "already invoiced through 28 February 2026" in again[0].note
    assert Invoice.objects.filter(customer=three_customers[1]).count() == 1
