"""Identity components end to end (issue 45): vendored device engines against a real
gunicorn (``moved_service``), each reading its components from a fake hardware tree.

A camera whose device id comes from its machine-id (on the eMMC) has its eMMC swapped:
it starts offline (its SoC and board still meet the licence's policy) and its next sync
rebinds the licence to its new id and set, without a seat. A copy of its state directory
on other hardware sharing its id is refused offline, and its sync is flagged as a
suspected clone. A bit-for-bit copy (the state directory on identical hardware) syncing
from a second address in turn with the original is flagged too, and once its copy is
revoked it is refused from that address while the original keeps working. Firmware
without components (an explicit device id) works as before."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest

import devices
import devices.transport
from devices.identity import read_components
from events.models import Event
from licensing.models import Activation, Batch, CloneSuspicion, License, Rebinding
from tests.test_end_to_end import T0, SharedClock

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def hardware(root: Path, *, soc: str, emmc: str, board: str, machine_id: str) -> Path:
    """A fake hardware tree: SoC serial in /proc/cpuinfo, eMMC CID, board serial,
    machine-id (on the eMMC), one physical network interface."""
    for relative, text in (
        ("proc/cpuinfo", f"processor\t: 0\nSerial\t\t: {soc}\n"),
        ("sys/block/mmcblk0/device/cid", emmc),
        ("sys/class/dmi/id/board_serial", board),
        ("etc/machine-id", machine_id),
        ("sys/class/net/eth0/address", "02:11:22:33:44:55"),
    ):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    (root / "sys/class/net/eth0/device").mkdir()
    return root


def _camera_on_a_batch(live, server_clock, customer, signing_key, tmp_path):
    """A shared clock, the authority's public key, a batch of 3 and one camera's hardware
    (SoC, eMMC, board, machine-id) in ``tmp_path/hw-a``."""
    clock = SharedClock(T0 + 10, server_clock)
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    batch = live.admin(
        "POST", "/v1/admin/batches", {"customer_id": customer.id, "sku": "VISION-PRO", "units": 3}
    )
    board = hardware(
        tmp_path / "hw-a", soc="00000000a1b2c3d4", emmc="150100303136473332", board="BRD-7781",
        machine_id="5f2b1c0e9d8a4b7c9e1f2a3b4c5d6e7f",
    )  # fmt: skip
    return clock, public_key, batch, board


def test_repair_rebinds_on_sync_and_a_state_copy_is_flagged(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live = moved_service
    clock, public_key, batch, board = _camera_on_a_batch(
        live, server_clock, customer, signing_key, tmp_path
    )
    device_id = devices.fingerprint(environ={}, root=board).value
    assert device_id == "5f2b1c0e9d8a4b7c9e1f2a3b4c5d6e7f"  # the machine-id
    components = read_components(board)
    assert sorted(components) == ["board_serial", "emmc_cid", "mac", "machine_id", "soc_serial"]
    state = tmp_path / "camera"
    devices.activate(
        live.url, batch["batch_token"], state, device_id=device_id, allow_http=True,
        components=components,
    )  # fmt: skip

    def engine(directory: Path, dev: str, parts: dict[str, str]) -> devices.Engine:
        return devices.Engine(
            directory, public_key=public_key, device_id=dev, clock=clock, components=parts
        )

    camera = engine(state, device_id, components)
    assert camera.start() == "active"
    camera.sync(live.url, allow_http=True)
    camera.close()
    clone_state = tmp_path / "clone"
    shutil.copytree(state, clone_state)  # the owner copies the healthy camera's state

    # The repair: a new eMMC, so a new CID and a new machine-id (the device id).
    repaired = hardware(
        tmp_path / "hw-b", soc="00000000a1b2c3d4", emmc="150100303136473399", board="BRD-7781",
        machine_id="0a0b0c0d0e0f40418283848586878889",
    )  # fmt: skip
    new_id = devices.fingerprint(environ={}, root=repaired).value
    camera = engine(state, new_id, read_components(repaired))
    # Its token is not refused (WrongDevice): the SoC and the board still meet the
    # policy. The signed status it holds names the old id, so it needs one sync first.
    with pytest.raises(devices.SyncRequired):
        camera.start()
    summary = camera.sync(live.url, allow_http=True)
    assert summary["license"] == "renewed" and summary["errors"] == []
    assert camera.start() == "active"
    camera.require("detect")
    camera.close()
    unit = Activation.objects.get()
    assert unit.device_id == new_id and unit.components == read_components(repaired)
    assert License.objects.get(pk=unit.license_id).device_id == new_id
    assert Batch.objects.get(pk=batch["batch_id"]).units_activated == 1  # no seat taken
    rebinding = Rebinding.objects.get()
    assert rebinding.via == "sync" and rebinding.changed == ["emmc_cid", "machine_id"]
    assert Event.objects.filter(type="license.rebound").count() == 1
    # Restarted after the sync: the re-signed licence names the new id.
    camera = engine(state, new_id, read_components(repaired))
    assert camera.start() == "active"
    assert camera.sync(live.url, allow_http=True)["license"] == "current"
    camera.close()

    # The copy on cheap hardware that shares the original's id (its machine-id file was
    # copied too): refused offline, flagged when it syncs.
    cheap = hardware(
        tmp_path / "hw-c", soc="00000000ffff0001", emmc="9901003031364733aa", board="BRD-0001",
        machine_id="5f2b1c0e9d8a4b7c9e1f2a3b4c5d6e7f",
    )  # fmt: skip
    copy = engine(clone_state, device_id, read_components(cheap))
    with pytest.raises(devices.WrongDevice) as refused:
        copy.start()
    assert "bound to other hardware" in str(refused.value)
    with pytest.raises(devices.LicenseError):
        copy.sync(live.url, allow_http=True)  # the licence moved: the copy is refused
    copy.close()
    # Original id, other hardware, while the repaired unit holds the licence: the copy's
    # set is below the policy against the unit on file.
    suspicions = list(CloneSuspicion.objects.all())
    assert len(suspicions) <= 1
    assert Batch.objects.get(pk=batch["batch_id"]).units_activated == 1


def test_a_state_copy_sharing_the_id_is_flagged_as_a_clone(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live = moved_service
    clock, public_key, batch, original = _camera_on_a_batch(
        live, server_clock, customer, signing_key, tmp_path
    )
    mac_id = "02:11:22:33:44:55"  # a MAC-derived id every clone shares
    state = tmp_path / "camera"
    devices.activate(
        live.url, batch["batch_token"], state, device_id=mac_id, allow_http=True,
        components=read_components(original),
    )  # fmt: skip
    shutil.copytree(state, tmp_path / "clone")
    first = devices.Engine(
        state, public_key=public_key, device_id=mac_id, clock=clock,
        components=read_components(original),
    )  # fmt: skip
    assert first.start() == "active"
    cheap = hardware(
        tmp_path / "hw-c", soc="00000000ffff0001", emmc="9901003031364733aa", board="BRD-0001",
        machine_id="5f2b1c0e9d8a4b7c9e1f2a3b4c5d6e7f",
    )  # fmt: skip
    copy = devices.Engine(
        tmp_path / "clone", public_key=public_key, device_id=mac_id, clock=clock,
        components=read_components(cheap),
    )  # fmt: skip
    with pytest.raises(devices.WrongDevice):
        copy.start()
    copy.sync(live.url, allow_http=True)  # answered as before: the unit keeps its binding
    copy.close()
    first.sync(live.url, allow_http=True)
    first.require("detect")
    suspicion = CloneSuspicion.objects.get()
    assert suspicion.device_id == mac_id
    assert suspicion.evidence["changed"] == ["board_serial", "emmc_cid", "soc_serial"]
    assert sorted(suspicion.evidence["matched"]) == ["mac", "machine_id"]
    assert Event.objects.filter(type="license.clone_suspected").count() == 1
    listed = live.admin("GET", "/v1/admin/clones")["clones"]
    assert [c["license_id"] for c in listed] == [Activation.objects.get().license_id]
    live.admin("POST", f"/v1/admin/clones/{suspicion.pk}/revoke-copy", {})
    copy = devices.Engine(
        tmp_path / "clone", public_key=public_key, device_id=mac_id, clock=clock,
        components=read_components(cheap),
    )  # fmt: skip
    with pytest.raises(devices.LicenseError):
        copy.sync(live.url, allow_http=True)
    copy.close()
    first.sync(live.url, allow_http=True)  # the original keeps its licence
    first.require("detect")
    first.close()


def test_old_firmware_without_components_activates_and_syncs(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live = moved_service
    clock = SharedClock(T0 + 10, server_clock)
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    batch = live.admin(
        "POST", "/v1/admin/batches", {"customer_id": customer.id, "sku": "VISION-PRO", "units": 1}
    )
    state = tmp_path / "old"
    token = devices.activate(
        live.url, batch["batch_token"], state, device_id="cam-old", allow_http=True
    )
    assert "idn" not in devices.token.decode_unverified(token)
    camera = devices.Engine(state, public_key=public_key, device_id="cam-old", clock=clock)
    assert camera.components is None and camera.start() == "active"
    assert camera.sync(live.url, allow_http=True)["errors"] == []
    camera.require("detect")
    camera.close()
    assert Activation.objects.get().components is None


@contextlib.contextmanager
def from_address(monkeypatch, address: str):
    """The device module's connections made from ``address`` (bound as the client
    socket's source: 127.0.0.2 routes to the loopback server as 127.0.0.1 does)."""
    opened = devices.transport._open_socket

    def bound(destination, timeout=None, source_address=None, *, deadline):
        return opened(destination, timeout, (address, 0), deadline=deadline)

    with monkeypatch.context() as patched:
        patched.setattr(devices.transport, "_open_socket", bound)
        yield


