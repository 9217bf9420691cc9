"""Issue 39 item 2: no escalation. A principal grants (operator keys, users' groups and
permissions, groups' permissions) only roles it holds itself. Every grant path is tried
for every role: the console's key form, the admin API, ``create_admin_key``, group edits
and user edits.

The issue's attack: a key-admin created a key with the operator and finance roles (302),
and that key issued (201) and revoked (200) licences."""

from __future__ import annotations

import io
import itertools

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from operators.models import OperatorKey
from operators.roles import APP_LABEL, CAPABILITIES, ROLES, capabilities_of
from operators.services import operator_key_create, roles_ensure
from tests.operators.test_roles import MATRIX

pytestmark = pytest.mark.django_db

PAIRS = list(itertools.product(ROLES, ROLES))


@pytest.fixture(autouse=True)
def _one_factor(settings):
    # The console's grant forms are the subject here, not the second factor.
    settings.SVC_REQUIRE_2FA = False


def _console_user(name: str, role: str | None, *extra_permissions: str):
    roles_ensure()
    user = get_user_model().objects.create_user(name, password="x" * 20, is_staff=True)
    if role:
        user.groups.add(Group.objects.get(name=role))
    for permission in extra_permissions:
        app, codename = permission.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app, codename=codename)
        )
    client = Client()
    client.force_login(user)
    return user, client


def _may_grant(granter: str, role: str) -> bool:
    return capabilities_of([role]) <= capabilities_of([granter])


@pytest.mark.parametrize(("granter", "role"), PAIRS)
def test_console_key_form_grants_only_roles_the_user_holds(granter, role):
    _, client = _console_user("gina", granter)
    response = client.post(
        "/admin/operators/operatorkey/add/", {"name": f"made-{role}", "roles": [role]}
    )
    created = OperatorKey.objects.filter(name=f"made-{role}").exists()
    if "manage_operator_access" not in capabilities_of([granter]):
        assert response.status_code == 403 and not created
    elif _may_grant(granter, role):
        assert response.status_code == 302 and created, response.content[:500]
    else:
        assert response.status_code == 200 and not created
        assert "you may grant only roles you hold" in response.content.decode()


def test_a_key_admin_key_made_in_the_console_cannot_issue_or_revoke(customer):
    """The issue's attack, end to end: refused at the form; a key the key-admin may make
    (viewer, key-admin) cannot issue or revoke."""
    _, client = _console_user("kai", "key-admin")
    response = client.post(
        "/admin/operators/operatorkey/add/", {"name": "sneaky", "roles": ["operator", "finance"]}
    )
    assert response.status_code == 200
    assert "operator, finance would give the key" in response.content.decode()
    assert not OperatorKey.objects.filter(name="sneaky").exists()
    for role in ("viewer", "key-admin"):
        client.post("/admin/operators/operatorkey/add/", {"name": role, "roles": [role]})
        key = OperatorKey.objects.get(name=role)
        assert key.roles == [role]
        _, secret = operator_key_create(name=f"{role}-api", roles=[role])
        api = APIClient()
        api.credentials(HTTP_X_ADMIN_KEY=secret)
        body = {"customer_id": customer.pk, "sku": "DETECT-STD", "device_id": "cam-1"}
        assert api.post("/v1/admin/licenses", body, format="json").status_code == 403
        revoke = {"license_ids": ["LIC-NOPE"], "reason": "x"}
        assert api.post("/v1/admin/revoke", revoke, format="json").status_code == 403


@pytest.mark.parametrize("role", list(ROLES))
def test_the_admin_api_grants_nothing(role):
    """No admin API method creates keys or grants roles: none needs
    ``manage_operator_access``, and the routes one might try do not exist, for a key of
    every role (and the bootstrap key)."""
    assert "manage_operator_access" not in MATRIX.values()
    _, secret = operator_key_create(name=f"key-{role}", roles=[role])
    api = APIClient()
    api.credentials(HTTP_X_ADMIN_KEY=secret)
    before = OperatorKey.objects.count()
    for path in ("/v1/admin/keys", "/v1/admin/operator-keys", "/v1/admin/roles",
                 "/v1/admin/users", "/v1/admin/groups"):  # fmt: skip
        body = {"name": "x", "roles": list(ROLES)}
        assert api.post(path, body, format="json").status_code == 404, path
    assert OperatorKey.objects.count() == before


@pytest.mark.parametrize("role", list(ROLES))
def test_create_admin_key_is_the_host_administrators_who_holds_every_role(role):
    call_command("create_admin_key", f"cli-{role}", "--scope", role,
                 stdout=io.StringIO(), stderr=io.StringIO())  # fmt: skip
    assert OperatorKey.objects.get(name=f"cli-{role}").roles == [role]


