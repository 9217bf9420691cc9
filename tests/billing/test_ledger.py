"""Issued invoices as a ledger (issue 10): contiguous periods per customer, ends at 00:00
UTC no later than today, every usage record, activation and direct licence billed on
exactly one issued invoice, late usage on the next invoice in lines of its own."""

from __future__ import annotations

import datetime as dt
import io
import re
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F, Sum

from billing.issuing import invoice_issue
from billing.limits import start_of_day
from billing.models import Invoice, InvoiceUsage, LedgerEntry, UsageDaily
from billing.periods import InvoiceAlreadyIssued, InvoiceNotDue, PeriodNotOver
from config.errors import InvalidInput
from svccore import dates
from tests.billing.conftest import hour, record

pytestmark = pytest.mark.django_db

D = Decimal
UTC = dt.UTC
JAN, FEB, MAR, APR = (dt.datetime(2026, m, 1, tzinfo=UTC) for m in (1, 2, 3, 4))


def issue(*args: str) -> str:
    out = io.StringIO()
    call_command("issue_invoices", *args, stdout=out)
    return out.getvalue()


def lines(invoice: Invoice) -> list[tuple]:
    return [(li.kind, li.sku, li.quantity, li.unit_price, li.amount)
            for li in invoice.lines.order_by("position")]  # fmt: skip


@pytest.fixture
def metered(customer, direct):
    """API-METERED direct licence (15.00) issued on January 5th: allowance 10 000 per
    30 days, overage 1.20 per 1000 up to 1 000 000, then 0.80."""
    return direct("API-METERED", "m-1", at=JAN + dt.timedelta(days=4))


def test_periods_are_contiguous_across_months(customer, metered, upload):
    upload(metered, [record(hour(JAN) + 9 * 86400, inferences=40_000)])
    issue("--period-days", "31", "--end", "2026-02-01")
    upload(metered, [record(hour(FEB) + 9 * 86400, inferences=20_000)])
    issue("--period-days", "31", "--end", "2026-03-01")
    upload(metered, [record(hour(MAR) + 9 * 86400, inferences=15_000)])
    issue("--period-days", "31", "--end", "2026-04-01")
    invoices = list(Invoice.objects.order_by("period_start"))
    assert [(i.period_start, i.period_end, i.period_days) for i in invoices] == [
        (JAN, FEB, 31),
        (FEB, MAR, 28),
        (MAR, APR, 31),
    ]
    # January: 15.00 + (40 000 - 10 333.33) = 29.667 thousand x 1.20 = 35.60
    assert lines(invoices[0]) == [
        ("direct_license", "API-METERED", 1, D("15.00"), D("15.00")),
        ("metered_overage", "API-METERED", D("29.667"), D("1.20"), D("35.60")),
    ]
    # February has 28 days: A = 10 000 x 28 / 30 = 9333.33; 10.667 x 1.20 = 12.80
    assert lines(invoices[1]) == [
        ("metered_overage", "API-METERED", D("10.667"), D("1.20"), D("12.80")),
    ]
    assert InvoiceUsage.objects.get(invoice=invoices[1]).allowance.quantize(D("0.01")) == D(
        "9333.33"
    )
    # March has 31 days: 15 000 - 10 333.33 = 4.667 x 1.20 = 5.60
    assert invoices[2].total == D("5.60")


def test_an_end_inside_an_issued_period_is_refused_naming_the_invoice(customer, metered):
    issue("--period-days", "31", "--end", "2026-02-01")
    number = Invoice.objects.get().number
    message = f"already invoiced through 31 January 2026 ({number} covers 1–31 January 2026)"
    # The end already invoiced to: a re-run, skipped with the reason, exit 0.
    output = issue("--period-days", "30", "--end", "2026-02-01", "--customer", customer.id)
    assert "0 invoices issued" in output and message in output
    # An end inside the issued period overlaps it: exit 1 with the API's message, for one
    # customer and for every customer (the others are still invoiced).
    for end in ("2026-01-25", "2025-12-01"):
        with pytest.raises(CommandError, match=re.escape(message)):
            issue("--period-days", "30", "--end", end, "--customer", customer.id)
        with pytest.raises(CommandError, match=f"--end {end} is inside an issued period of 1"):
            issue("--period-days", "30", "--end", end)
    with pytest.raises(InvoiceAlreadyIssued, match=number):
        invoice_issue(customer_id=customer.id, period_days=10, end=JAN + dt.timedelta(days=20))
    assert Invoice.objects.count() == 1


