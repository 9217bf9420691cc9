""" "Send a test event" for a customer's webhook (issue 41): a signed event through the
worker's own sending (events.delivery.send), and the page says truthfully what the
endpoint did: delivered with its status and time, refused with its status, or not
reached and why. A real HTTP receiver on this machine checks the signature."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest
from django.contrib.admin.utils import quote
from django.contrib.messages import get_messages
from standardwebhooks.webhooks import Webhook as Verifier

from events.models import DeliveryAttempt, Event
from portal import services

pytestmark = pytest.mark.django_db


class Receiver(http.server.BaseHTTPRequestHandler):
    answer = 204
    received: list[tuple[dict, str]] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        Receiver.received.append((dict(self.headers), body))
        self.send_response(Receiver.answer)
        self.end_headers()
        if Receiver.answer >= 300:
            self.wfile.write(b"tenant unknown")

    def log_message(self, *args):
        pass


@pytest.fixture(autouse=True)
def _plain_http(settings):
    settings.SVC_WEBHOOK_ALLOW_HTTP = True


@pytest.fixture
def receiver():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    Receiver.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks/licensing"
    server.shutdown()


def _message(response) -> str:
    return " | ".join(str(m) for m in get_messages(response.wsgi_request))


def test_a_test_event_is_signed_delivered_and_reported(worlds, receiver):
    alpha, _ = worlds
    hook = services.customer_webhook_create(
        customer_id=alpha.customer.pk, url=receiver, events=["license.activated"]
    )
    client = alpha.client()
    events_before = Event.objects.count()
    page = client.get("/portal/webhooks/").content.decode()
    assert f'action="/portal/webhooks/{hook.pk}/test/"' in page

    Receiver.answer = 204
    response = client.post(f"/portal/webhooks/{hook.pk}/test/")
    assert response.status_code == 302
    said = _message(response)
    assert "delivered, HTTP 204 in" in said and receiver in said, said
    headers, body = Receiver.received[-1]
    payload = Verifier(hook.secret).verify(body, headers)  # raises on a bad signature
    assert payload["type"] == "webhook.test" and payload["data"]["webhook_id"] == hook.pk
    assert payload["id"] in said and headers["webhook-id"] == payload["id"]

    Receiver.answer = 500
    said = _message(client.post(f"/portal/webhooks/{hook.pk}/test/"))
    assert "not accepted, HTTP 500" in said and "tenant unknown" in said, said
    # Nothing written to the log or the endpoint's deliveries; its position is as it was.
    assert Event.objects.count() == events_before
    assert not DeliveryAttempt.objects.filter(webhook=hook).exists()


def test_an_endpoint_that_cannot_be_reached_is_said_so(worlds):
    alpha, beta = worlds
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hook = services.customer_webhook_create(
        customer_id=alpha.customer.pk,
        url=f"http://127.0.0.1:{port}/x",
        events=["license.activated"],
    )
    said = _message(alpha.client().post(f"/portal/webhooks/{hook.pk}/test/"))
    assert "not delivered" in said and "ConnectionRefusedError" in said, said
    # Another customer's endpoint: 404, nothing sent.
    assert beta.client().post(f"/portal/webhooks/{hook.pk}/test/").status_code == 404
    assert alpha.client().get(f"/portal/webhooks/{hook.pk}/test/").status_code == 405


def test_the_console_sends_a_test_event_too(worlds, receiver, admin_client):
    alpha, _ = worlds
    hook = services.customer_webhook_create(
        customer_id=alpha.customer.pk, url=receiver, events=["license.activated"]
    )
    quoted = quote(hook.pk)  # the admin's quoting of an id in a URL: _ is _5F
    page = admin_client.get(f"/admin/events/webhook/{quoted}/change/").content.decode()
    assert f"/admin/events/webhook/{quoted}/test/" in page
    Receiver.answer = 202
    response = admin_client.post(f"/admin/events/webhook/{quoted}/test/")
    assert response.status_code == 302
    said = _message(response)
    assert "delivered, HTTP 202 in" in said, said
    headers, body = Receiver.received[-1]
    assert Verifier(hook.secret).verify(body, headers)["type"] == "webhook.test"
