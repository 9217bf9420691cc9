"""Invoice rating, contract §6, against hand-computed invoices.

Scenario (P = 30, now = 2026-04-30 12:00 UTC, window from 2026-03-31 12:00):

unit_activation  VISION-PRO batch B1 (10 units, 240.00): d1 d2 d3 d5 activated in the
                 window (d1 re-activated: free; d5 revoked inside the window: still
                 counts); d4 and d6 before it, d7 after it           4 x 240.00 =   960.00
                 VISION-PRO batch B2 (150 units, 210.00): d8 d9     2 x 210.00 =   420.00
direct_license   DETECT-STD, 1 at 90.00 in the window              1 x  90.00 =    90.00
                 VISION-PRO, 2 at 240.00 in the window (one more before it, one
                 unbound '*' key in it: neither billed here)        2 x 240.00 =   480.00
metered_overage  DETECT-STD: N = 1, A = 50 000, U = 51 500, O = 1 500
                 tier 0: 1.500 x 0.50                                           =     0.75
                 VISION-PRO: N = 7 units (d1-d5, d8, d9; d6 revoked before the window,
                 d7 after it) + 3 direct = 10, A = 2 000 000, U = 8 234 567, O = 6 234 567
                 tier 0: 5000.000 x 0.40                                        =  2000.00
                 tier 5 000 000: 1234.567 x 0.25 = 308.64175                    =   308.64
total                                                                             4259.39
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from billing.services import invoice_rate
from licensing.services.activation import unit_activate
from tests.billing.conftest import hour, record

pytestmark = pytest.mark.django_db

UTC = dt.UTC
NOW = dt.datetime(2026, 4, 30, 12, 0, tzinfo=UTC)
START = NOW - dt.timedelta(days=30)
IN = START + dt.timedelta(days=1)
BEFORE = START - dt.timedelta(days=10)
D = Decimal


def amounts(rated):
    return [(line["kind"], line["sku"], line["quantity"], line["unit_price"], line["amount"])
            for line in rated["lines"]]  # fmt: skip


@pytest.fixture
def scenario(customer, make_batch, activate, direct, upload, revoke_at):
    b1 = make_batch(units=10, sku="VISION-PRO")
    b2 = make_batch(units=150, sku="VISION-PRO")
    assert (b1.unit_price, b2.unit_price) == (D("240.00"), D("210.00"))
    d1 = activate(b1, "d1", at=START)  # exactly at period_start: inside
    activate(b1, "d2", at=IN)
    activate(b1, "d3", at=NOW - dt.timedelta(seconds=1))
    activate(b1, "d4", at=BEFORE)
    d5 = activate(b1, "d5", at=IN)
    d6 = activate(b1, "d6", at=BEFORE)
    d7 = activate(b1, "d7", at=NOW)  # exactly at period_end: outside
    assert unit_activate(batch_token=b1.license.token, device_id="d1").reactivated
    d8 = activate(b2, "d8", at=IN)
    d9 = activate(b2, "d9", at=IN)
    det = direct("DETECT-STD", "x1", at=IN)
    direct("VISION-PRO", "v1", at=IN)
    direct("VISION-PRO", "v2", at=NOW - dt.timedelta(days=29))
    direct("VISION-PRO", "v0", at=BEFORE)
    direct("VISION-PRO", "*", at=IN, activation="required")
    # Usage first (a revoked licence cannot upload), revocations after.
    d2 = d1.__class__.objects.get(device_id="d2")
    day = hour(dt.datetime(2026, 4, 10, tzinfo=UTC))
    assert (
        upload(
            d1,
            [
                record(hour(START), inferences=1_000_000),
                record(hour(START) - 3600, inferences=999_999),
            ],
        ).json()["accepted"]
        == 2
    )
    full_day = [record(day + i * 3600, inferences=500_000) for i in range(10)]
    assert upload(d2, full_day).json()["accepted"] == 10
    again = upload(d2, full_day).json()
    assert again.pop("receipt").startswith("SVCU1.")
    again.pop("certificates", None)  # of the receipt's key (key rotation)
    assert again == {"accepted": 0, "duplicates": 10, "conflicts": [], "refused": []}
    stored = [
        upload(
            d8,
            [record(hour(NOW) - 3600, inferences=2_000_000), record(hour(NOW), inferences=777_777)],
        ),
        upload(d9, [record(hour(dt.datetime(2026, 4, 20, 5, tzinfo=UTC)), inferences=234_567)]),
        upload(d6, [record(hour(BEFORE), inferences=5_000_000)]),  # before the window
        upload(det, [record(day, inferences=25_000), record(day + 3600, inferences=26_500)]),
    ]
    # Every record lies inside its licence's life: all stored, none refused.
    assert [(r.json()["accepted"], r.json()["refused"]) for r in stored] == [
        (2, []), (1, []), (1, []), (2, [])
    ]  # fmt: skip
    revoke_at(d5, NOW - dt.timedelta(days=2))  # inside the window: still billed, still N
    revoke_at(d6, START - dt.timedelta(seconds=1))  # before the window: not in N
    return {"b1": b1, "b2": b2, "d7": d7}


def test_invoice_matches_hand_computed_lines(customer, scenario):
    rated = invoice_rate(customer_id=customer.id, period_days=30, now=NOW)
    assert rated["customer_id"] == customer.id
    assert (rated["period_start"], rated["period_end"]) == (hour(START), hour(NOW))
    assert rated["currency"] == "EUR"
    b1, b2 = scenario["b1"].id, scenario["b2"].id
    batches = sorted([(b1, 4, D("240.00"), D("960.00")), (b2, 2, D("210.00"), D("420.00"))])
    expected = [
        ("unit_activation", "VISION-PRO", n, price, amount) for _, n, price, amount in batches
    ] + [  # fmt: skip
        ("direct_license", "DETECT-STD", 1, D("90.00"), D("90.00")),
        ("direct_license", "VISION-PRO", 2, D("240.00"), D("480.00")),
        ("metered_overage", "DETECT-STD", D("1.500"), D("0.50"), D("0.75")),
        ("metered_overage", "VISION-PRO", D("5000.000"), D("0.40"), D("2000.00")),
        ("metered_overage", "VISION-PRO", D("1234.567"), D("0.25"), D("308.64")),
    ]
    assert amounts(rated) == expected
    assert [line.get("batch_id") for line in rated["lines"][:2]] == [b for b, *_ in batches]
    assert rated["total"] == D("4259.39")
    units = {line["kind"]: line["unit"] for line in rated["lines"]}
    assert units == {"unit_activation": "unit", "direct_license": "licence",
                     "metered_overage": "1000 inferences"}  # fmt: skip
    assert all(line["description"] for line in rated["lines"])


def test_invoice_endpoint_renders_numbers(customer, scenario, admin_api):
    response = admin_api.get(f"/v1/admin/invoice/{customer.id}?period_days=30")
    assert response.status_code == 200
    body = response.json()
    assert isinstance(body["total"], float | int) and isinstance(body["period_end"], int)
    for line in body["lines"]:
        assert all(isinstance(line[k], float | int) for k in ("quantity", "unit_price", "amount"))
        assert {"kind", "sku", "description", "unit"} <= set(line)


def test_window_that_sees_nothing_has_no_lines(customer, scenario):
    rated = invoice_rate(customer_id=customer.id, period_days=5, now=BEFORE)
    assert rated["lines"] == [] and rated["total"] == D("0.00")


def test_usage_under_the_allowance_has_no_overage_line(customer, make_batch, activate, upload):
    unit = activate(make_batch(units=2, sku="DETECT-STD"), "cam", at=BEFORE)
    upload(unit, [record(hour(IN), inferences=50_000)])  # exactly A: O = 0
    rated = invoice_rate(customer_id=customer.id, period_days=30, now=NOW)
    assert [line["kind"] for line in rated["lines"]] == []


def test_fractional_allowance_and_quantity_rounding(customer, direct, upload):
    """API-METERED, P = 7: A = 1 x 10 000 x 7 / 30 = 2333.33..., U = 5000,
    O = 2666.66... -> 2.667 thousand (half-up) x 1.20 = 3.2004 -> 3.20."""
    lic = direct("API-METERED", "m1", at=BEFORE)
    upload(lic, [record(hour(NOW) - 7200, inferences=5000)])
    rated = invoice_rate(customer_id=customer.id, period_days=7, now=NOW)
    assert amounts(rated) == [("metered_overage", "API-METERED", D("2.667"), D("1.20"), D("3.20"))]
    assert rated["total"] == D("3.20")


def test_half_up_rounding_per_line(customer, direct, upload):
    """DETECT-STD, 2 direct licences before the window, P = 30: A = 100 000;
    U = 100 010 -> 0.010 thousand x 0.50 = 0.005 -> 0.01 half-up (banker's rounding
    would give 0.00)."""
    a, b = direct("DETECT-STD", "s1", at=BEFORE), direct("DETECT-STD", "s2", at=BEFORE)
    upload(a, [record(hour(IN), inferences=50_010)])
    upload(b, [record(hour(IN), inferences=50_000)])
    rated = invoice_rate(customer_id=customer.id, period_days=30, now=NOW)
    assert amounts(rated) == [("metered_overage", "DETECT-STD", D("0.010"), D("0.50"), D("0.01"))]


def test_usage_edges_are_exact_to_the_second(customer, direct, upload):
    """Records exactly at period_start count, at period_end do not, on partial days at
    both edges and full days between (rollups plus records)."""
    lic = direct("API-METERED", "e1", at=BEFORE)  # A = 10 000 for P = 30
    s, e = hour(START), hour(NOW)
    upload(
        lic,
        [
            record(s - 1, length=1, inferences=1),
            record(s, length=1, inferences=10_000),
            record(s + 1, length=1, inferences=100),
            record(e - 1, length=1, inferences=20),
            record(e, length=1, inferences=4),
            record(hour(IN) + 43200, inferences=3000),
        ],
    )
    rated = invoice_rate(customer_id=customer.id, period_days=30, now=NOW)
    assert amounts(rated) == [("metered_overage", "API-METERED", D("3.120"), D("1.20"), D("3.74"))]


def test_sub_day_window_reads_records_only(customer, direct, upload):
    lic = direct("API-METERED", "e2", at=BEFORE)  # A = 10 000 / 30 = 333.33 for P = 1 ...
    upload(lic, [record(hour(NOW) - 7200, inferences=1333)])
    rated = invoice_rate(customer_id=customer.id, period_days=1, now=NOW)
    # O = 1333 - 333.333... = 999.666... -> 1.000 thousand x 1.20 = 1.20
    assert amounts(rated) == [("metered_overage", "API-METERED", D("1.000"), D("1.20"), D("1.20"))]


def test_overage_spans_two_tiers_with_graduated_prices(customer, direct, upload):
    """API-METERED, N = 1, P = 30: A = 10 000; U = 1 510 000 -> O = 1 500 000:
    1 000 000 at 1.20 = 1200.00 and 500 000 at 0.80 = 400.00."""
    lic = direct("API-METERED", "g1", at=BEFORE)
    upload(lic, [record(hour(IN) + i * 3600, inferences=755_000) for i in range(2)])
    rated = invoice_rate(customer_id=customer.id, period_days=30, now=NOW)
    assert amounts(rated) == [
        ("metered_overage", "API-METERED", D("1000.000"), D("1.20"), D("1200.00")),
        ("metered_overage", "API-METERED", D("500.000"), D("0.80"), D("400.00")),
    ]
    assert rated["total"] == D("1600.00")


def test_other_customers_usage_and_licenses_are_not_billed(customer, direct, upload):
    from tests.factories import CustomerFactory

    other = CustomerFactory()
    theirs = direct("API-METERED", "o1", at=IN, owner=other)
    upload(theirs, [record(hour(IN), inferences=900_000)])
    assert invoice_rate(customer_id=customer.id, period_days=30, now=NOW)["lines"] == []


class TestMaintenance:
    """ANPR-PERPETUAL, P = 365 (window from 2025-04-30 12:00):
    batch A of 3 units (600.00): a1 200 days ago, a2 10 days ago, a3 revoked 5 days ago
      -> unit_activation 3 x 600.00 = 1800.00
    batch B of 50 units (540.00): b1 -> unit_activation 1 x 540.00 = 540.00
    direct ANPR licence (600.00) -> direct_license 1 x 600.00 = 600.00
    maintenance @600: a1, a2, direct = 3 x round(0.18 x 600, 2) = 3 x 108.00 = 324.00
    maintenance @540: b1 = 1 x 97.20 = 97.20
    usage of ANPR: no allowance and no overage tiers -> no line.
    A VISION-PRO licence (rate 0, not perpetual) adds its own lines but no maintenance.
    total 1800 + 540 + 600 + 240 (VISION-PRO direct) + 324 + 97.20 = 3601.20
    """

    @pytest.fixture
    def fleet(self, customer, make_batch, activate, direct, upload, revoke_at):
        batch_a = make_batch(units=3, sku="ANPR-PERPETUAL")
        batch_b = make_batch(units=50, sku="ANPR-PERPETUAL")
        assert batch_a.expires_at is None and batch_b.unit_price == D("540.00")
        a1 = activate(batch_a, "a1", at=NOW - dt.timedelta(days=200))
        activate(batch_a, "a2", at=NOW - dt.timedelta(days=10))
        a3 = activate(batch_a, "a3", at=NOW - dt.timedelta(days=30))
        activate(batch_b, "b1", at=NOW - dt.timedelta(days=100))
        direct("ANPR-PERPETUAL", "p1", at=NOW - dt.timedelta(days=300))
        direct("VISION-PRO", "v1", at=NOW - dt.timedelta(days=300))
        upload(a1, [record(hour(IN), inferences=123_456)])
        revoke_at(a3, NOW - dt.timedelta(days=5))
        return {"a": batch_a.id, "b": batch_b.id}

    def test_annual_invoice_charges_maintenance_per_sku_and_base_price(self, customer, fleet):
        rated = invoice_rate(customer_id=customer.id, period_days=365, now=NOW)
        activation_lines = sorted(
            [(fleet["a"], 3, D("600.00"), D("1800.00")), (fleet["b"], 1, D("540.00"), D("540.00"))]
        )
        assert amounts(rated) == [
            ("unit_activation", "ANPR-PERPETUAL", n, price, amount)
            for _, n, price, amount in activation_lines
        ] + [
            ("direct_license", "ANPR-PERPETUAL", 1, D("600.00"), D("600.00")),
            ("direct_license", "VISION-PRO", 1, D("240.00"), D("240.00")),
            ("maintenance", "ANPR-PERPETUAL", 1, D("97.20"), D("97.20")),
            ("maintenance", "ANPR-PERPETUAL", 3, D("108.00"), D("324.00")),
        ]
        assert rated["lines"][-1]["unit"] == "unit-year"
        assert rated["total"] == D("3601.20")

    def test_no_maintenance_below_365_days(self, customer, fleet):
        rated = invoice_rate(customer_id=customer.id, period_days=364, now=NOW)
        assert "maintenance" not in {line["kind"] for line in rated["lines"]}
