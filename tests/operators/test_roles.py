"""Who may do what (issue 28): one table, MATRIX, decides the capability of every admin
API method; every role's key is tried on every row. An endpoint without a row fails
here: adding one means deciding who may call it."""

from __future__ import annotations

import datetime as dt
import io
import re

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import get_resolver
from rest_framework.test import APIClient
from rest_framework.views import APIView

from config import clock
from config.api.views import DeviceApi
from operators.models import OperatorKey
from operators.permissions import IsOperator, handler_of, required_capability
from operators.roles import CAPABILITIES, ROLES, capabilities_of
from operators.selectors import shared_key_warning
from operators.services import operator_key_create, operator_key_revoke

# (route, method) -> the capability it needs. The decision lives here, once.
MATRIX = {
    # The demo history (issue 43), development servers only: invoices, as finance issues.
    ("v1/admin/demo", "POST"): "manage_billing",
    ("metrics", "GET"): "view_service",
    ("v1/admin/catalogue", "GET"): "view_service",
    ("v1/admin/batches", "POST"): "issue_licences",
    ("v1/admin/batches/<id:batch_id>", "GET"): "view_service",
    ("v1/admin/batches/<id:batch_id>/addons", "GET"): "view_service",
    ("v1/admin/batches/<id:batch_id>/addons", "POST"): "issue_licences",
    ("v1/admin/batches/<id:batch_id>/addons/<id:addon>", "DELETE"): "issue_licences",
    # Converting a trial batch sells its units (issue 42), as issuing a batch does.
    ("v1/admin/batches/<id:batch_id>/convert", "POST"): "issue_licences",
    ("v1/admin/batches/<id:batch_id>/convert/quote", "POST"): "issue_licences",
    ("v1/admin/licenses", "POST"): "issue_licences",
    ("v1/admin/licenses/<id:license_id>/addons", "GET"): "view_service",
    ("v1/admin/licenses/<id:license_id>/addons", "POST"): "issue_licences",
    ("v1/admin/licenses/<id:license_id>/addons/<id:addon>", "DELETE"): "issue_licences",
    ("v1/admin/licenses/register", "POST"): "issue_licences",
    ("v1/admin/offline/activations", "POST"): "issue_licences",
    ("v1/admin/offline/usage", "POST"): "issue_licences",
    ("v1/admin/revoke", "POST"): "revoke_licences",
    ("v1/admin/suspend", "POST"): "suspend_licences",
    ("v1/admin/reinstate", "POST"): "suspend_licences",
    ("v1/admin/seats/release", "POST"): "release_seats",
    ("v1/admin/renew", "POST"): "renew_licences",
    ("v1/admin/renew/quote", "POST"): "renew_licences",
    ("v1/admin/expiring", "GET"): "view_service",
    ("v1/admin/fleet", "GET"): "view_service",
    ("v1/admin/fleet.csv", "GET"): "view_service",
    ("v1/admin/clones", "GET"): "view_service",
    ("v1/admin/clones/<id:suspicion_id>/revoke-copy", "POST"): "revoke_licences",
    ("v1/admin/customers", "POST"): "manage_customers",
    ("v1/admin/customers/<id:customer_id>", "GET"): "view_service",
    ("v1/admin/customers/<id:customer_id>", "PATCH"): "manage_customers",
    ("v1/admin/usage/<id:license_id>", "GET"): "view_service",
    ("v1/admin/usage/conflicts", "GET"): "view_service",
    ("v1/admin/invoice/<id:customer_id>", "GET"): "view_service",
    ("v1/admin/invoices", "GET"): "view_service",
    ("v1/admin/invoices", "POST"): "manage_billing",
    ("v1/admin/invoices/<id:number>.pdf", "GET"): "view_service",
    ("v1/admin/invoices/<id:number>.xml", "GET"): "view_service",
    ("v1/admin/invoices/<id:number>", "GET"): "view_service",
    ("v1/admin/invoices/<id:number>/credit-note", "POST"): "manage_billing",
    ("v1/admin/invoices/<id:number>/payments", "GET"): "view_service",
    ("v1/admin/invoices/<id:number>/payments", "POST"): "manage_billing",
    ("v1/admin/payments/camt053", "POST"): "manage_billing",
    ("v1/admin/invoices/<id:number>/credit-note/draft", "POST"): "manage_billing",
    ("v1/admin/webhooks", "GET"): "view_service",
    ("v1/admin/webhooks", "POST"): "manage_webhooks",
    ("v1/admin/webhooks/<id:webhook_id>", "GET"): "view_service",
    ("v1/admin/webhooks/<id:webhook_id>", "DELETE"): "manage_webhooks",
    ("v1/admin/webhooks/<id:webhook_id>/rotate-secret", "POST"): "manage_webhooks",
    ("v1/admin/webhooks/<id:webhook_id>/enable", "POST"): "manage_webhooks",
    ("v1/admin/webhooks/<id:webhook_id>/redeliver", "POST"): "manage_webhooks",
    ("v1/admin/events", "GET"): "view_service",
    ("v1/admin/customers/<id:customer_id>/users", "GET"): "view_service",
    ("v1/admin/customers/<id:customer_id>/users", "POST"): "manage_customers",
    ("v1/admin/invitations/<id:invitation_id>/withdraw", "POST"): "manage_customers",
    ("v1/admin/customer-keys", "GET"): "view_service",
    ("v1/admin/customer-keys/<id:prefix>/revoke", "POST"): "manage_customers",
}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _operator_methods(patterns=None, prefix=""):
    """Every (route, method, view) the operator keys guard."""
    from django.urls import URLPattern, URLResolver

    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            yield from _operator_methods(entry.url_patterns, prefix + str(entry.pattern))
            continue
        view = (
            getattr(entry.callback, "view_class", None) if isinstance(entry, URLPattern) else None
        )
        if view is None or not issubclass(view, APIView) or issubclass(view, DeviceApi):
            continue
        instance = view()
        if not any(isinstance(p, IsOperator) or "Operator" in type(p).__name__
                   for p in instance.get_permissions()):  # fmt: skip
            continue
        for method in METHODS:
            if handler_of(instance, method) is not None:
                yield prefix + str(entry.pattern), method, instance


