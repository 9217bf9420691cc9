"""Issue 39 item 5: lockout that also stops spraying (operators.lockout), with the
production defaults: 5 failures per account and address, 20 per account from every
address, 20 per address over every account, 5 wrong codes per account from anywhere;
second factor on, and a right password alone clears nothing.

Addresses are REMOTE_ADDR of the test client (no proxy is trusted), so each request
comes from the address the test names."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from tests.operators.test_second_factor import PASSWORD, two_factor  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def defaults(two_factor, settings):  # noqa: F811
    """The production numbers, whatever the test settings say."""
    settings.AXES_FAILURE_LIMIT = 5
    settings.SVC_LOGIN_ACCOUNT_FAILURE_LIMIT = 20
    settings.SVC_LOGIN_ADDRESS_FAILURE_LIMIT = 20
    settings.AXES_COOLOFF_TIME = 0.25  # hours: 15 minutes


def _users(*names: str) -> None:
    for name in names:
        get_user_model().objects.create_user(name, password=PASSWORD, is_staff=True)


def _login(username: str, address: str, password: str = PASSWORD) -> int:
    """The status of a login from ``address``: 302 in, 200 refused, 429 locked out."""
    response = Client(REMOTE_ADDR=address).post(
        "/admin/login/?next=/admin/", {"username": username, "password": password}
    )
    return response.status_code


def _password(client: Client) -> int:
    answer = client.post("/admin/login/", {"username": "vera", "password": PASSWORD})
    return answer.status_code


def _wrong(username: str, address: str, times: int) -> None:
    for _ in range(times):
        assert _login(username, address, "wrong password") == 200


def test_per_account_and_address(defaults):
    _users("vera")
    _wrong("vera", "10.0.0.1", 4)
    assert _login("vera", "10.0.0.1") == 302  # 4 of 5: still in (nothing is cleared)
    assert _login("vera", "10.0.0.1", "wrong password") == 429  # the 5th
    assert _login("vera", "10.0.0.1") == 429
    assert _login("vera", "10.0.0.2") == 302  # another address, under every other limit


def test_per_account_across_addresses(defaults):
    """The issue's attack: 24 wrong passwords on one account from 6 addresses, 4 each,
    locked nothing. Now the 20th locks the account from every address."""
    _users("vera", "walt")
    addresses = [f"10.0.1.{n}" for n in range(1, 7)]
    for address in addresses[:4]:
        _wrong("vera", address, 4)
    _wrong("vera", addresses[4], 3)  # 19
    assert _login("vera", "10.0.9.9") == 302
    assert _login("vera", addresses[4], "wrong password") == 429  # the 20th
    for address in [*addresses, "10.0.9.9", "192.0.2.1"]:
        assert _login("vera", address) == 429
    assert _login("walt", addresses[0]) == 302  # another account is not touched


def test_per_address_across_accounts(defaults):
    """The issue's attack: 32 wrong passwords over 8 accounts from one address, 4 each,
    locked nothing. Now the 20th locks the address for every account."""
    names = [f"user{n}" for n in range(1, 10)]
    _users(*names)
    for name in names[:4]:
        _wrong(name, "10.0.2.1", 4)
    _wrong(names[4], "10.0.2.1", 3)  # 19
    assert _login(names[8], "10.0.2.1") == 302
    assert _login(names[5], "10.0.2.1", "wrong password") == 429  # the 20th
    for name in names:
        assert _login(name, "10.0.2.1") == 429
    assert _login(names[8], "10.0.2.2") == 302  # the accounts, from elsewhere
    assert _login(names[0], "10.0.2.2") == 302


def test_codes_after_a_lockout_get_no_fresh_tries_from_a_second_address(defaults):
    """The issue's attack: after a lockout for wrong codes from one address, a second
    address (with the password) had 5 fresh tries. Now wrong codes count per account:
    the second address is refused at the password, and a right code does not help."""
    _users("vera")
    vera = get_user_model().objects.get(username="vera")
    device = TOTPDevice.objects.create(user=vera, name="authenticator", confirmed=True)
    first = Client(REMOTE_ADDR="10.0.3.1")
    assert _password(first) == 302
    for _ in range(4):
        answer = first.post("/admin/second-factor/", {"code": "123456"})
        assert "That code is not right" in answer.content.decode()
    assert first.post("/admin/second-factor/", {"code": "123456"}).status_code == 429
    assert first.get("/admin/")["Location"].startswith("/admin/login/")  # logged out
    # A second address with the right password: locked, no code asked.
    second = Client(REMOTE_ADDR="10.0.3.2")
    assert _password(second) == 429
    # Even a session that got past the password before the lockout gets no more tries:
    # its code page logs it out, right code or not.
    code = f"{totp(device.bin_key):06d}"
    assert second.post("/admin/second-factor/", {"code": code}).status_code == 302
    assert second.get("/admin/")["Location"].startswith("/admin/login/")


def test_a_session_past_the_password_is_logged_out_at_the_code_page_once_locked(defaults):
    _users("vera")
    vera = get_user_model().objects.get(username="vera")
    device = TOTPDevice.objects.create(user=vera, name="authenticator", confirmed=True)
    early = Client(REMOTE_ADDR="10.0.4.9")
    assert _password(early) == 302
    attacker = Client(REMOTE_ADDR="10.0.4.1")
    attacker.post("/admin/login/", {"username": "vera", "password": PASSWORD})
    for _ in range(5):
        attacker.post("/admin/second-factor/", {"code": "123456"})
    answer = early.post("/admin/second-factor/", {"code": f"{totp(device.bin_key):06d}"})
    assert answer.status_code == 302 and answer["Location"].startswith("/admin/login/")
    assert early.get("/admin/")["Location"].startswith("/admin/login/")


def test_a_password_failure_cannot_pose_as_a_code(defaults):
    """The record of a wrong code is marked by its user agent; a browser sending that
    user agent with wrong passwords is counted as passwords (5 per address, 20 per
    account), so it cannot lock an account everywhere with 5."""
    from operators.lockout import CODE_AGENT

    _users("vera")
    for n in range(5):
        Client(REMOTE_ADDR=f"10.0.5.{n}", HTTP_USER_AGENT=CODE_AGENT).post(
            "/admin/login/", {"username": "vera", "password": "wrong password"}
        )
    assert _login("vera", "10.0.5.200") == 302


@pytest.fixture
def proxied_service(django_db_setup, django_db_blocker, signing_key_file, tmp_path):
    """gunicorn with production defaults (2FA on, the default limits), behind a proxy it
    trusts on loopback: each request's address is its X-Forwarded-For."""
    from tests.conftest import start_gunicorn, stop_gunicorn

    service = start_gunicorn(tmp_path, SVC_REQUIRE_2FA="1", SVC_TRUSTED_PROXIES="127.0.0.1/32")
    try:
        yield service
    finally:
        stop_gunicorn(service)


