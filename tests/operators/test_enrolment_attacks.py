"""Issue 39 item 1: enrolment that cannot be shared, session ids that change at every step
up, and resets only by someone who holds at least what the target holds.

The attack of the issue: someone who knows a new user's password opened the enrolment
page in a session of their own, saw the same secret the victim was about to confirm, and
logged in with codes from it once the victim had enrolled. Now every enrolment page
shows a secret bound to its session, and only that session can confirm it.

TOTP codes are computed with django-otp's own ``totp`` for the current time step; the
device accepts one step either side, and no assertion depends on when the step turns.
"""

from __future__ import annotations

import base64

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from operators.second_factor import may_reset
from operators.services import roles_ensure
from tests.conftest import start_gunicorn, stop_gunicorn
from tests.operators.test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, _browser_or_skip
from tests.operators.test_second_factor import PASSWORD, two_factor  # noqa: F401 - fixture

COOKIE = settings.SESSION_COOKIE_NAME


def _user(name: str, *roles: str, superuser: bool = False):
    roles_ensure()
    make = get_user_model().objects.create_superuser if superuser else None
    if make:
        user = make(name, f"{name}@example.com", PASSWORD)
    else:
        user = get_user_model().objects.create_user(name, password=PASSWORD, is_staff=True)
    for role in roles:
        user.groups.add(Group.objects.get(name=role))
    return user


def _login(username: str) -> Client:
    client = Client()
    response = client.post(
        "/admin/login/?next=/admin/", {"username": username, "password": PASSWORD}
    )
    assert response.status_code == 302, response.content[:500]
    return client


def _secret(page: str) -> bytes:
    text = page.split('id="enrol-secret">', 1)[1].split("<", 1)[0].replace(" ", "")
    return base64.b32decode(text + "=" * (-len(text) % 8))


def _code(key: bytes) -> str:
    return f"{totp(key):06d}"


def _codes_around_now(key: bytes) -> list[str]:
    """Codes of the previous, current and next time step: every code that could pass."""
    return [f"{totp(key, drift=step):06d}" for step in (-1, 0, 1)]


def test_every_enrolment_page_shows_a_new_secret_bound_to_its_session(two_factor, db):  # noqa: F811
    vera = _user("vera", "viewer")
    attacker, victim = _login("vera"), _login("vera")
    seen = _secret(attacker.get("/admin/second-factor/").content.decode())
    first = _secret(victim.get("/admin/second-factor/").content.decode())
    again = _secret(victim.get("/admin/second-factor/").content.decode())
    assert len({seen, first, again}) == 3
    # The attacker's session cannot confirm the victim's secret, nor the reverse.
    response = attacker.post("/admin/second-factor/", {"code": _code(again)})
    assert "That code is not right" in response.content.decode()
    # The victim confirms the secret its own page showed last.
    response = victim.post("/admin/second-factor/", {"code": _code(again), "next": "/admin/"})
    assert 'id="recovery-codes"' in response.content.decode()
    assert victim.get("/admin/").status_code == 200
    devices = TOTPDevice.objects.filter(user=vera)
    assert [d.bin_key for d in devices] == [again] and devices.get().confirmed
    # Every code the attacker's secret could give is refused, in its session and in a
    # new one; the attacker never reaches the console.
    for code in _codes_around_now(seen):
        answer = attacker.post("/admin/second-factor/", {"code": code})
        assert "That code is not right" in answer.content.decode()
        assert 'id="enrol-secret"' not in answer.content.decode()
    fresh = _login("vera")
    assert fresh.get("/admin/")["Location"].startswith("/admin/second-factor/")
    assert (
        "That code is not right"
        in fresh.post(
            "/admin/second-factor/", {"code": _codes_around_now(seen)[1]}
        ).content.decode()
    )
    assert fresh.get("/admin/")["Location"].startswith("/admin/second-factor/")


