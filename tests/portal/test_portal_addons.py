"""The portal shows a batch's add-ons (issue 42 item 4): on the batches list beside the
SKU, on the batch's page with what each adds and since when, and which units receive a
change at their next sync; another customer sees none of it. A customer's own webhook
may subscribe to the add-on events."""

from __future__ import annotations

from django.urls import reverse

from licensing.models import License
from licensing.services import addon_add, addon_remove, license_refresh
from portal import services


def test_the_batch_page_and_list_show_its_add_ons_and_who_has_them_yet(worlds):
    alpha, beta = worlds
    addon_add(addon="anpr", batch_id=alpha.batch.pk)
    client = alpha.client()

    page = client.get(reverse("portal-batch", args=[alpha.batch.pk])).content.decode()

    assert "Add-ons: <strong>anpr</strong> (Number-plate recognition: anpr) since" in page
    assert "2 units below receive the change at their next sync" in page
    assert page.count("add-ons at next sync") == 2
    listed = client.get(reverse("portal-batches")).content.decode()
    assert '<div class="svc-quiet">+ anpr</div>' in listed

    # One unit fetches its licence: it carries anpr now.
    unit = License.objects.get(pk=alpha.units[0])
    license_refresh(token=unit.token, device_id=unit.device_id)
    page = client.get(reverse("portal-batch", args=[alpha.batch.pk])).content.decode()
    assert "1 unit below receives the change at its next sync" in page
    assert page.count("add-ons at next sync") == 1

    addon_remove(addon="anpr", batch_id=alpha.batch.pk)
    page = client.get(reverse("portal-batch", args=[alpha.batch.pk])).content.decode()
    assert "Add-ons: none" in page and "2 units below receive the change" in page

    other = beta.client().get(reverse("portal-batches")).content.decode()
    assert "anpr" not in other


def test_a_customers_webhook_may_ask_for_the_add_on_events(worlds):
    alpha, _ = worlds
    hook = services.customer_webhook_create(
        customer_id=alpha.customer.pk,
        url="https://127.0.0.1:9/addons",
        events=["license.addon_added", "license.addon_removed"],
    )
    assert hook.events == ["license.addon_added", "license.addon_removed"]
