"""Issue 39 items 3 and 7: operators list and revoke any customer's API key, and withdraw
a pending portal invitation, in the admin API and the console; each audited. Who may:
listing keys takes view_service, revoking a key or withdrawing an invitation
manage_customers (the operator role, as inviting and deactivating); the role matrix
(tests/operators/test_roles.py) holds every route for every role."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core import mail
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditEntry
from config.errors import NotFound
from operators.models import OperatorKey
from operators.services import operator_key_create, roles_ensure
from portal import services
from portal.models import CustomerApiKey, Invitation
from tests.portal.conftest import LINK_BASE, PASSWORD

pytestmark = pytest.mark.django_db


def _operator(role: str) -> APIClient:
    """A client with a key of ``role``, named ``<role>-key`` (made once per test)."""
    row = OperatorKey.objects.filter(name=f"{role}-key").first()
    if row is not None:
        return KEYS[row.prefix]
    _row, key = operator_key_create(name=f"{role}-key", roles=[role])
    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=key)
    KEYS[_row.prefix] = client
    return client


KEYS: dict[str, APIClient] = {}


def _fleet(key: str) -> int:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api.get("/v1/customer/fleet").status_code


def _owned_key(world, name: str = "fleet-sync"):
    return services.customer_key_create(
        customer_id=world.customer.pk, name=name, created_by="x", owner=world.account
    )


# --- the admin API: customer keys -----------------------------------------------------


def test_a_viewer_lists_every_customers_keys_without_their_secrets(worlds):
    alpha, beta = worlds
    row, key = _owned_key(alpha)
    viewer = _operator("viewer")
    every = viewer.get("/v1/admin/customer-keys")
    assert every.status_code == 200
    body = every.json()
    assert {k["prefix"] for k in body["keys"]} == {alpha.key_prefix, beta.key_prefix, row.prefix}
    assert body["count"] == 3
    assert row.digest not in every.content.decode() and key not in every.content.decode()
    mine = viewer.get("/v1/admin/customer-keys", {"customer_id": alpha.customer.pk}).json()
    shown = {k["prefix"]: k for k in mine["keys"]}
    assert set(shown) == {alpha.key_prefix, row.prefix}
    assert shown[row.prefix] == {
        "prefix": row.prefix,
        "name": "fleet-sync",
        "customer_id": alpha.customer.pk,
        "owner": alpha.account.user.username,
        "created_by": "x",
        "created_at": int(row.created_at.timestamp()),
        "last_used_at": 0,
        "revoked_at": 0,
        "active": True,
        "write": False,
    }
    assert shown[alpha.key_prefix]["owner"] == "t (no portal user)"
    unknown = viewer.get("/v1/admin/customer-keys", {"customer_id": "CUST-NOPE"})
    assert unknown.status_code == 404 and set(unknown.json()) == {"detail"}
    wrong = viewer.get("/v1/admin/customer-keys", {"state": "lost"})
    assert wrong.status_code == 400 and "state" in wrong.json()["detail"]


def test_an_operator_revokes_any_customers_key_at_once_and_it_is_audited(worlds):
    alpha, beta = worlds
    row, key = _owned_key(alpha)
    assert _fleet(key) == 200
    operator = _operator("operator")

    answer = operator.post(f"/v1/admin/customer-keys/{row.prefix}/revoke")

    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert (body["prefix"], body["active"], body["owner"]) == (
        row.prefix, False, alpha.account.user.username,
    )  # fmt: skip
    assert body["revoked_at"] > 0
    assert _fleet(key) == 403
    assert _fleet(alpha.key) == 200 and _fleet(beta.key) == 200  # only that one
    entry = AuditEntry.objects.get(action="customer_key.revoke", target=row.prefix)
    assert (entry.actor, entry.actor_kind, entry.result) == ("operator-key", "api_key", "ok")
    assert entry.detail == {
        "name": "fleet-sync",
        "customer_id": alpha.customer.pk,
        "owner": alpha.account.user.username,
    }
    # Again: no change, the first time kept.
    again = operator.post(f"/v1/admin/customer-keys/{row.prefix}/revoke")
    assert again.status_code == 200 and again.json()["revoked_at"] == body["revoked_at"]
    listed = operator.get("/v1/admin/customer-keys", {"state": "revoked"}).json()
    assert [k["prefix"] for k in listed["keys"]] == [row.prefix]
    missing = operator.post("/v1/admin/customer-keys/000000000000/revoke")
    assert missing.status_code == 404 and set(missing.json()) == {"detail"}


@pytest.mark.parametrize("role", ["viewer", "support", "finance", "key-admin"])
def test_roles_without_manage_customers_cannot_revoke_or_withdraw(worlds, role):
    alpha, _beta = worlds
    invitation, _link = services.invitation_create(
        customer_id=alpha.customer.pk, email="new@alpha.example.com", link_base=LINK_BASE
    )
    client = _operator(role)
    for path in (
        f"/v1/admin/customer-keys/{alpha.key_prefix}/revoke",
        f"/v1/admin/invitations/{invitation.pk}/withdraw",
    ):
        refused = client.post(path)
        assert refused.status_code == 403, (role, path)
        assert "'manage_customers'" in refused.json()["detail"]
    assert CustomerApiKey.objects.get(prefix=alpha.key_prefix).revoked_at is None
    assert Invitation.objects.get(pk=invitation.pk).state == "pending"
    assert _fleet(alpha.key) == 200


# --- the admin API: withdrawing invitations -------------------------------------------


def _secret(link: str) -> str:
    return link.rstrip("/").rsplit("/", 1)[1]


def _unnonced(content: bytes) -> str:
    """A page without what differs per answer (CSRF and CSP nonces)."""
    return re.sub(r'(nonce|value)="[^"]*"', "", content.decode())


def test_a_withdrawn_invitations_link_answers_as_an_unknown_one_and_never_accepts(worlds):
    alpha, _beta = worlds
    invitation, link = services.invitation_create(
        customer_id=alpha.customer.pk, email="li.wei@alpha.example.com", link_base=LINK_BASE
    )
    path = link.split("testserver", 1)[1]
    assert Client().get(path).status_code == 200  # pending: the password form

    answer = _operator("operator").post(f"/v1/admin/invitations/{invitation.pk}/withdraw")

    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert (body["invitation_id"], body["state"], body["withdrawn_by"]) == (
        invitation.pk, "withdrawn", "operator-key",
    )  # fmt: skip
    assert body["withdrawn_at"] > 0
    page = Client().get(path)
    unknown = Client().get("/portal/invitation/" + "x" * 43 + "/")
    assert page.status_code == unknown.status_code == 404
    assert _unnonced(page.content) == _unnonced(unknown.content)  # no detail leaks
    assert (
        "li.wei" not in page.content.decode() and alpha.customer.name not in page.content.decode()
    )
    posted = Client().post(path, {"password": PASSWORD, "confirm": PASSWORD})
    assert posted.status_code == 404
    assert not get_user_model().objects.filter(username="li.wei@alpha.example.com").exists()
    with pytest.raises(NotFound):
        services.invitation_accept(secret=_secret(link), password=PASSWORD)
    entry = AuditEntry.objects.get(action="customer_user.withdraw_invitation", result="ok")
    assert (entry.actor, entry.target) == ("operator-key", alpha.customer.pk)
    assert entry.detail == {"email": "li.wei@alpha.example.com", "invitation": invitation.pk}
    listing = _operator("viewer").get(f"/v1/admin/customers/{alpha.customer.pk}/users").json()
    (shown,) = [i for i in listing["invitations"] if i["invitation_id"] == invitation.pk]
    assert shown["state"] == "withdrawn"
    # Again: no change.
    again = _operator("operator").post(f"/v1/admin/invitations/{invitation.pk}/withdraw")
    assert again.status_code == 200 and again.json()["withdrawn_at"] == body["withdrawn_at"]


def test_an_accepted_invitation_cannot_be_withdrawn(worlds):
    alpha, _beta = worlds
    invitation = Invitation.objects.get(account=alpha.account)
    answer = _operator("operator").post(f"/v1/admin/invitations/{invitation.pk}/withdraw")
    assert answer.status_code == 409
    detail = answer.json()["detail"]
    assert "already accepted" in detail and "deactivate the portal user" in detail
    assert Invitation.objects.get(pk=invitation.pk).state == "accepted"
    entry = AuditEntry.objects.get(action="customer_user.withdraw_invitation")
    assert entry.result == "failed" and "already accepted" in entry.message


@pytest.mark.parametrize("invitation_id", ["999999", "NOPE-1", "1" * 30, "\u00b2", "\u0663"])
def test_an_unknown_invitation_is_404(db, invitation_id):
    answer = _operator("operator").post(f"/v1/admin/invitations/{invitation_id}/withdraw")
    assert answer.status_code == 404 and set(answer.json()) == {"detail"}


def test_an_invitation_withdrawn_while_its_form_is_open_is_not_accepted(worlds):
    """The form was opened before the withdrawal; the POST after it is refused."""
    alpha, _beta = worlds
    invitation, link = services.invitation_create(
        customer_id=alpha.customer.pk, email="late@alpha.example.com", link_base=LINK_BASE
    )
    path = link.split("testserver", 1)[1]
    client = Client()
    assert client.get(path).status_code == 200
    services.invitation_withdraw(invitation_id=invitation.pk, withdrawn_by="ops")
    assert client.post(path, {"password": PASSWORD, "confirm": PASSWORD}).status_code == 404
    assert not get_user_model().objects.filter(username="late@alpha.example.com").exists()


# --- the console ----------------------------------------------------------------------


def _console(role: str | None) -> tuple[Client, str]:
    roles_ensure()
    name = f"console-{role or 'root'}"
    if role is None:
        user = get_user_model().objects.create_superuser(name, f"{name}@example.com", "x")
    else:
        user = get_user_model().objects.create_user(name, password="x", is_staff=True)
        user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client, name


def test_the_console_lists_keys_and_an_operator_revokes_one_after_confirming(worlds):
    alpha, beta = worlds
    row, key = _owned_key(alpha)
    client, name = _console("operator")
    page = client.get("/admin/portal/customerapikey/")
    assert page.status_code == 200
    text = page.content.decode()
    columns = re.findall(r'<th scope="col" class="[^"]*column-(\w+)', text)
    assert columns == ["customer_shown", "owner_shown", "name", "prefix", "created_at",
                       "last_used_at", "revoked_at"]  # fmt: skip
    assert '<a href="/admin/portal/customerapikey/' in text  # the name links to the row
    assert row.prefix in text and alpha.account.user.username in text
    assert "t (no portal user)" in text and 'value="revoke_keys"' in text

    beta_row = CustomerApiKey.objects.get(prefix=beta.key_prefix)
    selected = {"action": "revoke_keys", "_selected_action": [row.pk, beta_row.pk]}
    confirm = client.post("/admin/portal/customerapikey/", selected)
    assert confirm.status_code == 200
    shown = confirm.content.decode()
    assert 'id="customer-key-rows"' in shown and row.prefix in shown and beta.key_prefix in shown
    assert CustomerApiKey.objects.filter(revoked_at__isnull=False).count() == 0  # not yet
    assert _fleet(key) == 200

    done = client.post("/admin/portal/customerapikey/", {**selected, "apply": "1"})
    assert done.status_code == 302
    assert _fleet(key) == 403 and _fleet(beta.key) == 403 and _fleet(alpha.key) == 200
    entries = AuditEntry.objects.filter(action="customer_key.revoke", result="ok")
    assert {(e.actor, e.actor_kind, e.target, e.detail["customer_id"]) for e in entries} == {
        (name, "staff", row.prefix, alpha.customer.pk),
        (name, "staff", beta.key_prefix, beta.customer.pk),
    }


def test_a_viewer_sees_the_keys_but_cannot_revoke_them_in_the_console(worlds):
    alpha, _beta = worlds
    client, _name = _console("viewer")
    page = client.get("/admin/portal/customerapikey/")
    assert page.status_code == 200 and alpha.key_prefix in page.content.decode()
    assert 'value="revoke_keys"' not in page.content.decode()
    pk = CustomerApiKey.objects.get(prefix=alpha.key_prefix).pk
    client.post(
        "/admin/portal/customerapikey/",
        {"action": "revoke_keys", "_selected_action": [pk], "apply": "1"},
    )
    assert CustomerApiKey.objects.get(pk=pk).revoked_at is None and _fleet(alpha.key) == 200


def test_the_console_withdraws_a_pending_invitation_after_confirming(worlds):
    alpha, _beta = worlds
    mail.outbox.clear()
    pending, link = services.invitation_create(
        customer_id=alpha.customer.pk, email="pending@alpha.example.com", link_base=LINK_BASE
    )
    accepted = Invitation.objects.get(account=alpha.account)
    client, name = _console("operator")
    selected = {"action": "withdraw", "_selected_action": [pending.pk, accepted.pk]}
    confirm = client.post("/admin/portal/invitation/", selected)
    assert confirm.status_code == 200
    shown = confirm.content.decode()
    assert 'id="withdraw-rows"' in shown and "pending@alpha.example.com" in shown
    assert "accepted: not withdrawn" in shown
    done = client.post("/admin/portal/invitation/", {**selected, "apply": "1"}, follow=True)
    text = done.content.decode()
    assert "Withdrew 1 invitation" in text and "already accepted" in text
    pending.refresh_from_db()
    assert (pending.state, pending.withdrawn_by) == ("withdrawn", name)
    assert Invitation.objects.get(pk=accepted.pk).state == "accepted"
    assert Client().get(link.split("testserver", 1)[1]).status_code == 404
    results = AuditEntry.objects.filter(action="customer_user.withdraw_invitation")
    assert sorted(results.values_list("result", flat=True)) == ["failed", "ok"]


def test_a_second_account_of_the_same_customer_keeps_its_invitation_link_apart(worlds):
    """Withdrawing one invitation leaves another of the same customer pending."""
    alpha, _beta = worlds
    one, _ = services.invitation_create(
        customer_id=alpha.customer.pk, email="one@alpha.example.com", link_base=LINK_BASE
    )
    two, link = services.invitation_create(
        customer_id=alpha.customer.pk, email="two@alpha.example.com", link_base=LINK_BASE
    )
    services.invitation_withdraw(invitation_id=one.pk, withdrawn_by="ops")
    account = services.invitation_accept(secret=_secret(link), password=PASSWORD)
    assert account.user.username == "two@alpha.example.com"
    assert Invitation.objects.get(pk=one.pk).state == "withdrawn"
