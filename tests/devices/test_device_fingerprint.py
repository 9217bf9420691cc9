"""Device fingerprint sources in spec order (§1), read under a fake root directory."""

from __future__ import annotations

import hashlib

import pytest

import devices
from devices import LicenseError, hardware

SERIAL = "sys/firmware/devicetree/base/serial-number"
DMI = "sys/class/dmi/id/product_uuid"
MACHINE_ID = "etc/machine-id"


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setattr(hardware.sys, "platform", "linux")
    return tmp_path


def put(root, relative, text):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def nic(root, name, mac, *, physical=True):
    put(root, f"sys/class/net/{name}/address", mac + "\n")
    if physical:
        (root / f"sys/class/net/{name}/device").mkdir()


@pytest.fixture
def full_root(root):
    put(root, SERIAL, "10000000abcdef01\x00")
    put(root, DMI, "4C4C4544-0042-3510-8052-B4C04F4E4D32\n")
    put(root, MACHINE_ID, "3d1219c7c4c5404aaa1f6d2a48adfda4\n")
    nic(root, "eth0", "DC:A6:32:01:02:03")
    return root


def test_env_override_wins_outright(full_root):
    found = devices.fingerprint(environ={"SVC_DEVICE_ID": " CAM-Line3-07 "}, root=full_root)
    assert found == devices.Fingerprint("CAM-Line3-07", "env", weak=False)


def test_devicetree_serial_comes_second(full_root):
    found = devices.fingerprint(environ={}, root=full_root)
    assert (found.value, found.source, found.weak) == ("10000000abcdef01", "devicetree", False)


def test_dmi_product_uuid_when_no_devicetree(full_root):
    (full_root / SERIAL).unlink()
    found = devices.fingerprint(environ={"SVC_DEVICE_ID": ""}, root=full_root)
    assert (found.value, found.source) == ("4c4c4544-0042-3510-8052-b4c04f4e4d32", "dmi")


def test_machine_id_when_no_firmware_identity(full_root):
    (full_root / SERIAL).unlink()
    (full_root / DMI).unlink()
    found = devices.fingerprint(environ={}, root=full_root)
    assert (found.value, found.source) == ("3d1219c7c4c5404aaa1f6d2a48adfda4", "machine-id")


def test_placeholder_identities_are_skipped(full_root):
    put(full_root, SERIAL, "\x00")
    put(full_root, DMI, "00000000-0000-0000-0000-000000000000\n")
    put(full_root, MACHINE_ID, "uninitialized\n")
    found = devices.fingerprint(environ={}, root=full_root)
    assert (found.value, found.source, found.weak) == ("dc:a6:32:01:02:03", "mac", True)


def test_macos_platform_uuid_only_on_darwin(full_root, monkeypatch):
    for relative in (SERIAL, DMI, MACHINE_ID):
        (full_root / relative).unlink()
    monkeypatch.setattr(hardware, "_macos_platform_uuid", lambda: "uuid-of-this-mac")
    assert devices.fingerprint(environ={}, root=full_root).source == "mac"
    monkeypatch.setattr(hardware.sys, "platform", "darwin")
    found = devices.fingerprint(environ={}, root=full_root)
    assert (found.value, found.source, found.weak) == ("uuid-of-this-mac", "macos", False)


def test_ioreg_output_is_parsed(monkeypatch):
    out = '  "IOPlatformUUID" = "A1B2C3D4-0000-1111-2222-333344445555"\n'

    class Done:
        stdout = out

    monkeypatch.setattr("subprocess.run", lambda *a, **k: Done())
    assert hardware._macos_platform_uuid() == "a1b2c3d4-0000-1111-2222-333344445555"


def test_mac_is_weak_and_skips_loopback_and_prefers_physical(root):
    nic(root, "lo", "00:00:00:00:00:00", physical=False)
    nic(root, "docker0", "02:42:ac:11:00:02", physical=False)
    nic(root, "wlan0", "b8:27:eb:00:00:02")
    nic(root, "eth0", "b8:27:eb:00:00:01")
    assert devices.fingerprint(environ={}, root=root) == devices.Fingerprint(
        "b8:27:eb:00:00:01", "mac", weak=True
    )


def test_overlong_identity_is_hashed_to_fit_128_characters(root):
    put(root, SERIAL, "S" * 200)
    found = devices.fingerprint(environ={}, root=root)
    assert found.value == hashlib.sha256(b"s" * 200).hexdigest()


def test_no_source_at_all_is_a_clear_error(root):
    with pytest.raises(LicenseError, match="SVC_DEVICE_ID") as caught:
        devices.fingerprint(environ={}, root=root)
    assert caught.value.code == "NO_FINGERPRINT"


def test_engine_defaults_device_id_to_fingerprint(full_root, monkeypatch, public_key, tmp_path):
    monkeypatch.setenv("SVC_DEVICE_ID", "cam-from-env")
    engine = devices.Engine(tmp_path / "s", public_key=public_key)
    assert engine.device_id == "cam-from-env"
