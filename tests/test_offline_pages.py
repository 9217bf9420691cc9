"""The portal's and the console's pages for air-gapped cameras (issue 44): the
customer's user (or an operator) uploads the file a camera wrote and downloads the
answer; both list the units that exchange files with the date of their last exchange.
Another customer's batch is refused as unknown; a damaged file is a form error that takes
nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

import devices
from licensing.models import Batch, OfflineExchange
from licensing.services import batch_issue
from operators.services import roles_ensure
from tests.factories import CustomerFactory
from tests.portal.conftest import account_for
from tests.test_end_to_end import HOUR, T0, SharedClock

pytestmark = pytest.mark.django_db


@pytest.fixture
def site(server_clock, signing_key, customer, tmp_path):
    clock = SharedClock(T0 + 10, server_clock)
    batch = batch_issue(customer_id=customer.pk, sku="VISION-PRO", units=3)
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    return clock, batch, public_key, tmp_path


def _portal(customer) -> Client:
    client = Client()
    client.user = account_for(customer, f"ops@{customer.pk.lower()}.example.com").user
    client.force_login(client.user)
    return client


def _request(site, device: str, batch=None) -> str:
    clock, default, _, tmp_path = site
    token = (batch or default).license.token
    return devices.offline_request(token, tmp_path / device, device_id=device, clock=clock)


def test_the_customer_uploads_a_request_and_a_usage_file_in_the_portal(site, customer):
    clock, batch, public_key, tmp_path = site
    client = _portal(customer)
    page = reverse("portal-offline")
    assert "No camera has exchanged files yet" in client.get(page).content.decode()
    upload = SimpleUploadedFile("req.svcreq", _request(site, "cam-p1").encode())
    answered = client.post(page, {"file": upload})
    assert answered.status_code == 200
    assert answered["Content-Disposition"] == 'attachment; filename="cam-p1.svcresp"'
    assert "a seat taken (2 left on the batch)" in answered["X-Svc-Exchange"]
    assert Batch.objects.get(pk=batch.pk).units_activated == 1
    summary = devices.offline_install(
        answered.content.decode(), tmp_path / "cam-p1", public_key=public_key,
        device_id="cam-p1", clock=clock,
    )  # fmt: skip
    assert summary["kind"] == "activation"
    with devices.Engine(
        tmp_path / "cam-p1", public_key=public_key, device_id="cam-p1", clock=clock
    ) as camera:
        camera.start()
        camera.count(inferences=3)
        clock.now = T0 + HOUR + 30
        camera.count(inferences=1)
        usage = camera.usage_export()
    # The usage file as the text a phone read from the camera's QR code, wrapped.
    wrapped = "\n".join(usage[i : i + 60] for i in range(0, len(usage), 60))
    client.force_login(client.user)  # an hour later: the session timed out
    receipt = client.post(page, {"text": wrapped})
    assert receipt["Content-Disposition"] == 'attachment; filename="cam-p1.svcrcpt"'
    assert "1 records stored" in receipt["X-Svc-Exchange"]
    listed = client.get(page).content.decode()
    assert "cam-p1" in listed and "Last file exchange" in listed
    assert OfflineExchange.objects.filter(channel="portal").count() == 2


def test_the_portal_refuses_another_customers_batch_and_damaged_files(site, customer):
    client = _portal(customer)
    page = reverse("portal-offline")
    foreign = batch_issue(customer_id=CustomerFactory().pk, sku="VISION-PRO", units=3)
    refused = client.post(page, {"text": _request(site, "cam-x", batch=foreign)})
    assert refused.status_code == 200 and "no such batch key" in refused.content.decode()
    damaged = _request(site, "cam-y")[:-9]
    refused = client.post(page, {"text": damaged})
    assert "BAD_REQUEST" in refused.content.decode()
    refused = client.post(page, {"text": "hello"})
    assert "not a file from an air-gapped camera" in refused.content.decode()
    assert "paste its text" in client.post(page, {}).content.decode()
    assert Batch.objects.get(pk=foreign.pk).units_activated == 0
    assert not OfflineExchange.objects.exists()


def test_an_operator_answers_files_in_the_console_and_sees_every_customers_units(
    site, admin_client
):
    page = reverse("console-offline")
    answered = admin_client.post(page, {"text": _request(site, "cam-o1")})
    assert answered.status_code == 200
    assert answered["Content-Disposition"] == 'attachment; filename="cam-o1.svcresp"'
    listed = admin_client.get(page).content.decode()
    assert "cam-o1" in listed and site[1].customer_id in listed
    assert OfflineExchange.objects.get().channel == "console"
    assert reverse("console-offline") in admin_client.get(reverse("admin:index")).content.decode()


def test_a_viewer_reads_the_console_page_but_cannot_answer_a_file(site, django_user_model):
    roles_ensure()
    viewer = django_user_model.objects.create_user("u-viewer", password="x", is_staff=True)
    viewer.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    client.force_login(viewer)
    page = reverse("console-offline")
    shown = client.get(page)
    assert shown.status_code == 200 and 'id="offline-form"' not in shown.content.decode()
    assert client.post(page, {"text": _request(site, "cam-v1")}).status_code == 403
    assert Batch.objects.get(pk=site[1].pk).units_activated == 0
