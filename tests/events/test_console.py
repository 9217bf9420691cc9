"""The console's events and webhook pages: register an endpoint (its secret shown once),
rotate, enable, send again; the event log lists what happened."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from events.models import Event, Webhook
from events.services import event_emit, webhook_create

pytestmark = pytest.mark.django_db


def test_register_an_endpoint_from_the_console(admin_client, local_hooks, receiver, customer):
    page = admin_client.get(reverse("admin:events_webhook_add"))
    assert page.status_code == 200 and b"Register endpoint" in page.content
    answer = admin_client.post(
        reverse("admin:events_webhook_add"),
        {"url": receiver.url, "events": ["license.revoked", "batch.threshold"],
         "customer_id": customer.id},
        follow=True,
    )  # fmt: skip
    hook = Webhook.objects.get()
    assert hook.events == ["batch.threshold", "license.revoked"] and hook.customer_id == customer.id
    assert hook.secret.encode() in answer.content and b"shown only now" in answer.content
    again = admin_client.get(reverse("admin:events_webhook_change", args=[quote(hook.pk)]))
    assert hook.secret.encode() not in again.content  # only once
    assert b"Rotate secret" in again.content and b"none yet" in again.content


def test_a_webhook_id_the_admin_would_read_as_an_escape_opens_its_pages(
    admin_client, local_hooks, receiver
):
    """Webhook ids are ``wh_`` and 20 random characters: one in roughly ten starts with
    two hex digits, which the admin reads as an escape (``_3A`` is ``:``). Registering
    such an endpoint redirected to the index (the CI failure of stop 33)."""
    hook = webhook_create(url=receiver.url, events=["*"])
    Webhook.objects.filter(pk=hook.pk).update(id="wh_3A" + hook.pk[5:])
    hook = Webhook.objects.get()
    page = admin_client.get(reverse("admin:events_webhook_change", args=[quote(hook.pk)]))
    assert page.status_code == 200 and b"Rotate secret" in page.content
    rotate = re.search(r'href="([^"]+/rotate/)"', page.content.decode()).group(1)
    rotated = admin_client.post(rotate, follow=True)
    assert rotated.redirect_chain[-1][0].endswith(f"/{quote(hook.pk)}/change/")
    assert Webhook.objects.get().previous_secret == hook.secret


def test_a_refused_url_is_explained_on_the_form(admin_client):
    answer = admin_client.post(
        reverse("admin:events_webhook_add"),
        {"url": "https://10.0.0.8/hook", "events": ["*"]},
    )
    assert answer.status_code == 200 and b"SVC_WEBHOOK_ALLOW_PRIVATE" in answer.content
    assert not Webhook.objects.exists()


def test_rotate_enable_and_send_again_from_the_console(admin_client, local_hooks, receiver):
    hook = webhook_create(url=receiver.url, events=["*"])
    old = hook.secret
    rotated = admin_client.post(
        reverse("admin:events_webhook_rotate", args=[quote(hook.pk)]), follow=True
    )
    hook.refresh_from_db()
    assert hook.secret != old and hook.previous_secret == old
    assert hook.secret.encode() in rotated.content
    Webhook.objects.filter(pk=hook.pk).update(enabled=False, disabled_reason="test")
    admin_client.post(reverse("admin:events_webhook_enable", args=[quote(hook.pk)]))
    assert Webhook.objects.get(pk=hook.pk).enabled
    event_emit("license.revoked", data={"license_id": "LIC-1"})
    event_emit("license.revoked", data={"license_id": "LIC-2"})
    last = Event.objects.order_by("-xid", "-id").first()  # the endpoint has both
    Webhook.objects.filter(pk=hook.pk).update(position_xid=last.xid, position=last.id)
    first = Event.objects.order_by("xid", "id").first()
    admin_client.post(
        reverse("admin:events_webhook_redeliver", args=[quote(hook.pk)]),
        {"event_id": first.event_id},
    )
    moved = Webhook.objects.get(pk=hook.pk)
    assert (moved.position_xid, moved.position) == (first.xid, first.id - 1)
    missing = admin_client.post(
        reverse("admin:events_webhook_redeliver", args=[quote(hook.pk)]), {"event_id": "evt_nope"}
    )
    assert b"no event evt_nope" in missing.content


def test_the_event_log_lists_and_shows_events(admin_client, customer):
    event_emit("license.revoked", customer_id=customer.id,
               data={"license_id": "LIC-SHOWN", "reason": "stolen"})  # fmt: skip
    listing = admin_client.get(reverse("admin:events_event_changelist"))
    assert listing.status_code == 200 and b"LIC-SHOWN" in listing.content
    event = Event.objects.get()
    page = admin_client.get(reverse("admin:events_event_change", args=[event.pk]))
    assert page.status_code == 200 and b"stolen" in page.content