def _call(client: APIClient, method: str, route: str):
    """``method`` on ``route`` with every path parameter an id that does not exist."""
    path = "/" + re.sub(r"<[^>]+>", "NOPE-1", route)
    return client.generic(method, path, data="{}", content_type="application/json")


def _refused(response) -> bool:
    return response.status_code == 403 and "lacks the permission" in response.content.decode()


def test_every_operator_endpoint_has_its_row_and_declares_it():
    found = {(route, method): view for route, method, view in _operator_methods()}
    assert set(found) - set(MATRIX) == set(), "endpoints without a row in MATRIX"
    assert set(MATRIX) - set(found) == set(), "rows of endpoints that no longer exist"
    for (route, method), view in found.items():
        assert required_capability(view, method) == MATRIX[route, method], (route, method)


def test_the_roles_in_the_database_are_the_table(db):
    for role, held in ROLES.items():
        group = Group.objects.get(name=role)
        assert {p.codename for p in group.permissions.all()} == set(held), role
    assert set().union(*ROLES.values()) == set(CAPABILITIES)


def _key(role: str) -> str:
    _, key = operator_key_create(name=f"key-{role}", roles=[role])
    return key


@pytest.mark.parametrize("role", list(ROLES))
def test_each_role_may_call_exactly_its_rows(db, role):
    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=_key(role))
    allowed = capabilities_of([role])
    for (route, method), capability in MATRIX.items():
        response = _call(client, method, route)
        refused = _refused(response)
        if capability in allowed:
            assert not refused, (role, method, route, response.content[:300])
            assert response.status_code < 500, (role, method, route)
        else:
            assert refused, (role, method, route, response.status_code, response.content[:300])
            detail = response.json()["detail"]
            assert repr(capability) in detail and f"key-{role}" in detail


def test_a_refusal_names_the_permission_and_the_roles_that_hold_it(db):
    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=_key("viewer"))
    body = {"license_ids": ["L-1"], "reason": "x"}
    response = client.post("/v1/admin/revoke", body, format="json")
    assert response.status_code == 403
    assert "roles that hold it: operator" in response.json()["detail"]
    assert client.get("/v1/admin/catalogue").status_code == 200


def test_the_bootstrap_key_holds_every_capability(db, admin_api):
    for (route, method), _ in MATRIX.items():
        response = _call(admin_api, method, route)
        assert response.status_code != 403, (method, route, response.content[:300])


def test_an_expired_or_revoked_key_opens_nothing(db):
    row, key = operator_key_create(
        name="short", roles=["viewer"], expires_at=clock.now() + dt.timedelta(days=1)
    )
    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=key)
    assert client.get("/v1/admin/catalogue").status_code == 200
    OperatorKey.objects.filter(pk=row.pk).update(expires_at=clock.now())
    assert client.get("/v1/admin/catalogue").status_code == 403
    _, other = operator_key_create(name="gone", roles=["viewer"])
    operator_key_revoke(name="gone")
    client.credentials(HTTP_X_ADMIN_KEY=other)
    assert client.get("/v1/admin/catalogue").status_code == 403


def test_create_admin_key_takes_a_scope_and_an_expiry(db):
    out, err = io.StringIO(), io.StringIO()
    call_command("create_admin_key", "billing-cron", "--scope", "finance,viewer",
                 "--expires-days", "30", stdout=out, stderr=err)  # fmt: skip
    row = OperatorKey.objects.get(name="billing-cron")
    assert row.roles == ["finance", "viewer"]
    assert 29 < (row.expires_at - clock.now()).days + 1 <= 30
    assert "roles finance, viewer, expires" in err.getvalue()
    with pytest.raises(CommandError, match="--scope ROLE"):
        call_command("create_admin_key", "nobody", stdout=io.StringIO())
    with pytest.raises(CommandError, match="unknown role.*admin; the roles are viewer"):
        call_command("create_admin_key", "nobody", "--scope", "admin", stdout=io.StringIO())
    with pytest.raises(CommandError, match="--expires-days must be 1 to 3650; got 0"):
        call_command("create_admin_key", "nobody", "--scope", "viewer", "--expires-days", "0")
    assert not OperatorKey.objects.filter(name="nobody").exists()


def test_start_up_warns_of_the_shared_key_beside_named_ones(db, settings):
    settings.DEBUG = False
    settings.SVC_ADMIN_KEY = "shared-" + "k" * 30
    assert shared_key_warning() == ""
    operator_key_create(name="alice", roles=["operator"])
    assert "SVC_ADMIN_KEY is set beside 1 named operator key(s)" in shared_key_warning()
    settings.SVC_ADMIN_KEY = ""
    assert shared_key_warning() == ""
