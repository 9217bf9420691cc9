"""Air-gapped activation and usage by file (issue 44), in process: the device module's
files read by the admin API, the answers installed on the device. Every damaged,
foreign or replayed file is a coded refusal that takes or changes nothing."""

from __future__ import annotations

import time

import pytest
from rest_framework.test import APIClient

import devices
from billing.models import UsageRecord
from devices import offline
from devices.__main__ import main
from events.models import Event
from licensing.models import Activation, Batch, License, OfflineExchange
from portal.services import customer_key_create
from tests.factories import CustomerFactory
from tests.test_end_to_end import HOUR, T0, SharedClock

pytestmark = pytest.mark.django_db

ACTIVATIONS = "/v1/admin/offline/activations"
USAGE = "/v1/admin/offline/usage"


@pytest.fixture
def air(admin_api, server_clock, customer, signing_key, tmp_path):
    """A camera with no network: its clock (the service's follows it), a batch of two."""

    class Site:
        clock = SharedClock(T0 + 10, server_clock)
        public_key = devices.token.public_key_b64url(signing_key.public_key())

        def __init__(self) -> None:
            self.batch = admin_api.post(
                "/v1/admin/batches",
                {"customer_id": customer.id, "sku": "VISION-PRO", "units": 2},
                format="json",
            ).json()

        def state(self, name: str = "cam-air-1"):
            return tmp_path / name

        def engine(self, name: str = "cam-air-1") -> devices.Engine:
            return devices.Engine(
                self.state(name), public_key=self.public_key, device_id=name, clock=self.clock
            )

        def install(self, answer: str, name: str = "cam-air-1") -> dict:
            return devices.offline_install(
                answer, self.state(name), public_key=self.public_key, device_id=name,
                clock=self.clock,
            )  # fmt: skip

        def request(self, name: str = "cam-air-1", batch_token: str | None = None) -> str:
            return devices.offline_request(
                batch_token or self.batch["batch_token"], self.state(name), device_id=name,
                clock=self.clock,
            )  # fmt: skip

        def post_request(self, text: str, **extra):
            return admin_api.post(ACTIVATIONS, {"request": text}, format="json", **extra)

        def upload(self, text: str):
            return admin_api.post(USAGE, {"usage": text}, format="json")

        def activated(self, name: str = "cam-air-1") -> dict:
            response = self.post_request(self.request(name))
            assert response.status_code == 200, response.json()
            answer = response.json()
            self.install(answer["answer"], name)
            return answer

        def revoke(self, license_id: str) -> None:
            response = admin_api.post(
                "/v1/admin/revoke", {"license_id": license_id, "reason": "stolen"}, format="json"
            )
            assert response.status_code == 200

        def export(self, name: str = "cam-air-1") -> str:
            return devices.usage_export(
                self.state(name), public_key=self.public_key, device_id=name, clock=self.clock
            )

    return Site()


def _seats(batch_id: str) -> int:
    return Batch.objects.get(pk=batch_id).units_activated


