"""A customer user, and a customer's API key, see only their own customer: every portal
URL and every customer API call made with another customer's ids answers 404, and the
lists hold only their own rows (issue 29)."""

from __future__ import annotations

import pytest
from django.urls import get_resolver, reverse
from rest_framework.test import APIClient

from portal.models import CustomerApiKey, RenewalRequest

pytestmark = pytest.mark.django_db


def _ids(world) -> dict[str, str]:
    """A value for every id a portal or customer API URL takes."""
    return {
        "batch_id": world.batch.pk,
        "number": world.invoice.number,
        "prefix": world.key_prefix,
        "webhook_id": world.webhook.pk,
    }


def portal_routes() -> list:
    resolver = get_resolver()
    names = [n for n in resolver.reverse_dict if isinstance(n, str) and n.startswith("portal-")]
    return sorted(names)


# Each portal page taking an id; with the other customer's id, 404.
WITH_IDS = {
    "portal-batch": ("GET", "batch_id"),
    "portal-batch-buy": ("POST", "batch_id"),
    "portal-document": ("GET", "number"),
    "portal-document-pdf": ("GET", "number"),
    "portal-document-xml": ("GET", "number"),
    "portal-api-key-revoke": ("POST", "prefix"),
    "portal-webhook-delete": ("POST", "webhook_id"),
    "portal-webhook-rotate": ("POST", "webhook_id"),
    "portal-webhook-test": ("POST", "webhook_id"),
}
# Pages without ids in their path (lists, forms, logging in): their own customer only.
WITHOUT_IDS = {
    "portal-dashboard", "portal-login", "portal-logout", "portal-second-factor",
    "portal-invitation-base", "portal-invitation", "portal-batches", "portal-fleet",
    "portal-fleet-csv", "portal-invoices", "portal-renewals", "portal-api-keys",
    "portal-webhooks", "portal-offline", "portal-clones",
}  # fmt: skip


def test_every_portal_url_is_in_the_isolation_table():
    assert set(portal_routes()) == set(WITH_IDS) | WITHOUT_IDS


@pytest.mark.parametrize("name", sorted(WITH_IDS))
def test_another_customers_id_in_a_portal_url_is_404(worlds, name):
    alpha, beta = worlds
    method, parameter = WITH_IDS[name]
    client = alpha.client()
    url = reverse(name, kwargs={parameter: _ids(beta)[parameter]})
    answer = client.post(url) if method == "POST" else client.get(url)
    assert answer.status_code == 404, (name, answer.status_code)
    # ... and the same page with its own id works.
    own = reverse(name, kwargs={parameter: _ids(alpha)[parameter]})
    answer = client.post(own) if method == "POST" else client.get(own)
    assert answer.status_code in (200, 302), (name, answer.status_code)
    # Nothing of the other customer changed.
    assert CustomerApiKey.objects.get(prefix=beta.key_prefix).revoked_at is None
    assert beta.customer.webhooks.filter(pk=beta.webhook.pk).exists()


def test_query_parameters_with_another_customers_ids_are_404(worlds):
    alpha, beta = worlds
    client = alpha.client()
    assert client.get(reverse("portal-fleet-csv"), {"batch_id": beta.batch.pk}).status_code == 404
    answer = client.post(reverse("portal-renewals"), {"target": beta.batch.pk})
    assert answer.status_code == 404
    answer = client.post(reverse("portal-renewals"), {"target": beta.direct.pk})
    assert answer.status_code == 404
    assert not RenewalRequest.objects.filter(customer=alpha.customer, batch_id=beta.batch.pk)


