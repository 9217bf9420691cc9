"""The audit log records every operator action, from whichever surface, with who, when,
from where, what and the result; named operator keys are stored hashed."""

from __future__ import annotations

import hashlib
import hmac
import io

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from audit.context import acting_from_cli
from audit.models import AuditEntry
from config.errors import ServiceError
from customers.services import customer_create
from licensing.models import License
from licensing.services import license_issue
from operators.models import OperatorKey

pytestmark = pytest.mark.django_db


def _only(action: str) -> AuditEntry:
    entries = list(AuditEntry.objects.filter(action=action))
    assert len(entries) == 1, entries
    return entries[0]


def _create_key(name: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "create_admin_key", name, "--scope", "operator,finance,key-admin", stdout=out, stderr=err
    )
    assert "only time" in err.getvalue()
    return out.getvalue().strip()


def test_api_customer_create_is_recorded_with_key_name_ip_and_result(admin_api):
    response = admin_api.post(
        "/v1/admin/customers", {"name": "Acme", "kind": "oem", "id": "ACME"}, format="json"
    )
    assert response.status_code == 201
    entry = _only("customer.create")
    assert (entry.actor, entry.actor_kind, entry.ip) == ("bootstrap", "api_key", "127.0.0.1")
    assert (entry.target, entry.result, entry.message) == ("CUST-ACME", "ok", "")
    assert entry.detail["name"] == "Acme"
    assert entry.at is not None


def test_failed_batch_issue_is_recorded_with_the_servers_detail(admin_api):
    response = admin_api.post(
        "/v1/admin/batches",
        {"customer_id": "CUST-NOBODY", "sku": "VISION-PRO", "units": 5},
        format="json",
    )
    assert response.status_code == 404
    entry = _only("batch.issue")
    assert entry.result == "failed"
    assert entry.target == "CUST-NOBODY"
    assert entry.message == response.json()["detail"]


def test_license_issue_and_revoke_are_recorded(admin_api, customer):
    issued = admin_api.post(
        "/v1/admin/licenses",
        {"customer_id": customer.id, "sku": "DETECT-STD", "device_id": "cam-1"},
        format="json",
    ).json()
    admin_api.post(
        "/v1/admin/revoke",
        {"license_id": issued["license_id"], "reason": "stolen"},
        format="json",
    )
    assert _only("license.issue").target == issued["license_id"]
    revoke = _only("license.revoke")
    assert (revoke.target, revoke.result, revoke.detail["reason"]) == (
        issued["license_id"],
        "ok",
        "stolen",
    )


def test_batch_issue_through_the_api_is_recorded(admin_api, customer):
    batch = admin_api.post(
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 3},
        format="json",
    ).json()
    entry = _only("batch.issue")
    assert (entry.target, entry.result, entry.detail["units"]) == (batch["batch_id"], "ok", 3)


def test_invoice_issue_is_recorded(customer, make_batch):
    from billing import services

    assert hasattr(services.invoice_issue, "audit_action"), "invoice_issue is not @audited"
    with acting_from_cli(), pytest.raises(ServiceError, match="owes nothing"):
        services.invoice_issue(customer_id=customer.id, period_days=30)
    entry = _only("invoice.issue")
    assert (entry.result, entry.target, entry.actor_kind) == ("failed", customer.id, "cli")


def test_service_called_from_a_command_records_the_cli_user(customer):
    with acting_from_cli():
        lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-9")
    entry = _only("license.issue")
    assert entry.actor_kind == "cli"
    assert "@" in entry.actor  # user@host
    assert entry.target == lic.id


def test_service_without_a_surface_is_recorded_as_system():
    customer_create(name="Direct", kind="oem")
    assert _only("customer.create").actor_kind == "system"


def test_create_admin_key_prints_the_key_once_and_stores_only_a_keyed_hash(customer):
    key = _create_key("alice")
    row = OperatorKey.objects.get(name="alice")
    expected = hmac.new(
        settings.SECRET_KEY.encode(), b"operator-key:" + key.encode(), hashlib.sha256
    ).hexdigest()
    assert row.digest == expected
    assert key not in {row.name, row.prefix, row.digest, row.created_by}
    assert key.split("_")[1] == row.prefix
    assert _only("operator_key.create").target == "alice"

    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=key)
    response = client.post(
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 2},
        format="json",
    )
    assert response.status_code == 201
    entry = _only("batch.issue")
    assert (entry.actor, entry.actor_kind) == ("alice", "api_key")


def test_a_wrong_key_with_a_valid_prefix_is_refused(customer):
    key = _create_key("bob")
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=forged)
    assert client.get("/v1/admin/catalogue").status_code == 403


def test_revoked_operator_key_is_refused_and_the_bootstrap_key_still_works(admin_api):
    key = _create_key("carol")
    call_command("create_admin_key", "carol", "--revoke", stdout=io.StringIO())
    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=key)
    response = client.get("/v1/admin/catalogue")
    assert response.status_code == 403
    assert response.json() == {"detail": "X-Admin-Key is not valid"}
    assert admin_api.get("/v1/admin/catalogue").status_code == 200
    assert _only("operator_key.revoke").actor_kind == "cli"


def test_duplicate_key_name_is_refused():
    _create_key("dave")
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_admin_key", "dave", "--scope", "viewer", stdout=io.StringIO())
    assert _only_failed("operator_key.create")


def _only_failed(action: str) -> AuditEntry:
    return AuditEntry.objects.get(action=action, result="failed")


def test_named_keys_work_without_a_bootstrap_key(settings):
    key = _create_key("erin")
    settings.SVC_ADMIN_KEY = ""
    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=key)
    assert client.get("/v1/admin/catalogue").status_code == 200


def test_admin_api_is_disabled_without_any_key(settings):
    settings.SVC_ADMIN_KEY = ""
    response = APIClient().get("/v1/admin/catalogue", HTTP_X_ADMIN_KEY="anything")
    assert response.status_code == 503


def test_failed_action_keeps_its_entry_while_its_writes_roll_back(admin_api, customer):
    before = License.objects.count()
    response = admin_api.post(
        "/v1/admin/licenses",
        {"customer_id": customer.id, "sku": "NOPE", "device_id": "cam-1"},
        format="json",
    )
    assert response.status_code == 400
    assert License.objects.count() == before
    assert _only("license.issue").result == "failed"
