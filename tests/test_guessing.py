"""Guessing is not free: console logins lock out per account and address (django-axes),
wrong X-Admin-Key requests are recorded and throttled per address."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from audit.models import AuditEntry

pytestmark = pytest.mark.django_db

GUESS = "guess-" + "x" * 30


@pytest.fixture
def operator():
    return User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")


def login(client, password, ip="198.51.100.7"):
    return client.post(
        "/admin/login/?next=/admin/",
        {"username": "ops", "password": password},
        REMOTE_ADDR=ip,
    )


def test_console_login_locks_out_after_five_wrong_passwords(client, operator, settings):
    statuses = [login(client, f"wrong-{n}").status_code for n in range(5)]
    assert statuses == [200] * 4 + [429]  # the form again with an error, then locked
    locked = login(client, "correct horse battery")
    assert locked.status_code == 429
    # Another address is not locked out of the account...
    assert login(client, "correct horse battery", ip="203.0.113.50").status_code == 302
    client.logout()
    # ...and an operator lifts the lockout.
    call_command("axes_reset", verbosity=0)
    assert login(client, "correct horse battery").status_code == 302


def test_wrong_admin_keys_are_recorded_then_throttled_per_address(device_api, admin_api, settings):
    settings.SVC_ADMIN_KEY_FAILURES = 3
    guesses = [
        device_api.get("/v1/admin/catalogue", HTTP_X_ADMIN_KEY=GUESS, REMOTE_ADDR="198.51.100.9")
        for _ in range(3)
    ]
    assert [r.status_code for r in guesses] == [403, 403, 403]
    # Three identical refusals: one row counting them (two if the minute turned).
    refused = AuditEntry.objects.filter(action="admin_key.refused")
    assert sum(refused.values_list("repeats", flat=True)) == 3 and refused.count() <= 2
    entry = refused.first()
    assert entry.ip == "198.51.100.9" and entry.target == "GET /v1/admin/catalogue"
    assert entry.result == "refused" and entry.status == 403
    assert GUESS not in str(entry.detail) + entry.message
    # Over the limit: 429 for this address, even with the right key.
    throttled = admin_api.get("/v1/admin/catalogue", REMOTE_ADDR="198.51.100.9")
    assert throttled.status_code == 429
    assert int(throttled["Retry-After"]) >= 1
    assert "too many wrong X-Admin-Key attempts" in throttled.json()["detail"]
    assert settings.SVC_ADMIN_KEY not in throttled.content.decode()
    # Others are unaffected.
    assert admin_api.get("/v1/admin/catalogue", REMOTE_ADDR="198.51.100.10").status_code == 200


def test_every_throttled_request_is_counted_in_one_entry_a_minute(device_api, settings):
    settings.SVC_ADMIN_KEY_FAILURES = 2
    for _ in range(2):
        device_api.get("/v1/admin/catalogue", HTTP_X_ADMIN_KEY=GUESS, REMOTE_ADDR="198.51.100.20")
    answers = [
        device_api.get("/v1/admin/catalogue", HTTP_X_ADMIN_KEY=GUESS, REMOTE_ADDR="198.51.100.20")
        for _ in range(25)
    ]
    assert {a.status_code for a in answers} == {429}
    throttled = AuditEntry.objects.filter(action="admin_key.throttled")
    assert throttled.count() <= 2  # one a minute (two if the minute turned meanwhile)
    assert sum(entry.repeats for entry in throttled) == 25
    entry = throttled.first()
    assert entry.ip == "198.51.100.20" and entry.result == "refused" and entry.status == 429
    assert GUESS not in str(entry.detail) + entry.message
    refused = AuditEntry.objects.filter(action="admin_key.refused")
    assert sum(refused.values_list("repeats", flat=True)) == 2
