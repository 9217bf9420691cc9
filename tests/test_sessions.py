"""Console and portal sessions end when idle and when old (issue 39 item 7,
config.sessions): idle past SVC_SESSION_IDLE_SECONDS, logged out (the next page is the
login page); a request now and then keeps a session alive; SVC_SESSION_MAX_SECONDS after
signing in it ends however busy it is. The server's clock is moved (server_clock), never
waited for."""

from __future__ import annotations

import http.cookiejar
import urllib.error
import urllib.parse
import urllib.request

import pytest
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.test import Client

from config import sessions
from customers.services import customer_create
from tests.operators.test_browser import PASSWORD
from tests.portal.conftest import account_for
from tests.test_settings_validation import check

IDLE = 1800
LIFETIME = 12 * 3600


@pytest.fixture
def console(db, django_user_model):
    user = django_user_model.objects.create_superuser("operator", "ops@example.com", "x")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def portal(db):
    customer = customer_create(name="Hafen Kameras GmbH", kind="oem")
    client = Client()
    client.force_login(account_for(customer, "ops@hafen.example").user)
    return client


SITES = {
    "console": ("/admin/", "/admin/login/?next=/admin/"),
    "portal": ("/portal/", "/portal/login/?next=%2Fportal%2F"),
}


def _signed_in(client: Client, site: str) -> bool:
    page, login = SITES[site]
    response = client.get(page)
    if response.status_code == 302:
        assert response["Location"] == login
        return False
    assert response.status_code == 200, response.status_code
    return True


def test_the_production_defaults():
    assert settings.SVC_SESSION_IDLE_SECONDS == IDLE
    assert settings.SVC_SESSION_MAX_SECONDS == LIFETIME
    assert settings.SESSION_COOKIE_AGE == LIFETIME  # was Django's 14 days


@pytest.mark.parametrize("site", sorted(SITES))
def test_an_idle_session_is_logged_out(site, request, server_clock):
    client = request.getfixturevalue(site)
    assert _signed_in(client, site)
    server_clock(IDLE - 60)
    assert _signed_in(client, site)  # 29 minutes idle: still in, and that was activity
    server_clock(2 * IDLE - 120)
    assert _signed_in(client, site)  # another 29 minutes
    server_clock(3 * IDLE)  # 31 minutes and more without a request
    assert not _signed_in(client, site)
    assert SESSION_KEY not in client.session
    assert not _signed_in(client, site)  # and it stays out


@pytest.mark.parametrize("site", sorted(SITES))
def test_activity_keeps_a_session_until_its_lifetime_ends_it(site, request, server_clock):
    client = request.getfixturevalue(site)
    assert _signed_in(client, site)
    moment = 0
    while moment + 1500 < LIFETIME:
        moment += 1500  # a request every 25 minutes
        server_clock(moment)
        assert _signed_in(client, site), f"logged out {moment} s in"
    server_clock(LIFETIME + 1)
    assert not _signed_in(client, site)


def test_a_new_login_starts_a_new_lifetime(console, server_clock, django_user_model):
    assert _signed_in(console, "console")
    server_clock(LIFETIME + 1)
    assert not _signed_in(console, "console")
    console.force_login(django_user_model.objects.get(username="operator"))
    assert _signed_in(console, "console")
    server_clock(LIFETIME + 1 + IDLE - 60)
    assert _signed_in(console, "console")


def test_the_session_records_its_start_and_last_request(console, server_clock):
    assert _signed_in(console, "console")
    started = console.session[sessions.STARTED]
    assert console.session[sessions.SEEN] == started
    server_clock(5)  # within the touch interval: not written again
    assert _signed_in(console, "console")
    assert console.session[sessions.SEEN] == started
    server_clock(600)
    assert _signed_in(console, "console")
    assert console.session[sessions.SEEN] == pytest.approx(started + 600, abs=5)
    assert console.session[sessions.STARTED] == started


def test_the_api_keeps_no_session(console, server_clock):
    console.get("/admin/")
    server_clock(LIFETIME + 1)
    console.get("/healthz")
    assert SESSION_KEY in console.session  # not looked at: no session on the API


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"SVC_SESSION_IDLE_SECONDS": "half an hour"}, "SVC_SESSION_IDLE_SECONDS must be"),
        ({"SVC_SESSION_IDLE_SECONDS": "10"}, "a whole number from 60 to"),
        ({"SVC_SESSION_MAX_SECONDS": "0"}, "SVC_SESSION_MAX_SECONDS must be"),
        (
            {"SVC_SESSION_IDLE_SECONDS": "7200", "SVC_SESSION_MAX_SECONDS": "3600"},
            "must not exceed SVC_SESSION_MAX_SECONDS",
        ),
    ],
)
def test_a_malformed_session_setting_stops_start_up(variables, says):
    result = check(**variables)
    assert result.returncode != 0
    assert says in result.stderr


def test_shorter_limits_start():
    result = check(SVC_SESSION_IDLE_SECONDS="300", SVC_SESSION_MAX_SECONDS="3600")
    assert result.returncode == 0, result.stderr


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.mark.live
def test_a_live_server_ends_an_idle_console_session(moved_service, server_clock, django_user_model):
    """gunicorn with the production defaults, its clock following server_clock: a real
    login through the form, a page 29 minutes later, none for 31 minutes, the login page."""
    django_user_model.objects.create_superuser("operator", "ops@example.com", PASSWORD)
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), _NoRedirect)
    url = moved_service.url

    def status(path: str, data: bytes | None = None, headers: dict | None = None):
        request = urllib.request.Request(f"{url}{path}", data=data, headers=headers or {})
        try:
            with opener.open(request, timeout=10) as answer:
                return answer.status, answer.headers.get("Location", "")
        except urllib.error.HTTPError as exc:  # 302 without following
            return exc.code, exc.headers.get("Location", "")

    assert status("/admin/login/")[0] == 200
    token = next(c.value for c in jar if c.name == "csrftoken")
    form = urllib.parse.urlencode(
        {"username": "operator", "password": PASSWORD, "csrfmiddlewaretoken": token}
    ).encode()
    referer = {"Referer": f"{url}/admin/login/"}
    assert status("/admin/login/?next=/admin/", form, referer) == (302, "/admin/")
    assert status("/admin/")[0] == 200
    server_clock(IDLE - 60)
    assert status("/admin/")[0] == 200
    server_clock(2 * IDLE + 60)
    assert status("/admin/") == (302, "/admin/login/?next=/admin/")