@pytest.mark.live
def test_spraying_through_a_real_server_is_stopped(proxied_service, transactional_db):
    """The issue's two spraying attacks against a real server with its default numbers,
    the addresses as the proxy forwards them: 4 wrong passwords on each of 8 accounts
    from one address, and 4 on one account from each of 6 addresses."""
    import re

    import requests

    url = proxied_service.url
    names = [f"user{n}" for n in range(1, 10)]
    _users(*names, "vera")

    def login(username: str, address: str, password: str = PASSWORD) -> int:
        session = requests.Session()
        headers = {"X-Forwarded-For": address}
        page = session.get(f"{url}/admin/login/", headers=headers, timeout=10)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]
        answer = session.post(
            f"{url}/admin/login/?next=/admin/",
            {"username": username, "password": password, "csrfmiddlewaretoken": token},
            headers={**headers, "Referer": f"{url}/admin/login/"},
            allow_redirects=False,
            timeout=10,
        )
        return answer.status_code

    statuses = [login(name, "198.51.100.7", "wrong") for name in names[:8] for _ in range(4)]
    assert statuses[:19] == [200] * 19 and set(statuses[19:]) == {429}
    assert login(names[8], "198.51.100.7") == 429
    assert login(names[8], "198.51.100.8") == 302
    statuses = [login("vera", f"203.0.113.{n}", "wrong") for n in range(1, 7) for _ in range(4)]
    assert statuses[:19] == [200] * 19 and set(statuses[19:]) == {429}
    assert login("vera", "192.0.2.200") == 429