def test_an_end_after_today_or_not_at_midnight_is_refused(customer, metered):
    tomorrow = (start_of_day() + dt.timedelta(days=1)).date().isoformat()
    today = dates.day(start_of_day())
    with pytest.raises(CommandError, match=f"a period whose last day is {today} is not over"):
        issue("--period-days", "30", "--end", tomorrow)
    with pytest.raises(PeriodNotOver):
        invoice_issue(customer_id=customer.id, end=start_of_day() + dt.timedelta(days=1))
    with pytest.raises(InvalidInput, match="00:00 UTC"):
        invoice_issue(customer_id=customer.id, end=FEB + dt.timedelta(hours=5))
    assert not Invoice.objects.exists()


def test_a_daily_schedule_issues_once_every_period_days(customer, metered, direct, monkeypatch):
    clock = [FEB + dt.timedelta(hours=1)]
    monkeypatch.setattr("billing.limits.now", lambda: clock[0])
    assert "1 invoice issued" in issue("--period-days", "30")  # Jan 2 - Feb 1
    direct("DETECT-STD", "d-2", at=FEB + dt.timedelta(days=9))
    for day in range(1, 31):
        clock[0] = FEB + dt.timedelta(days=day, hours=1)
        output = issue("--period-days", "30", "--customer", customer.id)
        if day < 30:
            assert "0 invoices issued" in output and "is due on 3 March 2026" in output, day
        else:
            assert "1 invoice issued" in output
    invoices = Invoice.objects.order_by("period_start")
    assert [(i.period_start, i.period_end) for i in invoices] == [
        (JAN + dt.timedelta(days=1), FEB),
        (FEB, FEB + dt.timedelta(days=30)),
    ]
    clock[0] = FEB + dt.timedelta(days=45)
    with pytest.raises(InvoiceNotDue, match="due on 2 April 2026"):
        invoice_issue(customer_id=customer.id, period_days=30)


def test_late_usage_lands_once_on_the_next_invoice_in_its_own_lines(customer, metered, upload):
    upload(metered, [record(hour(JAN) + 9 * 86400, inferences=40_000)])
    issue("--period-days", "31", "--end", "2026-02-01")
    # A camera offline for weeks uploads January after January was invoiced.
    late = upload(metered, [record(hour(JAN) + 19 * 86400, inferences=5_000)]).json()
    assert late["accepted"] == 1
    upload(metered, [record(hour(FEB) + 9 * 86400, inferences=20_000)])
    issue("--period-days", "31", "--end", "2026-03-01")
    february = Invoice.objects.get(period_start=FEB)
    # On time: 20 000 - 9333.33 = 10.667 x 1.20 = 12.80; late 5000 priced from there on.
    assert lines(february) == [
        ("metered_overage", "API-METERED", D("10.667"), D("1.20"), D("12.80")),
        ("metered_overage_late", "API-METERED", D("5.000"), D("1.20"), D("6.00")),
    ]
    meter = InvoiceUsage.objects.get(invoice=february)
    assert (meter.inferences, meter.late_inferences, meter.late_records) == (20_000, 5_000, 1)
    output = issue("--period-days", "31", "--end", "2026-04-01", "--customer", customer.id)
    assert "owes nothing" in output  # nothing is billed twice
    billed = LedgerEntry.objects.filter(kind="usage").aggregate(n=Sum("quantity"))["n"]
    assert billed == 65_000
    assert not UsageDaily.objects.exclude(billed_inferences=F("inferences")).exists()


def test_late_usage_is_priced_in_the_tiers_where_the_period_left_off(customer, metered, upload):
    """February: A = 9333.33; on time 1 008 333 -> overage 998 999.67 in the first tier;
    the late 2000 take it from there: 1000.33 at 1.20 to reach 1 000 000, then 999.67 in
    the tier from 1 000 000 at 0.80 (quantities in thousands, three decimals)."""
    # January usage after the licence's issue on the 5th (its life starts there).
    assert upload(metered, [record(hour(JAN) + 5 * 86400, inferences=1)]).json()["accepted"] == 1
    issue("--period-days", "31", "--end", "2026-02-01")
    late = upload(metered, [record(hour(JAN) + 6 * 86400, inferences=2_000)]).json()
    assert late["accepted"] == 1
    upload(metered, [record(hour(FEB) + 86400, inferences=1_008_333)])
    issue("--period-days", "31", "--end", "2026-03-01")
    february = Invoice.objects.get(period_start=FEB)
    assert lines(february)[-2:] == [
        ("metered_overage_late", "API-METERED", D("1.000"), D("1.20"), D("1.20")),
        ("metered_overage_late", "API-METERED", D("1.000"), D("0.80"), D("0.80")),
    ]