@pytest.mark.parametrize(("granter", "role"), PAIRS)
def test_the_service_refuses_a_granter_without_the_role(granter, role):
    from config.errors import Forbidden

    held = capabilities_of([granter])
    if _may_grant(granter, role):
        row, _ = operator_key_create(name="k", roles=[role], granter=held)
        assert row.roles == [role]
    else:
        with pytest.raises(Forbidden, match="you may grant only roles you hold"):
            operator_key_create(name="k", roles=[role], granter=held)
        assert not OperatorKey.objects.exists()


def _capability(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label=APP_LABEL, codename=codename)


@pytest.mark.parametrize(("granter", "capability"), itertools.product(ROLES, CAPABILITIES))
def test_group_edits_add_only_permissions_the_user_holds(granter, capability):
    """A user with a role and Django's ``auth.change_group`` adds a capability to an empty
    group: taken only when its role holds it."""
    _, client = _console_user("gus", granter, "auth.change_group", "auth.view_group")
    group = Group.objects.create(name="custom")
    response = client.post(
        f"/admin/auth/group/{group.pk}/change/",
        {"name": "custom", "permissions": [_capability(capability).pk]},
    )
    held = capability in capabilities_of([granter])
    assert group.permissions.filter(codename=capability).exists() is held
    assert response.status_code == (302 if held else 200)


@pytest.mark.parametrize(("granter", "role"), PAIRS)
def test_group_edits_leave_alone_a_role_holding_more(granter, role):
    """A role group holding a capability the editor lacks cannot be changed by it."""
    _, client = _console_user("gus", granter, "auth.change_group", "auth.view_group")
    group = Group.objects.get(name=role)
    before = set(group.permissions.values_list("pk", flat=True))
    mine = list(Permission.objects.filter(group__name=granter).values_list("pk", flat=True))
    response = client.post(
        f"/admin/auth/group/{group.pk}/change/", {"name": role, "permissions": mine}
    )
    if _may_grant(granter, role):
        assert response.status_code == 302
    else:
        assert response.status_code == 403
        assert set(group.permissions.values_list("pk", flat=True)) == before


def _user_form(user, **changes) -> dict:
    data = {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on",
        "is_staff": "on",
        "groups": [g.pk for g in user.groups.all()],
        "user_permissions": [p.pk for p in user.user_permissions.all()],
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-01-01",
        "initial-date_joined_1": "00:00:00",
    }
    data.update(changes)
    return data


@pytest.mark.parametrize(("granter", "role"), PAIRS)
def test_user_edits_grant_only_roles_the_user_holds(granter, role):
    """A user with a role and Django's ``auth.change_user`` puts another user (holding
    nothing) into a role: taken only when its own role holds every permission of it;
    superuser status is never its to give."""
    editor, client = _console_user("ed", granter, "auth.change_user", "auth.view_user")
    target, _ = _console_user("tom", None)
    response = client.post(
        f"/admin/auth/user/{target.pk}/change/",
        _user_form(target, groups=[Group.objects.get(name=role).pk], is_superuser="on"),
    )
    target.refresh_from_db()
    granted = target.groups.filter(name=role).exists()
    assert not target.is_superuser
    if _may_grant(granter, role):
        assert response.status_code == 302 and granted, response.content[:800]
    else:
        assert response.status_code == 200 and not granted
    # Nor to itself.
    client.post(
        f"/admin/auth/user/{editor.pk}/change/",
        _user_form(editor, groups=[g.pk for g in Group.objects.all()], is_superuser="on"),
    )
    editor.refresh_from_db()
    assert not editor.is_superuser
    assert set(editor.groups.values_list("name", flat=True)) <= {
        r for r in ROLES if _may_grant(granter, r)
    }


@pytest.mark.parametrize("granter", list(ROLES))
def test_user_edits_leave_alone_users_holding_more(granter):
    """A superuser, or a user with a role the editor lacks, is not the editor's to change
    (no password of theirs to set, no group to take away)."""
    _, client = _console_user("ed", granter, "auth.change_user", "auth.view_user")
    boss = get_user_model().objects.create_superuser("boss", "b@example.com", "y" * 20)
    for target in (boss,):
        page = client.get(f"/admin/auth/user/{target.pk}/password/")
        assert page.status_code == 403
        answer = client.post(
            f"/admin/auth/user/{target.pk}/password/",
            {"password1": "taken over 12345", "password2": "taken over 12345"},
        )
        assert answer.status_code == 403
    boss.refresh_from_db()
    assert boss.check_password("y" * 20)
    for role in ROLES:
        other, _ = _console_user(f"u-{role}", role)
        answer = client.get(f"/admin/auth/user/{other.pk}/password/")
        assert answer.status_code == (200 if _may_grant(granter, role) else 403), role
