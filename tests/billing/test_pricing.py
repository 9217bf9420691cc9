"""The pure arithmetic of contract §6 (billing.pricing)."""

from __future__ import annotations

from decimal import Decimal as D

from billing import pricing

TIERS = [{"from_inferences": 5_000_000, "price_per_1000": D("0.25")},
         {"from_inferences": 0, "price_per_1000": D("0.40")}]  # fmt: skip


def test_money_rounds_half_up_to_the_cent():
    assert pricing.money(D("0.005")) == D("0.01")
    assert pricing.money(D("2.675")) == D("2.68")
    assert pricing.money(D("308.64175")) == D("308.64")
    assert pricing.money(D("1.004999")) == D("1.00")


def test_allowance_is_exact_and_may_be_fractional():
    assert pricing.allowance(units=10, allowance_per_unit=200_000, period_days=30) == 2_000_000
    assert pricing.allowance(units=1, allowance_per_unit=10_000, period_days=7) == (
        D(70_000) / D(30)
    )
    assert pricing.allowance(units=0, allowance_per_unit=50_000, period_days=365) == 0


def test_graduated_tiers_price_only_what_falls_in_them():
    split = [(t["from_inferences"], n) for t, n in pricing.overage_by_tier(D(6_234_567), TIERS)]
    assert split == [(0, D(5_000_000)), (5_000_000, D(1_234_567))]
    below = [n for _, n in pricing.overage_by_tier(D(4_999_999), TIERS)]
    assert below == [D(4_999_999), D(0)]
    assert [n for _, n in pricing.overage_by_tier(D(0), TIERS)] == [D(0), D(0)]


def test_thousands_keep_three_decimals_half_up():
    assert pricing.thousands(D(1_234_567)) == D("1234.567")
    assert pricing.thousands(D(70_000) / 3) == D("23.333")
    assert pricing.thousands(D("2666.6665")) == D("2.667")