def test_lists_hold_only_the_customers_own_rows(worlds):
    alpha, beta = worlds
    client = alpha.client()
    for name in ("portal-dashboard", "portal-batches", "portal-fleet", "portal-invoices",
                 "portal-renewals", "portal-api-keys", "portal-webhooks",
                 "portal-offline"):  # fmt: skip
        text = client.get(reverse(name)).content.decode()
        for foreign in (beta.batch.pk, beta.invoice.number, beta.webhook.pk, beta.key_prefix,
                        beta.renewal.pk, "Beta-cam-001", beta.customer.name):  # fmt: skip
            assert foreign not in text, (name, foreign)
    assert alpha.batch.pk in client.get(reverse("portal-batches")).content.decode()
    export = b"".join(client.get(reverse("portal-fleet-csv")).streaming_content).decode()
    assert "Alpha-cam-001" in export and "Beta" not in export
    found = client.get(reverse("portal-fleet"), {"q": "cam-001"}).content.decode()
    assert "Alpha-cam-001" in found and "Beta-cam-001" not in found


def _api(world) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.key}")
    return client


def test_the_customer_api_with_another_customers_ids_is_404(worlds):
    alpha, beta = worlds
    api = _api(alpha)
    assert api.get("/v1/customer/fleet", {"batch_id": beta.batch.pk}).status_code == 404
    assert api.get("/v1/customer/usage", {"license_id": beta.direct.pk}).status_code == 404
    assert api.get(f"/v1/customer/invoices/{beta.invoice.number}").status_code == 404
    assert api.get(f"/v1/customer/invoices/{beta.invoice.number}.pdf").status_code == 404
    assert api.get(f"/v1/customer/invoices/{beta.invoice.number}.xml").status_code == 404
    # A customer filter is not taken: the key's customer is the only one.
    answer = api.get("/v1/customer/fleet", {"customer_id": beta.customer.pk})
    assert answer.status_code == 200
    assert {u["customer_id"] for u in answer.json()["units"]} == {alpha.customer.pk}
    invoices = api.get("/v1/customer/invoices", {"customer_id": beta.customer.pk}).json()
    assert [d["number"] for d in invoices["invoices"]] == [alpha.invoice.number]
    batches = api.get("/v1/customer/batches").json()["batches"]
    assert [b["batch_id"] for b in batches] == [alpha.batch.pk]
    usage = api.get("/v1/customer/usage").json()["licenses"]
    assert {u["license_id"] for u in usage} == {alpha.direct.pk, *alpha.units}


def test_a_staff_user_is_not_a_portal_user_and_a_portal_user_is_not_staff(
    worlds, django_user_model
):
    alpha, _ = worlds
    staff = django_user_model.objects.create_superuser("operator", "o@example.com", "x" * 20)
    from django.test import Client

    client = Client()
    client.force_login(staff)
    answer = client.get(reverse("portal-dashboard"))
    assert answer.status_code == 302 and answer["Location"].startswith(reverse("portal-login"))
    answer = alpha.client().get("/admin/")
    assert answer.status_code == 302 and "/admin/login/" in answer["Location"]


@pytest.mark.parametrize("suffix", ["", ".pdf", ".xml"])
def test_another_customers_invoice_number_and_a_missing_one_answer_alike(worlds, suffix):
    """Issue 39 item 6: the customer API does not tell which invoice numbers exist. Another
    customer's number and one never issued get the same status, headers and body, byte
    for byte (the number is not echoed)."""
    alpha, beta = worlds
    api = _api(alpha)
    missing = f"{beta.invoice.number}9"  # the same form, never issued
    theirs = api.get(f"/v1/customer/invoices/{beta.invoice.number}{suffix}")
    nobodys = api.get(f"/v1/customer/invoices/{missing}{suffix}")
    assert theirs.status_code == nobodys.status_code == 404
    assert theirs.content == nobodys.content
    assert theirs.json() == {"detail": "you have no invoice or credit note of that number"}
    assert theirs["Content-Type"] == nobodys["Content-Type"]
    assert theirs["Content-Length"] == nobodys["Content-Length"]
    # The customer's own number still answers.
    assert api.get(f"/v1/customer/invoices/{alpha.invoice.number}{suffix}").status_code == 200
