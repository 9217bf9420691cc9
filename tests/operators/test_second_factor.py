"""Two-factor console logins (issue 28): enrolment with a QR code and the first code,
recovery codes used once, wrong codes counted toward the login lockout, and a reset by
a key administrator, audited."""

from __future__ import annotations

import base64
import re
import time

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from audit.models import AuditEntry
from operators.services import roles_ensure
from tests.conftest import start_gunicorn, stop_gunicorn
from tests.operators.test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, _browser_or_skip

PASSWORD = "correct horse battery staple 42"


@pytest.fixture
def two_factor(settings):
    settings.SVC_REQUIRE_2FA = True
    settings.AXES_RESET_ON_SUCCESS = False
    # django-otp makes a device wait 1 s, then 2 s, ... after each wrong code; the tests
    # enter the right one at once.
    settings.OTP_TOTP_THROTTLE_FACTOR = 0
    settings.OTP_STATIC_THROTTLE_FACTOR = 0


@pytest.fixture
def viewer(db, django_user_model):
    roles_ensure()
    user = django_user_model.objects.create_user("vera", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name="viewer"))
    return user


def _login(username: str = "vera") -> Client:
    client = Client()
    response = client.post(
        "/admin/login/?next=/admin/", {"username": username, "password": PASSWORD}
    )
    assert response.status_code == 302, response.content[:500]
    return client


def _code(user) -> str:
    device = TOTPDevice.objects.get(user=user)
    return f"{totp(device.bin_key, step=device.step, t0=device.t0, digits=device.digits):06d}"


def _enrol(client: Client, user) -> list[str]:
    page = client.get("/admin/second-factor/?next=/admin/").content.decode()
    assert "<svg" in page and 'id="enrol-secret"' in page
    response = client.post("/admin/second-factor/", {"code": _code(user), "next": "/admin/"})
    codes = re.findall(r"<li>([a-z0-9]+)</li>", response.content.decode())
    assert len(codes) == 10
    return codes