def test_a_code_posted_without_an_enrolment_page_of_its_own_confirms_nothing(two_factor, db):  # noqa: F811
    vera = _user("vera", "viewer")
    watcher = _login("vera")
    key = _secret(watcher.get("/admin/second-factor/").content.decode())
    blind = _login("vera")  # never opened the page: no secret of its own
    response = blind.post("/admin/second-factor/", {"code": _code(key)})
    assert "This set-up page has expired or was replaced" in response.content.decode()
    assert not TOTPDevice.objects.filter(user=vera, confirmed=True).exists()


def test_the_pre_verification_session_id_is_useless_after_verification(two_factor, db):  # noqa: F811
    _user("vera", "viewer")
    # A session id planted before the login (fixation) is replaced at the password step.
    planted = SessionStore()
    planted.create()
    client = Client()
    client.cookies[COOKIE] = planted.session_key
    client.post("/admin/login/?next=/admin/", {"username": "vera", "password": PASSWORD})
    after_password = client.cookies[COOKIE].value
    assert after_password != planted.session_key
    # A copy of the session id between the password and the code ...
    copy = Client()
    copy.cookies[COOKIE] = after_password
    assert copy.get("/admin/")["Location"].startswith("/admin/second-factor/")
    key = _secret(client.get("/admin/second-factor/").content.decode())
    response = client.post("/admin/second-factor/", {"code": _code(key), "next": "/admin/"})
    assert 'id="recovery-codes"' in response.content.decode()
    verified = client.cookies[COOKIE].value
    assert verified != after_password
    assert client.get("/admin/").status_code == 200
    # ... is worth nothing once the user has verified: it is no session at all.
    answer = copy.get("/admin/")
    assert answer.status_code == 302 and answer["Location"].startswith("/admin/login/")
    assert not SessionStore().exists(after_password)
    # Logging out ends the verified session: its id is useless too.
    stolen = Client()
    stolen.cookies[COOKIE] = verified
    assert stolen.get("/admin/").status_code == 200
    client.post("/admin/logout/")
    assert stolen.get("/admin/")["Location"].startswith("/admin/login/")
    assert not SessionStore().exists(verified)


@pytest.mark.parametrize(
    ("resetter", "target", "allowed"),
    [
        (("key-admin",), ("viewer",), True),
        (("key-admin",), ("key-admin",), True),
        (("key-admin",), ("operator",), False),
        (("key-admin",), ("finance",), False),
        (("key-admin",), ("viewer", "support"), False),
        (("key-admin",), "superuser", False),
        (("key-admin", "operator", "finance", "support"), "superuser", False),
        (("key-admin", "operator", "finance", "support"), ("operator", "finance"), True),
        ("superuser", "superuser", True),
        ("superuser", ("operator",), True),
    ],
)
def test_a_reset_needs_every_role_of_the_target(two_factor, db, resetter, target, allowed):  # noqa: F811
    """The console's reset action, as the resetter: refused (and nothing removed) unless
    the resetter holds at least every role of the target."""
    who = _user("kai", *(() if resetter == "superuser" else resetter),
                superuser=resetter == "superuser")  # fmt: skip
    victim = _user("tess", *(() if target == "superuser" else target),
                   superuser=target == "superuser")  # fmt: skip
    TOTPDevice.objects.create(user=victim, name="authenticator", confirmed=True)
    assert may_reset(who, victim) is allowed
    client = Client()
    client.force_login(who)
    session = client.session
    session["otp_device_id"] = TOTPDevice.objects.create(
        user=who, name="authenticator", confirmed=True
    ).persistent_id
    session.save()
    response = client.post(
        "/admin/auth/user/",
        {"action": "reset_second_factor", "_selected_action": [victim.pk]},
        follow=True,
    )
    text = response.content.decode()
    assert TOTPDevice.objects.filter(user=victim).exists() is not allowed
    if allowed:
        assert "Second factor of tess reset" in text
    else:
        assert "ou may not reset the second factor of &#x27;tess&#x27;" in text


