"""The late-usage allowance rule as docs/finance.md states it, with its worked example
(issue 38): the period's own usage takes the allowance first, late usage is stacked on
top; late lines read their records as units ("1 record")."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.line_builders import Meter, meter_lines
from svccore import catalogue

ENTRIES = {entry["sku"]: entry for entry in catalogue.load_entries()}


def lines(own: int, late: int, late_records: int = 1) -> list[tuple[str, Decimal, Decimal]]:
    meter = Meter(sku="DETECT-STD", inferences=own, late_inferences=late, late_records=late_records)
    rated = meter_lines(
        {"DETECT-STD": meter}, customer_id="CUST-X", period_days=30,
        units={"DETECT-STD": 1}, entries=ENTRIES,
    )  # fmt: skip
    return [(line["kind"], line["quantity"], line["amount"]) for line in rated if line["quantity"]]


@pytest.mark.parametrize(
    ("own", "late", "expected"),
    [
        (60_000, 30_000, [("metered_overage", Decimal("10.000"), Decimal("5.00")),
                          ("metered_overage_late", Decimal("30.000"), Decimal("15.00"))]),
        (20_000, 40_000, [("metered_overage_late", Decimal("10.000"), Decimal("5.00"))]),
    ],
)  # fmt: skip
def test_the_worked_example_of_the_finance_guide(own, late, expected):
    assert lines(own, late) == expected


def test_a_late_line_reads_its_records_as_units():
    meter = Meter(sku="DETECT-STD", inferences=60_000, late_inferences=30_000, late_records=1)
    rated = meter_lines(
        {"DETECT-STD": meter}, customer_id="CUST-X", period_days=30,
        units={"DETECT-STD": 1}, entries=ENTRIES,
    )  # fmt: skip
    late = [line for line in rated if line["kind"] == "metered_overage_late"][0]
    assert "(30,000 in 1 record)" in late["description"]
    meter.late_records = 2
    rated = meter_lines(
        {"DETECT-STD": meter}, customer_id="CUST-X", period_days=30,
        units={"DETECT-STD": 1}, entries=ENTRIES,
    )  # fmt: skip
    late = [line for line in rated if line["kind"] == "metered_overage_late"][0]
    assert "(30,000 in 2 records)" in late["description"]
