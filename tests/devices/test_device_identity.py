"""devices.identity (issue 45): components read from a fake hardware tree, the matching
policy (one rule for device and service), and the offline check of the ``idn`` claim."""

from __future__ import annotations

import pytest

from devices import identity
from devices.errors import InvalidArgument


def tree(root, **files):
    paths = {
        "cpuinfo": "proc/cpuinfo",
        "devicetree": "sys/firmware/devicetree/base/serial-number",
        "cid": "sys/block/mmcblk0/device/cid",
        "board": "sys/class/dmi/id/board_serial",
        "machine_id": "etc/machine-id",
        "mac": "sys/class/net/eth0/address",
    }
    for key, text in files.items():
        path = root / paths[key]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_components_are_read_hashed_and_named(tmp_path):
    root = tree(
        tmp_path,
        cpuinfo="processor : 0\nSerial\t\t: 00000000A1B2C3D4\n",
        cid="150100303136473332\n",
        board="BRD-1\n",
        machine_id="5f2b1c0e9d8a4b7c9e1f2a3b4c5d6e7f\n",
        mac="02:11:22:33:44:55\n",
    )
    found = identity.read_components(root, extra={"tpm_ek": "EKHASH", "weak_label": "x"})
    assert sorted(found) == [
        "board_serial", "emmc_cid", "mac", "machine_id", "soc_serial", "tpm_ek", "weak_label",
    ]  # fmt: skip
    assert found["soc_serial"] == identity.component_digest("soc_serial", "a1b2c3d4")
    assert all(len(d) == 64 and d == d.lower() for d in found.values())
    assert "a1b2c3d4" not in repr(found)  # no raw id leaves
    assert identity.is_weak("weak_label") and identity.is_weak("mac")
    assert not identity.is_weak("tpm_ek")


def test_the_devicetree_serial_wins_and_placeholders_are_left_out(tmp_path):
    root = tree(tmp_path, devicetree="SOC-77\x00", board="00000000\n", cid="\n")
    assert list(identity.read_components(root)) == ["soc_serial"]


def test_bad_extra_is_refused(tmp_path):
    with pytest.raises(InvalidArgument):
        identity.read_components(tmp_path, extra={"Bad Name": "x"})
    with pytest.raises(InvalidArgument):
        identity.read_components(tmp_path, extra=["x"])


def d(name, value="v"):
    return identity.component_digest(name, value)


BOUND = {name: d(name) for name in ("soc_serial", "emmc_cid", "board_serial", "mac")}


@pytest.mark.parametrize(
    ("presented", "policy", "meets"),
    [
        (BOUND, "all", True),
        ({**BOUND, "emmc_cid": d("emmc_cid", "new")}, "all", False),
        ({**BOUND, "emmc_cid": d("emmc_cid", "new")}, "most", True),
        (
            {**BOUND, "emmc_cid": d("emmc_cid", "n"), "board_serial": d("board_serial", "n")},
            "most",
            False,
        ),
        (
            {**BOUND, "emmc_cid": d("emmc_cid", "n"), "board_serial": d("board_serial", "n")},
            "most:1",
            True,
        ),
        ({**BOUND, "emmc_cid": d("emmc_cid", "n")}, "most:3", False),
        ({"soc_serial": d("soc_serial")}, "one:soc_serial", True),
        ({**BOUND, "soc_serial": d("soc_serial", "n")}, "one:soc_serial", False),
        ({"mac": d("mac")}, "most:1", False),  # weak never counts alone
    ],
)
def test_policy(presented, policy, meets):
    assert identity.compare(BOUND, presented, policy).meets is meets


def test_fewer_strong_components_than_n_need_all_of_them():
    bound = {"soc_serial": d("soc_serial"), "mac": d("mac")}
    assert identity.compare(bound, bound, "most:2").meets
    only_weak = {"machine_id": d("machine_id"), "mac": d("mac")}
    assert not identity.compare(only_weak, only_weak, "most").meets


@pytest.mark.parametrize("policy", ["all", "most", "most:3", "one:soc_serial"])
def test_valid_policies(policy):
    assert identity.policy_problem(policy) == ""


@pytest.mark.parametrize("policy", ["", "some", "most:0", "one:mac", "one:weak_x", 3, None])
def test_invalid_policies(policy):
    assert identity.policy_problem(policy)


def test_offline_check():
    claims = {"dev": "cam-1", "idn": identity.claim(BOUND, "most:2")}
    assert identity.offline_check(claims, "cam-1", BOUND) == ""
    repaired = {**BOUND, "emmc_cid": d("emmc_cid", "n")}
    assert identity.offline_check(claims, "cam-2", repaired) == ""  # a repair, new id
    clone = {name: d(name, "clone") for name in BOUND}
    assert "other hardware" in identity.offline_check(claims, "cam-1", clone)
    # Without components (explicit id) or without the claim: the id decides.
    assert identity.offline_check(claims, "cam-1", None) == ""
    assert identity.offline_check({"dev": "cam-1"}, "cam-2", BOUND) == "bound to another device"
    bad = {"dev": "cam-1", "idn": {"pol": "x", "cmp": {}}}
    assert "unusable" in identity.offline_check(bad, "cam-1", BOUND)
