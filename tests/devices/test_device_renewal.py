"""A renewed licence reaches the device during sync (issue 16): fetched from
GET /v1/license with the licence held, verified like any token, installed atomically and
applied at once; anything wrong keeps the licence held."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from devices import Expired, LicenseError
from tests.devices.device_support import DEVICE, LICENSE, NOW

DAY = 86400
EXP = NOW + 30 * DAY  # the test licence's end (claims_for); 14 days of grace


@pytest.fixture
def in_grace(make_engine, make_token, clock):
    """An engine running the test licence 5 days after its end (in grace)."""
    engine = make_engine()
    engine.start(make_token())
    clock.now = EXP + 5 * DAY
    engine.require("detect")  # the clock passes the end: grace
    assert engine.state == "SVC_LIC_GRACE"
    return engine


def renewed_answer(service, token: str) -> None:
    service.reply(
        "GET",
        "/v1/license",
        200,
        {"license_id": LICENSE, "token": token, "expires_at": 0, "certificates": []},
    )


def test_a_device_in_grace_recovers_on_its_first_sync(
    in_grace, service, make_token, make_engine, state_dir, clock
):
    held = make_token()
    renewed = make_token(exp=EXP + 365 * DAY, iat=NOW + 40 * DAY)
    renewed_answer(service, renewed)

    summary = in_grace.sync(service.url, allow_http=True)

    assert summary["license"] == "renewed"
    assert in_grace.state == "active" and in_grace.claims["exp"] == EXP + 365 * DAY
    (asked,) = service.calls("/v1/license")
    assert asked["headers"]["Authorization"] == f"Bearer {held}"
    assert asked["query"] == {"device_id": [DEVICE]}
    assert (state_dir / "license.token").read_text().strip() == renewed
    # Past the old grace, still running; and a reboot starts from the renewed file.
    clock.now = EXP + 100 * DAY
    in_grace.require("detect")
    assert make_engine().start() == "active"


def test_an_expired_device_runs_again_once_the_renewal_arrives(
    make_engine, make_token, service, clock
):
    engine = make_engine()
    engine.start(make_token())
    clock.now = EXP + 20 * DAY  # grace (14 days) over
    with pytest.raises(Expired):
        engine.require("detect")
    renewed_answer(service, make_token(exp=EXP + 60 * DAY))

    assert engine.sync(service.url, allow_http=True)["license"] == "renewed"

    engine.require("detect")
    assert engine.state == "active"


def test_a_current_license_is_answered_304_and_nothing_changes(in_grace, service, state_dir):
    assert in_grace.sync(service.url, allow_http=True)["license"] == "current"
    assert in_grace.state == "SVC_LIC_GRACE" and in_grace.claims["exp"] == EXP
    assert not (state_dir / "license.token").exists()  # started from a token: none written


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"lic": "LIC-OTHER00000"}, "another licence"),
        ({"sub": "CUST-SOMEONEELSE"}, "another licence"),
        ({"sku": "DETECT-STD"}, "another licence"),
        ({"dev": "cam-9999"}, "not bound to this device"),
        ({"dev": "*", "act": "required"}, "not bound to this device"),
        ({"exp": EXP - DAY}, "ending earlier"),
    ],
)
def test_a_renewal_that_is_not_this_license_is_refused_and_the_held_one_kept(
    in_grace, service, make_token, state_dir, overrides, words
):
    renewed_answer(service, make_token(**{"exp": EXP + 365 * DAY, **overrides}))

    with pytest.raises(LicenseError) as caught:
        in_grace.sync(service.url, allow_http=True)

    assert caught.value.code == "REFRESH_INVALID" and words in str(caught.value)
    assert caught.value.summary["license"] == "kept"
    assert in_grace.state == "SVC_LIC_GRACE" and in_grace.claims["exp"] == EXP
    assert not (state_dir / "license.token").exists()  # started from a token: none written


def test_a_renewal_signed_by_an_unknown_key_is_refused(in_grace, service, make_token):
    renewed_answer(service, make_token(key=Ed25519PrivateKey.generate(), exp=EXP + 365 * DAY))
    with pytest.raises(LicenseError) as caught:
        in_grace.sync(service.url, allow_http=True)
    assert caught.value.code == "REFRESH_INVALID" and "does not verify" in str(caught.value)
    assert in_grace.claims["exp"] == EXP


@pytest.mark.parametrize(
    ("status", "body"), [(500, {"detail": "boom"}), (200, {"token": 7}), (403, {})]
)
def test_a_failed_refresh_keeps_the_license_and_the_rest_of_sync_happens(
    in_grace, service, clock, status, body
):
    in_grace.count(inferences=3)
    clock.now += 3600
    service.reply("GET", "/v1/license", status, body)

    with pytest.raises(LicenseError) as caught:
        in_grace.sync(service.url, allow_http=True)

    assert caught.value.code in ("REFRESH_FAILED", "REFRESH_INVALID")
    assert caught.value.summary["accepted"] == 1  # usage went up all the same
    assert in_grace.claims["exp"] == EXP