def test_offline_round_trip_takes_one_seat_and_clears_the_spool_by_receipt(air):
    request = air.request()
    assert request.startswith("SVCQ1.") and len(request) < 2000  # QR-sized
    response = air.post_request(request)
    assert response.status_code == 200, response.json()
    answer = response.json()
    assert answer["reactivated"] is False and answer["batch_units_remaining"] == 1
    assert _seats(air.batch["batch_id"]) == 1
    lic = License.objects.get(device_id="cam-air-1")
    assert answer["license_id"] == lic.id
    assert Activation.objects.filter(device_id="cam-air-1").count() == 1
    activated = Event.objects.filter(type=Event.Type.LICENSE_ACTIVATED)
    assert activated.filter(data__device_id="cam-air-1").count() == 1
    # The same request again: the same licence, no second seat.
    again = air.post_request(request).json()
    assert again["reactivated"] is True and again["license_id"] == lic.id
    assert _seats(air.batch["batch_id"]) == 1

    summary = air.install(answer["answer"])
    assert summary["kind"] == "activation" and summary["license_id"] == lic.id
    camera = air.engine()
    assert camera.start() == "active"
    camera.require("detect")
    camera.count(inferences=7, frames=3)
    air.clock.now = T0 + HOUR + 20  # the period closes
    camera.count(inferences=1)
    usage = camera.usage_export()
    camera.close()
    assert usage.startswith("SVCE1.")

    response = air.upload(usage)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["accepted"], body["duplicates"], body["revoked"]) == (1, 0, False)
    assert UsageRecord.objects.get(license_id=lic.id).inferences == 7
    summary = air.install(body["answer"])
    assert (summary["kind"], summary["removed"], summary["pending"]) == ("usage", 1, 0)
    sizes = {
        "request": len(request), "activation answer": len(answer["answer"]),
        "usage (1 record)": len(usage), "receipt": len(body["answer"]),
    }  # fmt: skip
    print("file sizes (characters, one line each):", sizes)
    # Each fits a QR code of version 40 in byte mode (2,953 bytes) but the activation
    # answer with a key certificate chain; docs/devices.md states these sizes.
    assert sizes["request"] < 1400 and sizes["usage (1 record)"] < 1400
    assert sizes["activation answer"] < 4000 and sizes["receipt"] < 3000
    # The same file again changes nothing: a duplicate, the same totals, one row per file.
    again = air.upload(usage).json()
    assert (again["accepted"], again["duplicates"]) == (0, 1)
    assert UsageRecord.objects.filter(license_id=lic.id).count() == 1
    assert OfflineExchange.objects.filter(license_id=lic.id).count() == 2
    # ...and its answer is refused by the device: that export was answered already.
    with pytest.raises(devices.LicenseError) as replayed:
        air.install(again["answer"])
    assert replayed.value.code == "RECEIPT_INVALID"
    camera = air.engine()
    assert camera.start() == "active"
    camera.close()


def _edited(text: str, at: int) -> str:
    """``text`` with the base64url character at ``at`` changed."""
    at %= len(text)
    return text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :]


