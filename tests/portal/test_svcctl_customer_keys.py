"""svcctl against a live server (issue 39 items 3 and 7): customer-keys lists customers'
keys, revoke-customer-key revokes one at once, withdraw-invitation withdraws a pending
invitation and refuses (exit 1, the server's detail) an accepted one; each audited as
the operator key that ran it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from audit.models import AuditEntry
from customers.services import customer_create
from operators.services import operator_key_create
from portal import services
from portal.models import CustomerApiKey, Invitation
from tests.operators.test_svcctl import svcctl
from tests.portal.conftest import LINK_BASE, account_for


def _fleet(url: str, key: str) -> int:
    request = urllib.request.Request(
        f"{url}/v1/customer/fleet", headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_svcctl_lists_and_revokes_customer_keys_and_withdraws_invitations(
    live_service, transactional_db
):
    customer = customer_create(name="Nordlicht Kameras", kind="oem")
    other = customer_create(name="Another customer", kind="oem")
    account = account_for(customer, "li.wei@nordlicht.example")
    row, key = services.customer_key_create(
        customer_id=customer.pk, name="fleet-sync", created_by="li.wei", owner=account
    )
    _other_row, other_key = services.customer_key_create(
        customer_id=other.pk, name="erp", created_by="ops"
    )
    pending, _link = services.invitation_create(
        customer_id=customer.pk, email="new@nordlicht.example", link_base=LINK_BASE
    )
    _op, operator = operator_key_create(name="ops-alice", roles=["operator"])
    _vw, viewer = operator_key_create(name="ops-viewer", roles=["viewer"])
    online = {"SVC_URL": live_service.url, "SVC_ADMIN_KEY": operator}
    assert _fleet(live_service.url, key) == 200

    listed = svcctl("customer-keys", customer.pk, env=online)
    assert listed.returncode == 0, listed.stderr
    assert row.prefix in listed.stdout and "li.wei@nordlicht.example" in listed.stdout
    (line,) = [line for line in listed.stdout.splitlines() if row.prefix in line]
    assert "fleet-sync" in line and line.split()[-1] == "active"
    assert "never" not in line  # used once above: the last use is shown
    assert _other_row.prefix not in listed.stdout
    every = json.loads(svcctl("customer-keys", "--json", env=online).stdout)
    assert {k["prefix"] for k in every["keys"]} == {row.prefix, _other_row.prefix}

    refused = svcctl("revoke-customer-key", row.prefix, env={**online, "SVC_ADMIN_KEY": viewer})
    assert refused.returncode == 1 and "'manage_customers'" in refused.stderr
    assert _fleet(live_service.url, key) == 200

    revoked = svcctl("revoke-customer-key", row.prefix, env=online)
    assert revoked.returncode == 0, revoked.stderr
    assert "fleet-sync" in revoked.stdout and customer.pk in revoked.stdout
    assert _fleet(live_service.url, key) == 403
    assert _fleet(live_service.url, other_key) == 200
    assert CustomerApiKey.objects.get(pk=row.pk).revoked_at is not None
    only_active = svcctl("customer-keys", customer.pk, env=online)
    assert row.prefix not in only_active.stdout
    assert row.prefix in svcctl("customer-keys", customer.pk, "--all", env=online).stdout
    missing = svcctl("revoke-customer-key", "000000000000", env=online)
    assert missing.returncode == 1 and "no API key" in missing.stderr

    users = svcctl("portal-users", customer.pk, env=online)
    (line,) = [line for line in users.stdout.splitlines() if "new@nordlicht.example" in line]
    assert line.split()[-3:] == ["invitation", "pending", str(pending.pk)]
    withdrawn = svcctl("withdraw-invitation", str(pending.pk), env=online)
    assert withdrawn.returncode == 0, withdrawn.stderr
    assert "new@nordlicht.example" in withdrawn.stdout
    assert Invitation.objects.get(pk=pending.pk).state == "withdrawn"
    accepted = Invitation.objects.get(account=account)
    again = svcctl("withdraw-invitation", str(accepted.pk), env=online)
    assert again.returncode == 1 and "already accepted" in again.stderr

    actors = AuditEntry.objects.filter(
        action__in=["customer_key.revoke", "customer_user.withdraw_invitation"], result="ok"
    ).values_list("action", "actor", "target")
    assert set(actors) == {
        ("customer_key.revoke", "ops-alice", row.prefix),
        ("customer_user.withdraw_invitation", "ops-alice", customer.pk),
    }