def test_a_reset_user_enrols_afresh(two_factor, db):  # noqa: F811
    """After a reset the target's verified sessions are no longer verified, and it enrols
    a new secret in its own session."""
    _user("kai", "key-admin")
    vera = _user("vera", "viewer")
    client = _login("vera")
    old = _secret(client.get("/admin/second-factor/").content.decode())
    client.post("/admin/second-factor/", {"code": _code(old)})
    assert client.get("/admin/").status_code == 200
    from operators.second_factor import second_factor_reset

    second_factor_reset(username="vera", by=get_user_model().objects.get(username="kai"))
    assert client.get("/admin/")["Location"].startswith("/admin/second-factor/")
    new = _secret(client.get("/admin/second-factor/").content.decode())
    assert new != old
    assert not TOTPDevice.objects.filter(user=vera, confirmed=True).exists()


@pytest.fixture
def guarded_service(django_db_setup, django_db_blocker, signing_key_file, tmp_path):
    """gunicorn on the test database with production defaults (SVC_REQUIRE_2FA on)."""
    service = start_gunicorn(tmp_path, SVC_REQUIRE_2FA="1")
    try:
        yield service
    finally:
        stop_gunicorn(service)


@pytest.mark.live
def test_an_attacker_session_at_enrolment_never_gets_in(guarded_service, transactional_db):
    """Chromium, two browser contexts (two sessions): the attacker, who knows the password,
    opens the enrolment page first; the victim enrols in its own session; every code of
    the attacker's secret is refused, in its session and after a new login."""
    sync_playwright = _browser_or_skip()
    _user("vera", "viewer")
    url = guarded_service.url

    def log_in(page):
        page.goto(f"{url}/admin/licensing/license/")
        page.fill("#id_username", "vera")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_selector("#second-factor-submit")
        assert "/admin/second-factor/" in page.url

    def secret_of(page) -> bytes:
        text = page.inner_text("#enrol-secret").replace(" ", "")
        return base64.b32decode(text + "=" * (-len(text) % 8))

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            attacker = browser.new_context().new_page()
            victim = browser.new_context().new_page()
            for page in (attacker, victim):
                page.set_default_timeout(15_000)
            log_in(attacker)
            seen = secret_of(attacker)
            log_in(victim)
            own = secret_of(victim)
            assert own != seen
            victim.fill("#id_code", _code(own))
            victim.click("#second-factor-submit")
            assert len(victim.locator("#recovery-codes li").all_inner_texts()) == 10
            victim.click("#codes-continue")
            victim.wait_for_selector("#result_list, #changelist")
            assert "/admin/licensing/license/" in victim.url

            # The attacker's page: its secret's codes never open the console.
            attacker.fill("#id_code", _codes_around_now(seen)[1])
            attacker.click("#second-factor-submit")
            assert "That code is not right" in attacker.inner_text(".errorlist")
            assert attacker.locator("#enrol-secret").count() == 0
            attacker.goto(f"{url}/admin/")
            assert "/admin/second-factor/" in attacker.url
            # A new login with the password, then the secret's other codes.
            attacker.context.clear_cookies()
            log_in(attacker)
            assert attacker.locator("#enrol-secret").count() == 0
            for code in (_codes_around_now(seen)[0], _codes_around_now(seen)[2]):
                attacker.fill("#id_code", code)
                attacker.click("#second-factor-submit")
                assert "That code is not right" in attacker.inner_text(".errorlist")
            ARTIFACTS.mkdir(exist_ok=True)
            attacker.screenshot(path=str(ARTIFACTS / "enrolment-attacker-refused.png"))
            attacker.goto(f"{url}/admin/")
            assert "/admin/second-factor/" in attacker.url
        finally:
            browser.close()
    # The user's one device is the secret the victim's session was shown.
    devices = TOTPDevice.objects.filter(user__username="vera")
    assert [d.bin_key for d in devices] == [own]
