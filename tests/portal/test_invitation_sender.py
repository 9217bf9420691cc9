"""An invitation e-mail names the person who invited (issue 41): it said "bootstrap
invited you" -- the operator API key's name read as a person's. A console user is named
by their full name; an API key, only when no person is known, as "An operator (key ...)"."""

from __future__ import annotations

import pytest
from django.core import mail

pytestmark = pytest.mark.django_db


def test_an_invitation_by_an_operator_key_says_an_operator_and_names_the_key(admin_api, customer):
    answer = admin_api.post(
        f"/v1/admin/customers/{customer.pk}/users", {"email": "ana@example.com"}, format="json"
    )
    assert answer.status_code == 201, answer.json()
    (message,) = mail.outbox
    first = message.body.split("\n\n")[1]
    assert first.startswith("An operator (key bootstrap) invited you to the licensing portal")
    assert "bootstrap invited you" not in message.body


def test_an_invitation_from_the_console_names_the_person(admin_client, admin_user, customer):
    admin_user.first_name, admin_user.last_name = "Marta", "Ilić"
    admin_user.save()
    page = admin_client.post(
        "/admin/portal/invitation/add/",
        {"customer": customer.pk, "email": "bo@example.com", "name": "Bo"},
    )
    assert page.status_code == 302, page.content.decode()[:2000]
    (message,) = mail.outbox
    assert message.body.startswith("Hello Bo,\n\nMarta Ilić invited you to the licensing portal")
    assert admin_user.get_username() + " invited" not in message.body