def test_first_invoice_bills_earlier_usage_and_a_record_before_the_license_is_refused(
    customer, make_batch, activate, upload
):
    """Usage dated before the first period (the months before invoicing began) is late
    usage of the first invoice, not lost; so are earlier activations. A record dated
    before its licence's life (a camera whose clock read 1970) is refused and listed,
    never billed, and the rest of the call is stored."""
    batch = make_batch(units=5, sku="DETECT-STD")
    old = activate(batch, "cam-old", at=JAN - dt.timedelta(days=100))
    activate(batch, "cam-new", at=JAN + dt.timedelta(days=3))
    before_jan = hour(JAN - dt.timedelta(days=50))
    answer = upload(
        old,
        [
            record(0, inferences=999_999),
            record(before_jan, inferences=70_000),
            record(hour(JAN) + 86400, inferences=100),
        ],
    ).json()
    assert (answer["accepted"], answer["duplicates"], answer["conflicts"]) == (2, 0, [])
    [refused] = answer["refused"]
    assert refused.pop("detail").startswith("starts before the licence's life")
    assert refused == {"index": 0, "period_start": 0, "period_end": 3600}
    issue("--period-days", "31", "--end", "2026-02-01")
    invoice = Invoice.objects.get()
    assert lines(invoice) == [
        ("unit_activation", "DETECT-STD", 2, D("90.00"), D("180.00")),
        # A = 2 units x 50 000 x 31 / 30 = 103 333.33 > 100: no overage on time, and
        # the late 70 000 fit in what is left of it; the refused 999 999 is not billed.
    ]
    assert "1 activated before this period" in invoice.lines.get().description
    meter = InvoiceUsage.objects.get(invoice=invoice)
    assert (meter.inferences, meter.late_inferences) == (100, 70_000)
    assert UsageDaily.objects.aggregate(n=Sum("inferences"))["n"] == 70_100


def test_activations_and_direct_licenses_are_billed_in_their_period_once(
    customer, make_batch, activate, direct
):
    batch = make_batch(units=5, sku="VISION-PRO")
    activate(batch, "jan-1", at=JAN + dt.timedelta(days=2))
    issue("--period-days", "31", "--end", "2026-02-01")
    activate(batch, "feb-1", at=FEB + dt.timedelta(days=2))
    direct("DETECT-STD", "feb-d", at=FEB + dt.timedelta(days=3))
    issue("--period-days", "31", "--end", "2026-03-01")
    january, february = Invoice.objects.order_by("period_start")
    assert [li[:3] for li in lines(january)] == [("unit_activation", "VISION-PRO", 1)]
    assert [li[:3] for li in lines(february)] == [
        ("unit_activation", "VISION-PRO", 1),
        ("direct_license", "DETECT-STD", 1),
    ]
    net = LedgerEntry.objects.exclude(kind="usage").values("license_id").annotate(n=Sum("quantity"))
    assert sorted(row["n"] for row in net) == [1, 1, 1]


def test_maintenance_when_the_actual_period_is_a_year(customer, make_batch, activate):
    batch = make_batch(units=3, sku="ANPR-PERPETUAL")
    activate(batch, "p-1", at=JAN - dt.timedelta(days=200))
    issue("--period-days", "365", "--end", "2026-01-01")
    activate(batch, "p-2", at=JAN + dt.timedelta(days=5))
    issue("--period-days", "365", "--end", "2026-02-01")
    year, month = Invoice.objects.order_by("period_start")
    assert (year.period_days, month.period_days) == (365, 31)
    assert [li[0] for li in lines(year)] == ["unit_activation", "maintenance"]
    assert [li[0] for li in lines(month)] == ["unit_activation"]


def test_issue_through_the_admin_api(admin_api, customer, metered):
    response = admin_api.post(
        "/v1/admin/invoices",
        {"customer_id": customer.id, "period_days": 31, "period_end": hour(FEB)},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["kind"], body["period_start"], body["period_end"]) == (
        "invoice",
        hour(JAN),
        hour(FEB),
    )
    assert body["total"] == 15.0 and body["lines"][0]["kind"] == "direct_license"
    again = admin_api.post(
        "/v1/admin/invoices",
        {"customer_id": customer.id, "period_end": hour(FEB)},
        format="json",
    )
    assert again.status_code == 409
    assert body["number"] in again.json()["detail"]
    future = int((start_of_day() + dt.timedelta(days=1)).timestamp())
    response = admin_api.post(
        "/v1/admin/invoices", {"customer_id": customer.id, "period_end": future}, format="json"
    )
    assert response.status_code == 409 and "not over" in response.json()["detail"]
    response = admin_api.post(
        "/v1/admin/invoices",
        {"customer_id": customer.id, "period_end": hour(FEB) + 3600},
        format="json",
    )
    assert response.status_code == 400 and "00:00 UTC" in response.json()["detail"]
    response = admin_api.post("/v1/admin/invoices", {"customer_id": "CUST-NOPE"}, format="json")
    assert response.status_code == 404
