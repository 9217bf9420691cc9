"""devices.license_state: the one licence-state function (spec §3) at its boundaries."""

from __future__ import annotations

import pytest

from devices import ACTIVE, EXPIRED, GRACE, NOT_YET_VALID, REVOKED, license_state
from devices.term import NBF_LEEWAY_SECONDS

DAY = 86400
NBF = 1_800_000_000
EXP = NBF + 30 * DAY
GRACE_DAYS = 14
TERM = {"nbf": NBF, "exp": EXP, "grace_days": GRACE_DAYS}
PERPETUAL = {"nbf": NBF, "exp": 0, "grace_days": GRACE_DAYS}


@pytest.mark.parametrize(
    ("claims", "now", "options", "expected"),
    [
        (TERM, NBF - 1, {}, NOT_YET_VALID),
        (TERM, NBF, {}, ACTIVE),
        (TERM, NBF - NBF_LEEWAY_SECONDS, {"nbf_leeway": NBF_LEEWAY_SECONDS}, ACTIVE),
        (TERM, NBF - NBF_LEEWAY_SECONDS - 1, {"nbf_leeway": NBF_LEEWAY_SECONDS}, NOT_YET_VALID),
        (TERM, EXP - 1, {}, ACTIVE),
        (TERM, EXP, {}, ACTIVE),  # exp itself is within the term
        (TERM, EXP + 0.5, {}, GRACE),
        (TERM, EXP + 1, {}, GRACE),
        (TERM, EXP + GRACE_DAYS * DAY, {}, GRACE),  # the last second of grace
        (TERM, EXP + GRACE_DAYS * DAY + 1, {}, EXPIRED),
        ({**TERM, "grace_days": 0}, EXP + 1, {}, EXPIRED),
        (PERPETUAL, NBF, {}, ACTIVE),
        (PERPETUAL, NBF + 100 * 365 * DAY, {}, ACTIVE),  # exp 0 never runs out
        (PERPETUAL, NBF - 1, {}, NOT_YET_VALID),
        (TERM, EXP, {"revoked": True}, REVOKED),
        (TERM, NBF - 1, {"revoked": True}, REVOKED),  # revoked beats every other state
        (TERM, EXP + GRACE_DAYS * DAY + 1, {"revoked": True}, REVOKED),
    ],
)
def test_license_state_at_the_boundaries(claims, now, options, expected):
    assert license_state(claims, now, **options) == expected


def test_engine_values_are_the_contract_ones():
    """Contract §8 fixes what Engine.start returns; the spec §3 names the others."""
    assert (ACTIVE, GRACE, EXPIRED) == ("active", "SVC_LIC_GRACE", "LICENSE_EXPIRED")
