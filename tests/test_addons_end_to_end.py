"""Add-on modules end to end (issue 42 item 4): the device module, unchanged, against a real
gunicorn whose clock moves with the camera's (``moved_service``).

A VISION-PRO camera (detect, defect, ppe) refuses ``require("anpr")``; the operator adds
the anpr add-on to its batch through the admin API; the camera, still offline, refuses
it; after one sync it runs it (and after a restart, from the licence file the sync
wrote); a camera activated after the add runs it at once. The operator removes the
add-on: the cameras keep it until their next sync, then refuse it again. The invoice
preview has one add-on line for the batch, billed pro rata to the batch's end."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pytest

import devices
from audit.models import AuditEntry
from licensing.models import AddOnCharge
from tests.test_end_to_end import HOUR, T0, SharedClock

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DAY = 86400


def test_require_anpr_refused_then_passing_after_one_sync_then_refused_after_removal(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live = moved_service
    clock = SharedClock(T0 + 10, server_clock)
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    batch = live.admin(
        "POST", "/v1/admin/batches", {"customer_id": customer.id, "sku": "VISION-PRO", "units": 5}
    )
    catalogue = live.admin("GET", "/v1/admin/catalogue")["skus"]
    offered = next(e for e in catalogue if e["sku"] == "VISION-PRO")["addons"]
    assert [(a["code"], a["modules"], a["unit_price"]) for a in offered] == [("anpr", ["anpr"], 60)]

    def camera(name: str) -> devices.Engine:
        state_dir = tmp_path / name
        if not state_dir.exists():
            devices.activate(
                live.url, batch["batch_token"], state_dir, device_id=name, allow_http=True
            )
        engine = devices.Engine(state_dir, public_key=public_key, device_id=name, clock=clock)
        assert engine.start() == "active"
        return engine

    first = camera("cam-early")
    first.require("ppe")
    with pytest.raises(devices.NotEntitled) as refused:
        first.require("anpr")
    assert refused.value.code == "NOT_ENTITLED"

    clock.now = T0 + 2 * DAY
    added = live.admin("POST", f"/v1/admin/batches/{batch['batch_id']}/addons", {"addon": "anpr"})
    assert (added["addon"], added["changed"], added["term_days"]) == ("anpr", True, 365)
    with pytest.raises(devices.NotEntitled):
        first.require("anpr")  # offline: nothing reaches the camera before it syncs

    clock.now = T0 + 2 * DAY + HOUR
    summary = first.sync(live.url, allow_http=True)
    assert summary["license"] == "renewed" and summary["errors"] == []
    first.require("anpr")
    first.require("ppe")
    assert first.claims["exp"] == batch["expires_at"]  # the same end, one module more
    assert first.sync(live.url, allow_http=True)["license"] == "current"
    first.close()
    first = camera("cam-early")  # a restart reads the licence file the sync wrote
    first.require("anpr")

    late = camera("cam-late")  # activated after the add: anpr at once
    late.require("anpr")

    charges = {c.license.device_id: c for c in AddOnCharge.objects.select_related("license")}
    assert sorted(charges) == ["cam-early", "cam-late"]
    early_days = -(-(batch["expires_at"] - (T0 + 2 * DAY + HOUR)) // DAY)
    assert charges["cam-early"].quantity == early_days

    clock.now = T0 + 5 * DAY
    removed = live.admin(
        "DELETE", f"/v1/admin/batches/{batch['batch_id']}/addons/anpr?reason=not%20renewed"
    )
    assert (removed["active"], removed["changed"]) == (False, True)
    first.require("anpr")  # until its next sync
    clock.now = T0 + 5 * DAY + HOUR
    assert first.sync(live.url, allow_http=True)["license"] == "renewed"
    with pytest.raises(devices.NotEntitled):
        first.require("anpr")
    first.require("ppe")
    clock.now = T0 + 5 * DAY + 2 * HOUR
    late.sync(live.url, allow_http=True)
    with pytest.raises(devices.NotEntitled):
        late.require("anpr")
    first.close()
    late.close()

    # Billed as one add-on line for the batch; the removal bills nothing back.
    assert AddOnCharge.objects.count() == 2
    preview = live.admin("GET", f"/v1/admin/invoice/{customer.id}")
    (line,) = [line for line in preview["lines"] if line["kind"] == "addon"]
    days = sum(c.quantity for c in charges.values())
    quantity = (Decimal(days) / 365).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)
    assert (line["batch_id"], line["unit_price"]) == (batch["batch_id"], 60)
    assert Decimal(str(line["quantity"])) == quantity
    assert Decimal(str(line["amount"])) == (quantity * 60).quantize(Decimal("0.01"))
    assert all(line["amount"] >= 0 for line in preview["lines"])
    types = [
        e["type"]
        for e in live.admin("GET", f"/v1/admin/events?customer_id={customer.id}")["events"]
    ]
    assert "license.addon_added" in types and "license.addon_removed" in types
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"license.addon_add", "license.addon_remove"} <= actions
