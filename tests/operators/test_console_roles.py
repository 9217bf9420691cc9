"""Who may do what in the console (issue 28): one table of every console page, form and
action with the capability it takes, walked with a user of each role. A console URL or
action without a row fails here."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import URLPattern, get_resolver

from operators.roles import ROLES, capabilities_of
from operators.services import roles_ensure

# The console's own pages (config/urls.py): name -> (method, path, capability).
PAGES = {
    "console-dashboard": ("GET", "/admin/dashboard/", "view_service"),
    "console-dashboard-reconcile": ("POST", "/admin/dashboard/reconcile/", "manage_billing"),
    "console-invoice-preview": ("GET", "/admin/invoice-preview/", "view_service"),
    # Answering a file (POST) needs issue_licences: tests/test_offline_pages.py.
    "console-offline": ("GET", "/admin/offline/", "view_service"),
    "console-invoice-issue": ("POST", "/admin/invoice-issue/", "manage_billing"),
    "console-document": ("GET", "/admin/documents/INV-NOPE/", "view_service"),
    "console-document-pdf": ("GET", "/admin/documents/INV-NOPE/pdf/", "view_service"),
    "console-document-xml": ("GET", "/admin/documents/INV-NOPE/xml/", "view_service"),
    "console-document-print": ("GET", "/admin/documents/INV-NOPE/print/", "view_service"),
    "console-credit-note": ("GET", "/admin/documents/INV-NOPE/credit-note/", "manage_billing"),
    # Importing a bank statement records payments (issue 43).
    "console-statement": ("GET", "/admin/payments/statement/", "manage_billing"),
}
# Add forms and the pages an admin adds to a model: path -> capability.
FORMS = {
    "/admin/customers/customer/add/": "manage_customers",
    "/admin/licensing/batch/add/": "issue_licences",
    "/admin/licensing/license/add/": "issue_licences",
    "/admin/licensing/sku/add/": "manage_billing",
    "/admin/billing/vatrate/add/": "manage_billing",
    "/admin/billing/payment/add/": "manage_billing",
    "/admin/events/webhook/add/": "manage_webhooks",
    "/admin/events/webhook/NOPE/rotate/": "manage_webhooks",
    "/admin/events/webhook/NOPE/enable/": "manage_webhooks",
    "/admin/events/webhook/NOPE/redeliver/": "manage_webhooks",
    "/admin/events/webhook/NOPE/test/": "manage_webhooks",
    "/admin/operators/operatorkey/add/": "manage_operator_access",
}
# Every action of every model admin: (model, action) -> capability.
ACTIONS = {
    ("license", "revoke_licenses"): "revoke_licences",
    ("license", "renew_licenses"): "renew_licences",
    ("license", "suspend_licenses"): "suspend_licences",
    ("license", "reinstate_licenses"): "suspend_licences",
    ("batch", "suspend_batches"): "suspend_licences",
    ("batch", "reinstate_batches"): "suspend_licences",
    ("customer", "suspend_customers"): "suspend_licences",
    ("customer", "reinstate_customers"): "suspend_licences",
    ("batch", "revoke_batch_keys"): "revoke_licences",
    ("batch", "renew_batches"): "renew_licences",
    ("batch", "add_addon_batches"): "issue_licences",
    ("batch", "remove_addon_batches"): "issue_licences",
    ("license", "add_addon_licenses"): "issue_licences",
    ("license", "remove_addon_licenses"): "issue_licences",
    ("batch", "convert_trial_batches"): "issue_licences",
    ("activation", "revoke_units"): "revoke_licences",
    ("activation", "release_seats"): "release_seats",
    ("clonesuspicion", "revoke_copies"): "revoke_licences",
    ("signingkey", "retire_keys"): "manage_signing_keys",
    ("signingkey", "revoke_keys"): "manage_signing_keys",
    ("operatorkey", "revoke_keys"): "manage_operator_access",
    ("invoice", "download_csv"): "manage_billing",
    ("renewalrequest", "approve"): "renew_licences",
    ("renewalrequest", "decline"): "renew_licences",
    ("customeruser", "deactivate"): "manage_customers",
    ("customerapikey", "revoke_keys"): "manage_customers",
    ("invitation", "withdraw"): "manage_customers",
}
# Users and groups (django.contrib.auth) and login lockouts (axes) keep Django's
# per-model permissions: a superuser's, or granted one by one.
DJANGO_ADMINS = {"auth", "axes"}


def _user(django_user_model, role: str):
    roles_ensure()
    user = django_user_model.objects.create_user(f"u-{role}", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    return user


def _actions(request) -> dict[tuple[str, str], bool]:
    """(model, action) -> whether ``request``'s user is offered it."""
    offered = {}
    for model, model_admin in admin.site._registry.items():
        name = model._meta.model_name
        if model._meta.app_label in DJANGO_ADMINS:
            continue
        allowed = model_admin.get_actions(request)
        for action in model_admin.actions or ():
            action_name = action if isinstance(action, str) else action.__name__
            offered[name, action_name] = action_name in allowed
    return offered


