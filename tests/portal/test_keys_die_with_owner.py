"""Issue 39 item 3: keys die with their owner. A portal user's customer API keys are
revoked in the transaction that deactivates the user, however it is done (the console's
action, Django's user form, the service, deleting the user), each revocation and the
deactivation audited; a key whose owner is inactive opens nothing even if its row was
never revoked (the second guard, at authentication)."""

from __future__ import annotations

import re

import pytest
from django.apps import apps as django_apps
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditEntry
from config.errors import NotFound
from portal import services
from portal.models import CustomerApiKey
from tests.portal.conftest import account_for

pytestmark = pytest.mark.django_db

FLEET = "/v1/customer/fleet"


def _fleet(key: str) -> int:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api.get(FLEET).status_code


def _portal_key(world, name: str = "fleet-sync") -> tuple[CustomerApiKey, str]:
    """A key made as the portal makes it: by the logged-in user, on the API keys page."""
    page = world.client().post("/portal/api-keys/", {"name": name})
    assert page.status_code == 200, page.content[:300]
    key = re.search(r'id="new-key-value">([^<]+)<', page.content.decode()).group(1)
    row = CustomerApiKey.objects.get(prefix=key.split("_")[1])
    assert row.owner == world.account
    return row, key


def _superuser_console() -> Client:
    root = get_user_model().objects.create_superuser("root", "root@example.com", "x")
    client = Client()
    client.force_login(root)
    return client


def _deactivate_in_console(world) -> None:
    answer = _superuser_console().post(
        "/admin/portal/customeruser/",
        {"action": "deactivate", "_selected_action": [world.account.pk]},
    )
    assert answer.status_code == 302


def _deactivate_in_user_form(world) -> None:
    """Django's own user form (Authentication → Users), the Active box cleared."""
    user = world.account.user
    answer = _superuser_console().post(
        f"/admin/auth/user/{user.pk}/change/",
        {
            "username": user.username,
            "email": user.email,
            "first_name": "",
            "last_name": "",
            "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
            "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
            "last_login_0": "",
            "last_login_1": "",
            # is_active left out: the box cleared
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]


def _deactivate_by_service(world) -> None:
    services.customer_user_deactivate(username=world.account.user.username)


def _delete_user(world) -> None:
    world.account.user.delete()


PATHS = {
    "console action": _deactivate_in_console,
    "django user form": _deactivate_in_user_form,
    "service": _deactivate_by_service,
    "user deleted": _delete_user,
}


def test_the_attack_a_deactivated_users_key_kept_reading_the_fleet(worlds):
    """The issue's attack re-run: before the fix the key answered 200 on the whole fleet
    after its owner was deactivated in the console, and no audit row was written."""
    alpha, _beta = worlds
    row, key = _portal_key(alpha)
    assert _fleet(key) == 200

    _deactivate_in_console(alpha)

    assert _fleet(key) == 403  # as any revoked key (missing: 401, revoked or wrong: 403)
    row.refresh_from_db()
    assert row.revoked_at is not None
    deactivated = AuditEntry.objects.get(action="customer_user.deactivate")
    assert (deactivated.actor, deactivated.actor_kind) == ("root", "superuser")
    assert deactivated.target == alpha.account.user.username
    assert deactivated.detail == {
        "customer_id": alpha.customer.pk,
        "keys_revoked": [row.prefix],
    }
    revoked = AuditEntry.objects.get(action="customer_key.revoke", target=row.prefix)
    assert revoked.actor == "root" and revoked.result == "ok"
    assert revoked.detail == {
        "name": "fleet-sync",
        "customer_id": alpha.customer.pk,
        "owner": alpha.account.user.username,
        "why": "owner deactivated",
    }


@pytest.mark.parametrize("path", list(PATHS))
def test_every_way_of_deactivating_revokes_exactly_the_owners_keys(worlds, path):
    alpha, beta = worlds
    owned = [_portal_key(alpha, name) for name in ("sync-1", "sync-2")]
    colleague = account_for(alpha.customer, "colleague@alpha.example.com")
    theirs, theirs_key = services.customer_key_create(
        customer_id=alpha.customer.pk, name="theirs", created_by="x", owner=colleague
    )
    assert all(_fleet(key) == 200 for _row, key in owned)

    PATHS[path](alpha)

    for row, key in owned:
        assert _fleet(key) == 403, path
        row.refresh_from_db()
        assert row.revoked_at is not None, path
    # Only the owner's: a colleague's key, the world's key made outside the portal (no
    # owner) and another customer's key work on.
    assert _fleet(theirs_key) == 200
    assert _fleet(alpha.key) == 200 and _fleet(beta.key) == 200
    revoked = AuditEntry.objects.filter(action="customer_key.revoke", result="ok")
    assert sorted(revoked.values_list("target", flat=True)) == sorted(r.prefix for r, _ in owned)
    deactivations = AuditEntry.objects.filter(action="customer_user.deactivate").count()
    assert deactivations == (0 if path == "user deleted" else 1)
    if path == "user deleted":
        assert set(revoked.values_list("detail__why", flat=True)) == {"owner deleted"}


def test_deactivating_twice_writes_nothing_more(worlds):
    alpha, _beta = worlds
    _portal_key(alpha)
    _deactivate_by_service(alpha)
    _deactivate_in_console(alpha)
    alpha.account.user.refresh_from_db()
    alpha.account.user.save()  # another save of the inactive user
    assert AuditEntry.objects.filter(action="customer_user.deactivate").count() == 1
    assert AuditEntry.objects.filter(action="customer_key.revoke").count() == 1


def test_a_deactivation_that_rolls_back_revokes_nothing(worlds):
    alpha, _beta = worlds
    row, key = _portal_key(alpha)
    with pytest.raises(RuntimeError), transaction.atomic():
        _deactivate_by_service(alpha)
        raise RuntimeError("the deactivation fails after the save")
    row.refresh_from_db()
    assert row.revoked_at is None and _fleet(key) == 200
    assert not AuditEntry.objects.filter(action__in=["customer_user.deactivate",
                                                      "customer_key.revoke"]).exists()  # fmt: skip


def test_an_inactive_owners_key_is_refused_even_if_never_revoked(worlds):
    """Data already in that state (a bulk update sends no signal): the second guard."""
    alpha, _beta = worlds
    row, key = _portal_key(alpha)
    get_user_model().objects.filter(pk=alpha.account.user.pk).update(is_active=False)
    row.refresh_from_db()
    assert row.revoked_at is None
    assert _fleet(key) == 403
    get_user_model().objects.filter(pk=alpha.account.user.pk).update(is_active=True)
    assert _fleet(key) == 200


def test_an_unknown_user_cannot_be_deactivated(worlds):
    with pytest.raises(NotFound):
        services.customer_user_deactivate(username="nobody@example.com")


def test_the_migration_gives_portal_made_keys_their_owner(worlds):
    """Keys made before owners existed: created_by names the portal user who made them."""
    migration = __import__(
        "portal.migrations.0002_key_owner_invitation_withdrawn", fromlist=["owners_from_creators"]
    )
    alpha, _beta = worlds
    row, _key = _portal_key(alpha)
    CustomerApiKey.objects.update(owner=None)
    migration.owners_from_creators(django_apps, None)
    row.refresh_from_db()
    assert row.owner == alpha.account
    # The world's key was created by "t", no portal user: it stays without an owner.
    assert CustomerApiKey.objects.get(prefix=alpha.key_prefix).owner is None