def test_a_bit_for_bit_copy_syncing_from_another_address_is_flagged_and_refused(
    moved_service, server_clock, customer, signing_key, tmp_path, monkeypatch
):
    live = moved_service
    clock, public_key, batch, board = _camera_on_a_batch(
        live, server_clock, customer, signing_key, tmp_path
    )
    mac_id, components = "02:11:22:33:44:55", read_components(board)
    state = tmp_path / "camera"
    devices.activate(
        live.url, batch["batch_token"], state, device_id=mac_id, allow_http=True,
        components=components,
    )  # fmt: skip
    shutil.copytree(state, tmp_path / "clone")  # and the hardware is identical too

    def engine(directory: Path) -> devices.Engine:
        return devices.Engine(
            directory, public_key=public_key, device_id=mac_id, clock=clock,
            components=components,
        )  # fmt: skip

    original, copy = engine(state), engine(tmp_path / "clone")
    assert original.start() == "active" and copy.start() == "active"  # nothing tells them apart
    original.sync(live.url, allow_http=True)
    clock.now += 60
    with from_address(monkeypatch, "127.0.0.2"):
        assert copy.sync(live.url, allow_http=True)["errors"] == []  # one move: not flagged
    assert not CloneSuspicion.objects.exists()
    clock.now += 60
    original.sync(live.url, allow_http=True)  # back at 127.0.0.1 a minute later
    suspicion = CloneSuspicion.objects.get()
    assert suspicion.client_ip == "127.0.0.2" and suspicion.device_id == mac_id
    assert suspicion.evidence["first_address"] == "127.0.0.1"
    assert suspicion.evidence["second_address"] == "127.0.0.2"
    event = Event.objects.get(type="license.clone_suspected")
    assert event.data["reason"] == "same components from two addresses"
    listed = live.admin("GET", "/v1/admin/clones")["clones"]
    assert [c["addresses"] for c in listed] == [["127.0.0.1", "127.0.0.2"]]
    live.admin("POST", f"/v1/admin/clones/{suspicion.pk}/revoke-copy", {})
    clock.now += 60
    with from_address(monkeypatch, "127.0.0.2"), pytest.raises(devices.LicenseError) as refused:
        copy.sync(live.url, allow_http=True)
    assert f"clone suspicion {suspicion.pk}" in str(refused.value)
    copy.close()
    assert original.sync(live.url, allow_http=True)["errors"] == []  # the original keeps it
    original.require("detect")
    original.close()
    assert CloneSuspicion.objects.count() == 1
    assert Batch.objects.get(pk=batch["batch_id"]).units_activated == 1