def test_every_console_page_and_action_has_its_row(rf, admin_user):
    names = {
        entry.name
        for entry in get_resolver().url_patterns
        if isinstance(entry, URLPattern) and (entry.name or "").startswith("console-")
    }
    assert names == set(PAGES)
    request = rf.get("/admin/")
    request.user = admin_user
    assert set(_actions(request)) == set(ACTIONS)


@pytest.mark.parametrize("role", list(ROLES))
def test_each_role_sees_and_does_exactly_its_rows(db, rf, django_user_model, role):
    user = _user(django_user_model, role)
    held = capabilities_of([role])
    client = Client()
    client.force_login(user)
    for name, (method, path, capability) in PAGES.items():
        response = client.generic(method, path)
        if capability in held:
            assert response.status_code != 403, (role, name, response.status_code)
        else:
            assert response.status_code == 403, (role, name, response.status_code)
    for path, capability in FORMS.items():
        response = client.get(path)
        if capability in held:
            assert response.status_code != 403, (role, path, response.status_code)
        else:
            assert response.status_code == 403, (role, path, response.status_code)
    request = rf.get("/admin/")
    request.user = user
    for (model, action), offered in _actions(request).items():
        assert offered == (ACTIONS[model, action] in held), (role, model, action)
    # Every role reads the lists; nobody edits a row in place or deletes one.
    assert client.get("/admin/licensing/license/").status_code == 200
    assert client.get("/admin/audit/auditentry/").status_code == 200


def test_a_staff_user_without_a_role_sees_nothing(db, django_user_model):
    user = django_user_model.objects.create_user("nobody", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get("/admin/licensing/license/").status_code == 403
    assert client.get("/admin/dashboard/").status_code == 403
    page = client.get("/admin/").content.decode()
    assert "Licences" not in page and "Customers" not in page


def test_a_role_deleted_by_hand_comes_back_and_added_permissions_stay(db):
    from django.contrib.auth.models import Permission

    Group.objects.filter(name="viewer").delete()
    finance = Group.objects.get(name="finance")
    extra = Permission.objects.get(codename="release_seats")
    finance.permissions.add(extra)
    roles_ensure()
    assert {p.codename for p in Group.objects.get(name="viewer").permissions.all()} == {
        "view_service"
    }
    assert extra in Group.objects.get(name="finance").permissions.all()


def test_the_customer_page_offers_only_what_the_role_may(db, django_user_model, customer):
    for role, shown, hidden in (
        ("viewer", ["Invoice preview"], ["Issue batch", "Issue licence"]),
        ("operator", ["Issue batch", "Issue licence", "Invoice preview"], []),
    ):
        client = Client()
        client.force_login(_user(django_user_model, role))
        page = client.get(f"/admin/customers/customer/{customer.pk}/change/").content.decode()
        assert all(label in page for label in shown), (role, shown)
        assert not any(label in page for label in hidden), (role, hidden)


def test_a_key_administrator_creates_a_scoped_key_in_the_console(db, django_user_model):
    from operators.models import OperatorKey

    client = Client()
    client.force_login(_user(django_user_model, "key-admin"))
    # Only roles it holds itself (issue 39): finance is not a key-admin's to give.
    refused = client.post(
        "/admin/operators/operatorkey/add/",
        {"name": "billing-cron", "roles": ["finance", "viewer"], "expires_days": "30"},
    )
    assert "you may grant only roles you hold: finance" in refused.content.decode()
    assert not OperatorKey.objects.filter(name="billing-cron").exists()
    response = client.post(
        "/admin/operators/operatorkey/add/",
        {"name": "audit-reader", "roles": ["viewer"], "expires_days": "30"},
        follow=True,
    )
    page = response.content.decode()
    row = OperatorKey.objects.get(name="audit-reader")
    assert row.roles == ["viewer"] and row.expires_at is not None
    key = page.split('id="operator-key">')[1].split("<")[0]
    assert key.startswith(f"svcop_{row.prefix}_")
    api = Client(HTTP_X_ADMIN_KEY=key)
    assert api.get("/v1/admin/invoices").status_code == 200
    assert api.post("/v1/admin/revoke", {}, content_type="application/json").status_code == 403


def test_a_refused_console_page_says_which_permission(db, django_user_model):
    client = Client()
    client.force_login(_user(django_user_model, "viewer"))
    page = client.post("/admin/dashboard/reconcile/").content.decode()
    assert "lack the permission &#x27;manage_billing&#x27;" in page