def test_every_console_page_waits_for_the_second_factor(two_factor, viewer):
    client = _login()
    response = client.get("/admin/licensing/license/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/second-factor/?next=%2Fadmin%2Flicensing%2Flicense%2F"
    assert client.get("/admin/dashboard/")["Location"].startswith("/admin/second-factor/")


def test_enrolment_then_a_code_opens_the_console(two_factor, viewer):
    client = _login()
    client.get("/admin/second-factor/")  # the enrolment page: its secret, this session's
    wrong = client.post("/admin/second-factor/", {"code": "000000", "next": "/admin/"})
    assert "That code is not right" in wrong.content.decode()
    assert not TOTPDevice.objects.get(user=viewer).confirmed
    _enrol(client, viewer)
    assert TOTPDevice.objects.get(user=viewer).confirmed
    assert client.get("/admin/licensing/license/").status_code == 200
    entry = AuditEntry.objects.get(action="second_factor.enrol")
    assert entry.target == "vera" and entry.detail == {"recovery_codes": 10}
    # The codes themselves are stored by django-otp only, never in the log.
    assert not any(t.token in str(entry.detail) for t in StaticToken.objects.all())


def test_a_recovery_code_logs_in_once(two_factor, viewer):
    codes = _enrol(_login(), viewer)
    client = _login()
    assert client.get("/admin/")["Location"].startswith("/admin/second-factor/")
    response = client.post(
        "/admin/second-factor/", {"code": codes[0], "next": "/admin/"}, follow=True
    )
    assert "recovery code; 9 left" in response.content.decode()
    again = _login()
    response = again.post("/admin/second-factor/", {"code": codes[0], "next": "/admin/"})
    assert "That code is not right" in response.content.decode()


def test_wrong_codes_lock_the_account_out_like_wrong_passwords(two_factor, viewer, settings):
    settings.AXES_FAILURE_LIMIT = 3
    _enrol(_login(), viewer)
    client = _login()
    for _ in range(2):
        response = client.post("/admin/second-factor/", {"code": "123456"})
        assert "That code is not right" in response.content.decode()
    # The third is answered with django-axes's lockout, and the session is ended.
    response = client.post("/admin/second-factor/", {"code": "123456"})
    assert response.status_code == 429
    assert client.get("/admin/")["Location"].startswith("/admin/login/")  # logged out
    # The right password alone no longer logs in from this address.
    locked = Client().post("/admin/login/", {"username": "vera", "password": PASSWORD})
    assert locked.status_code == 429


def test_without_the_setting_no_second_factor_is_asked(settings, viewer):
    settings.SVC_REQUIRE_2FA = False
    assert _login().get("/admin/licensing/license/").status_code == 200


def test_a_key_administrator_resets_a_second_factor(two_factor, viewer, django_user_model):
    _enrol(_login(), viewer)
    keys = django_user_model.objects.create_user("kai", password=PASSWORD, is_staff=True)
    keys.groups.add(Group.objects.get(name="key-admin"))
    client = _login("kai")
    _enrol(client, keys)
    page = client.get("/admin/auth/user/").content.decode()
    assert "reset_second_factor" in page
    response = client.post(
        "/admin/auth/user/",
        {"action": "reset_second_factor", "_selected_action": [viewer.pk]},
        follow=True,
    )
    assert "Second factor of vera reset: 2 device(s) removed" in response.content.decode()
    assert not TOTPDevice.objects.filter(user=viewer).exists()
    entry = AuditEntry.objects.get(action="second_factor.reset")
    assert (entry.target, entry.actor, entry.actor_kind) == ("vera", "kai", "staff")
    # Vera enrols again at her next login; a viewer may not reset anyone.
    vera = _login()
    assert 'id="enrol-secret"' in vera.get("/admin/second-factor/").content.decode()
    _enrol(vera, viewer)
    assert "reset_second_factor" not in vera.get("/admin/auth/user/").content.decode()


@pytest.fixture
def guarded_service(django_db_setup, django_db_blocker, signing_key_file, tmp_path):
    """gunicorn serving the test database with SVC_REQUIRE_2FA=1, as in production."""
    service = start_gunicorn(tmp_path, SVC_REQUIRE_2FA="1", SVC_LOGIN_FAILURE_LIMIT="5")
    try:
        yield service
    finally:
        stop_gunicorn(service)


@pytest.mark.live
def test_enrol_and_log_in_with_codes_in_a_real_browser(guarded_service, transactional_db):
    """Chromium: log in, scan (read) the QR code's key, a wrong code refused, the right one
    enrols and shows the recovery codes; a second login takes a recovery code."""
    sync_playwright = _browser_or_skip()
    roles_ensure()
    user = get_user_model().objects.create_user("vera", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name="viewer"))
    url = guarded_service.url

    def log_in(page):
        page.goto(f"{url}/admin/licensing/license/")
        page.fill("#id_username", "vera")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_selector("#second-factor-submit")
        assert "/admin/second-factor/" in page.url

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(15_000)
            log_in(page)
            assert page.locator("#enrol-qr svg").count() == 1
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "second-factor-enrol.png"))
            secret = page.inner_text("#enrol-secret").replace(" ", "")
            key = base64.b32decode(secret + "=" * (-len(secret) % 8))
            page.fill("#id_code", "000000" if totp(key) != 0 else "111111")
            page.click("#second-factor-submit")
            assert "That code is not right" in page.inner_text(".errorlist")
            time.sleep(1.1)  # django-otp's throttle after a wrong code: 1 s
            page.fill("#id_code", f"{totp(key):06d}")
            page.click("#second-factor-submit")
            codes = page.locator("#recovery-codes li").all_inner_texts()
            assert len(codes) == 10
            page.click("#codes-continue")
            page.wait_for_selector("#result_list, #changelist")
            assert "/admin/licensing/license/" in page.url

            # A new browser session: password, then a recovery code.
            page.context.clear_cookies()
            log_in(page)
            assert page.locator("#enrol-qr").count() == 0
            page.fill("#id_code", codes[0])
            page.click("#second-factor-submit")
            page.wait_for_selector(".messagelist")
            assert "recovery code; 9 left" in page.inner_text(".messagelist")
        finally:
            browser.close()


def test_the_host_administrator_resets_a_second_factor_from_the_command_line(two_factor, viewer):
    import io

    from django.core.management import call_command
    from django.core.management.base import CommandError

    _enrol(_login(), viewer)
    out = io.StringIO()
    call_command("second_factor_reset", "vera", stdout=out)
    assert "2 device(s) removed" in out.getvalue()
    entry = AuditEntry.objects.get(action="second_factor.reset")
    assert (entry.target, entry.actor_kind) == ("vera", "cli")
    with pytest.raises(CommandError, match="no console user named 'nobody'"):
        call_command("second_factor_reset", "nobody")