@pytest.mark.parametrize("damage", ["truncated", "edited", "another kind", "empty"])
def test_a_damaged_request_file_is_a_400_and_takes_no_seat(air, damage):
    request = air.request()
    text = {
        "truncated": request[: len(request) // 2],
        "edited": _edited(request, 40),
        "another kind": "SVCE1" + request[5:],
        "empty": " ",
    }[damage]
    response = air.post_request(text)
    assert response.status_code == 400
    if damage != "empty":
        assert "BAD_REQUEST" in response.json()["detail"]
    assert _seats(air.batch["batch_id"]) == 0 and not OfflineExchange.objects.exists()


def test_request_files_take_seats_by_the_online_rules(air, admin_api):
    for name in ("cam-1", "cam-2"):
        assert air.post_request(air.request(name)).status_code == 200
    exhausted = air.post_request(air.request("cam-3"))
    assert exhausted.status_code == 402
    assert "exhausted" in exhausted.json()["detail"]
    assert _seats(air.batch["batch_id"]) == 2
    air.revoke(air.batch["license_id"])  # the batch key
    revoked = air.post_request(air.request("cam-4"))
    assert revoked.status_code == 403 and "revoked" in revoked.json()["detail"]
    forged = air.request("cam-5", batch_token=_edited(air.batch["batch_token"], 30))
    assert air.post_request(forged).status_code == 403
    assert _seats(air.batch["batch_id"]) == 2


def test_request_files_count_against_the_activation_rate_limit(air, settings):
    settings.SVC_ACTIVATION_ALLOWLIST = []
    settings.SVC_ACTIVATION_RATE = "1/10s"
    outside = {"REMOTE_ADDR": "198.51.100.7"}
    assert air.post_request(air.request("cam-1"), **outside).status_code == 200
    limited = air.post_request(air.request("cam-2"), **outside)
    assert limited.status_code == 429 and "activation rate limit" in limited.json()["detail"]
    assert int(limited.headers["Retry-After"]) >= 1
    assert _seats(air.batch["batch_id"]) == 1


def test_an_answer_for_another_device_or_tampered_is_refused_and_changes_nothing(air):
    answer = air.post_request(air.request("cam-a")).json()["answer"]
    air.request("cam-b")  # cam-b awaits an answer of its own
    with pytest.raises(devices.WrongDevice):
        air.install(answer, "cam-b")
    for damaged in (answer[: len(answer) - 10], _edited(answer, 60), _edited(answer, -2)):
        with pytest.raises(devices.LicenseError) as refused:
            air.install(damaged, "cam-a")
        assert refused.value.code == "BAD_SIGNATURE"
    assert not (air.state("cam-a") / "license.token").exists()
    assert not (air.state("cam-b") / "license.token").exists()
    # The intact answer installs once; again, it is a replay.
    assert air.install(answer, "cam-a")["kind"] == "activation"
    with pytest.raises(devices.LicenseError) as replayed:
        air.install(answer, "cam-a")
    assert replayed.value.code == "RECEIPT_INVALID"


def test_an_answer_no_request_awaits_is_refused(air):
    answer = air.post_request(air.request("cam-a")).json()["answer"]
    elsewhere = air.state("cam-a").with_name("cam-a-reinstalled")
    with pytest.raises(devices.LicenseError) as refused:
        devices.offline_install(
            answer, elsewhere, public_key=air.public_key, device_id="cam-a", clock=air.clock
        )
    assert refused.value.code == "RECEIPT_INVALID"


def test_a_damaged_or_foreign_usage_file_stores_nothing(air):
    first = air.activated("cam-a")
    air.activated("cam-b")
    camera = air.engine("cam-a")
    camera.start()
    camera.count(inferences=5)
    air.clock.now = T0 + HOUR + 30
    usage = camera.usage_export()
    camera.close()
    for damaged in (usage[: len(usage) // 2], _edited(usage, 50)):
        response = air.upload(damaged)
        assert response.status_code == 400 and "BAD_REQUEST" in response.json()["detail"]
    token = (air.state("cam-a") / "license.token").read_text().strip()
    claimed_by_b = offline.export_text(
        token=token, device_id="cam-b", license_id=first["license_id"], nonce="n1",
        records=[], now=T0,
    )  # fmt: skip
    assert air.upload(claimed_by_b).status_code == 403
    forged = offline.export_text(
        token=_edited(token, 40), device_id="cam-a", license_id=first["license_id"],
        nonce="n2", records=[], now=T0,
    )  # fmt: skip
    assert air.upload(forged).status_code == 401
    assert not UsageRecord.objects.exists()
    assert air.upload(usage).json()["accepted"] == 1


def test_a_revocation_travels_in_the_next_usage_answer(air):
    unit = air.activated("cam-a")
    camera = air.engine("cam-a")
    camera.start()
    camera.count(inferences=5)
    air.clock.now = T0 + HOUR + 30
    camera.count(inferences=1)
    air.revoke(unit["license_id"])
    usage = camera.usage_export()
    answer = air.upload(usage).json()
    assert answer["revoked"] is True and answer["accepted"] == 0
    assert not UsageRecord.objects.exists()
    summary = camera.offline_install(answer["answer"])
    assert summary["revoked"] is True and summary["pending"] == 1  # nothing was received
    with pytest.raises(devices.Revoked):
        camera.require("detect")
    camera.close()
    with pytest.raises(devices.Revoked):
        air.engine("cam-a").start()


def test_a_lease_starts_again_at_each_file_exchange(air, admin_api, customer):
    batch = admin_api.post(
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 1, "max_offline_days": 7},
        format="json",
    ).json()
    request = air.request("cam-l", batch_token=batch["batch_token"])
    air.install(air.post_request(request).json()["answer"], "cam-l")
    camera = air.engine("cam-l")
    camera.start()
    air.clock.now = T0 + 8 * 86400
    with pytest.raises(devices.LeaseExpired):
        camera.require("detect")
    summary = camera.offline_install(air.upload(camera.usage_export()).json()["answer"])
    assert summary["lease_end"] == T0 + 15 * 86400
    camera.require("detect")
    camera.close()


def test_the_command_line_writes_and_installs_the_files(air, admin_api, customer, tmp_path, capsys):
    air.clock.now = time.time()  # the command line reads the real clock
    batch = admin_api.post(
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 1},
        format="json",
    ).json()
    key = tmp_path / "batch.key"
    key.write_text(batch["batch_token"] + "\n")
    pub = tmp_path / "licence.pub"
    pub.write_text(air.public_key)
    state = ["--state-dir", str(air.state("cam-cli")), "--device-id", "cam-cli"]
    request = tmp_path / "req.svcreq"
    assert main(["offline-request", "--batch-key", str(key), "--out", str(request), *state]) == 0
    assert (request.stat().st_mode & 0o777) == 0o600
    answer = tmp_path / "resp.svcresp"
    answer.write_text(air.post_request(request.read_text()).json()["answer"])
    assert main(["offline-install", str(answer), "--pubkey", str(pub), *state]) == 0
    assert "kind=activation" in capsys.readouterr().out
    assert main(["offline-install", str(answer), "--pubkey", str(pub), *state]) == 2
    assert "error: RECEIPT_INVALID" in capsys.readouterr().err
    usage = tmp_path / "usage.svcuse"
    assert main(["usage-export", "--out", str(usage), "--pubkey", str(pub), *state]) == 0
    receipt = tmp_path / "receipt.svcrcpt"
    receipt.write_text(air.upload(usage.read_text()).json()["answer"])
    assert main(["offline-install", str(receipt), "--pubkey", str(pub), *state]) == 0
    assert "kind=usage" in capsys.readouterr().out


def _customer_client(customer, *, write: bool) -> APIClient:
    _, key = customer_key_create(
        customer_id=customer.pk, name=f"site-{write}", created_by="t", write=write
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_the_customer_api_answers_files_with_a_write_key_for_its_own_batches(air, customer):
    reader = _customer_client(customer, write=False)
    writer = _customer_client(customer, write=True)
    request = air.request("cam-c")
    refused = reader.post("/v1/customer/offline/activations", {"request": request}, format="json")
    assert refused.status_code == 403 and "read-only" in refused.json()["detail"]
    assert _seats(air.batch["batch_id"]) == 0
    answered = writer.post("/v1/customer/offline/activations", {"request": request}, format="json")
    assert answered.status_code == 200, answered.json()
    assert _seats(air.batch["batch_id"]) == 1
    row = OfflineExchange.objects.get(device_id="cam-c")
    assert row.channel == "customer-api" and row.customer_id == customer.pk
    air.install(answered.json()["answer"], "cam-c")
    usage = air.export("cam-c")
    stored = writer.post("/v1/customer/offline/usage", {"usage": usage}, format="json")
    assert stored.status_code == 200 and stored.json()["revoked"] is False
    assert reader.post("/v1/customer/offline/usage", {"usage": usage}).status_code == 403

    # Another customer's write key: the batch and the licence do not exist for it.
    other = _customer_client(CustomerFactory(), write=True)
    foreign = other.post(
        "/v1/customer/offline/activations", {"request": air.request("cam-d")}, format="json"
    )
    assert foreign.status_code == 404 and "no such batch key" in foreign.json()["detail"]
    assert _seats(air.batch["batch_id"]) == 1
    foreign = other.post("/v1/customer/offline/usage", {"usage": usage}, format="json")
    assert foreign.status_code == 404
    assert OfflineExchange.objects.count() == 2
