"""The console's index offers each user only what the user may open (issue 39 item 7):
every link of its content and its "Recent actions" panel answers 200 for a user of each
role (operators.roles) and for a superuser, none answers 403; a staff user with no role
is offered no link at all."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from operators.roles import ROLES
from tests.operators.test_console_roles import _user

# The index's own parts: Django's content (the console's links, the app list, the
# internal tables) and the sidebar (links into the audit log). Not the header's.
PARTS = re.compile(r'<div id="content-main">[\s\S]*\Z')
LINK = re.compile(r'<a href="(/[^"]*)"')


def _links(client: Client) -> list[str]:
    response = client.get("/admin/")
    assert response.status_code == 200
    page = response.content.decode()
    found = PARTS.search(page)
    assert found, "the index has no content"
    return sorted({href.replace("&amp;", "&") for href in LINK.findall(found[0])})


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_opens_every_link_of_the_index(db, django_user_model, role):
    client = Client()
    client.force_login(_user(django_user_model, role))
    links = _links(client)
    assert links, f"{role}: the index offers nothing"
    answers = {href: client.get(href).status_code for href in links}
    refused = {href: code for href, code in answers.items() if code != 200}
    assert not refused, f"{role}: links that do not answer 200: {refused}"


def test_a_superuser_opens_every_link_and_finds_the_refusals(db, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "x")
    client = Client()
    client.force_login(user)
    links = _links(client)
    assert {"/admin/dashboard/", "/admin/licensing/batch/add/"} <= set(links)
    assert "/admin/audit/auditentry/?result__exact=refused" in links
    assert "/admin/audit/auditentry/?result__exact=failed" in links
    assert all(client.get(href).status_code == 200 for href in links)
    page = client.get("/admin/").content.decode()
    assert "Refused API keys" not in page
    assert "Refusals: wrong or unknown keys, 401/403/429 answers, lockouts, wrong codes" in page


def test_only_the_roles_that_issue_see_issue_batch(db, django_user_model):
    for role in sorted(ROLES):
        client = Client()
        client.force_login(_user(django_user_model, role))
        offered = "/admin/licensing/batch/add/" in _links(client)
        assert offered == ("issue_licences" in ROLES[role]), role


def test_a_staff_user_without_a_role_is_offered_no_link(db, django_user_model):
    user = django_user_model.objects.create_user("nobody", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    assert _links(client) == []
    page = client.get("/admin/").content.decode()
    assert 'id="svc-console-links"' not in page and 'id="svc-audit-links"' not in page
