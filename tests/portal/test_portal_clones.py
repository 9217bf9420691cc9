"""The portal's suspected clones (issue 45): a customer sees its own, with the evidence
and the original, never another customer's."""

from __future__ import annotations

import pytest
from django.urls import reverse

from devices.identity import component_digest
from licensing.services import unit_activate

pytestmark = pytest.mark.django_db


def parts(**raw):
    return {name: component_digest(name, value) for name, value in raw.items()}


def cloned(world, tag: str) -> str:
    original = parts(soc_serial=f"{tag}-soc", emmc_cid=f"{tag}-cid", mac="02:00:00:00:00:01")
    copy = parts(soc_serial=f"{tag}-x", emmc_cid=f"{tag}-y", mac="02:00:00:00:00:01")
    token = world.batch.license.token
    unit = unit_activate(batch_token=token, device_id=f"{tag}-mac-cam", components=original)
    unit_activate(
        batch_token=token, device_id=f"{tag}-mac-cam", components=copy, client_ip="203.0.113.9"
    )
    return unit.license_id


def test_the_portal_lists_its_own_suspected_clones_with_evidence(worlds):
    alpha, beta = worlds
    mine, theirs = cloned(alpha, "ALPHA"), cloned(beta, "BETA")
    page = alpha.client().get(reverse("portal-clones"))
    body = page.content.decode()
    assert page.status_code == 200
    assert mine in body and theirs not in body
    assert "ALPHA-mac-cam" in body and "203.0.113.9" in body
    assert "changed emmc_cid, soc_serial; matched mac" in body and "suspected" in body
    assert 'href="/portal/clones/"' in body  # in the navigation


def test_a_bit_for_bit_clone_shows_its_two_addresses(worlds):
    """The second signal: the very components from two addresses in turn; the evidence
    names both, the times and which is the copy."""
    alpha, _ = worlds
    same = parts(soc_serial="ALPHA-soc", emmc_cid="ALPHA-cid", mac="02:00:00:00:00:02")
    token = alpha.batch.license.token
    for address in ("198.51.100.20", "203.0.113.77", "198.51.100.20"):
        unit_activate(batch_token=token, device_id="ALPHA-twin", components=same, client_ip=address)
    body = alpha.client().get(reverse("portal-clones")).content.decode()
    assert "same components from two addresses: from 198.51.100.20, then 203.0.113.77 at" in body
    assert "(within 900 s); the copy: 203.0.113.77" in body
    assert "UTC, back at" in body
