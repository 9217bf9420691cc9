"""One shape, one class: every answer of the API has exactly the fields of the serializer
its view renders through, which is also its OpenAPI schema. The revocation list goes out
as bytes built once per change of the list, so here its bytes are held to its two
classes key for key; the rest render through their class, and this proves no view
answers around it."""

from __future__ import annotations

import time

import pytest
from rest_framework import serializers

from billing import serializers as billing_out
from customers import serializers as customers_out
from licensing import serializers as licensing_out
from licensing.selectors import FLEET_UNIT

pytestmark = pytest.mark.django_db


def _fields(serializer_class: type[serializers.Serializer]) -> set[str]:
    return set(serializer_class().fields)


def _records(inferences: list[int]) -> list[dict]:
    """One record of ten minutes ago (within the licence just activated) per count of
    ``inferences``, all for the same period (the second is a conflict), and one dated
    1970 (refused: before the licence's life)."""
    start = int(time.time()) - 600
    counts = {"frames": 6, "stream_seconds": 60, "events": 1}
    return [
        {"period_start": start, "period_end": start + 60, "inferences": n} | counts
        for n in inferences
    ] + [{"period_start": 0, "period_end": 60, "inferences": 1} | counts]


def _upload(device_api, device_id: str, unit_token: str, records: list[dict]):
    return device_api.post(
        "/v1/usage",
        {"device_id": device_id, "records": records},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {unit_token}",
    )


def _activate(device_api, batch, device_id: str) -> dict:
    response = device_api.post(
        "/v1/activate", {"batch_token": batch.license.token, "device_id": device_id}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_device_answers_have_the_fields_of_their_classes(device_api, make_batch):
    batch = make_batch(units=3)
    new = _activate(device_api, batch, "cam-shape-1")
    assert set(new) == _fields(licensing_out.ActivateOut)
    again = _activate(device_api, batch, "cam-shape-1")
    assert set(again) == _fields(licensing_out.ActivateOut) - {"batch_units_remaining"}

    full = device_api.get("/v1/revocations").json()
    assert set(full) == _fields(licensing_out.RevocationFullOut)
    page = device_api.get("/v1/revocations", {"since": 0}).json()
    assert set(page) == _fields(licensing_out.RevocationPageOut)
    for body, shape in (
        (full, licensing_out.RevocationFullOut),
        (page, licensing_out.RevocationPageOut),
    ):
        checked = shape(data=body)
        assert checked.is_valid(), checked.errors

    status = device_api.get(
        "/v1/revocations/status", {"license_id": new["license_id"], "device_id": "cam-shape-1"}
    ).json()
    assert set(status) == _fields(licensing_out.LicenseStatusOut)

    upload = _upload(device_api, "cam-shape-1", new["unit_token"], _records([5, 7]))
    assert upload.status_code == 200, upload.content
    answer = upload.json()
    assert set(answer) == _fields(billing_out.UsageUploadOut) - {"deferred"}
    assert (answer["accepted"], len(answer["conflicts"]), len(answer["refused"])) == (1, 1, 1)
    [conflict], [refused] = answer["conflicts"], answer["refused"]
    assert set(conflict) == _fields(billing_out.UsageConflictOut)
    assert set(conflict["held"]) == _fields(billing_out.UsageCountsOut)
    assert set(refused) == _fields(billing_out.UsageRefusedOut)


def test_operator_answers_have_the_fields_of_their_classes(admin_api, device_api, make_batch):
    batch = make_batch(units=2)
    unit = _activate(device_api, batch, "cam-shape-2")
    assert _upload(device_api, "cam-shape-2", unit["unit_token"], _records([5, 7])).json()[
        "conflicts"
    ]

    catalogue = admin_api.get("/v1/admin/catalogue").json()
    assert set(catalogue) == _fields(licensing_out.CatalogueOut)
    for entry in catalogue["skus"]:
        assert set(entry) == _fields(licensing_out.SkuOut)
        for tier in entry["unit_price_tiers"]:
            assert set(tier) == _fields(licensing_out.UnitPriceTierOut)
        for tier in entry["overage_tiers"]:
            assert set(tier) == _fields(licensing_out.OverageTierOut)

    fleet = admin_api.get("/v1/admin/fleet").json()
    assert set(fleet) == _fields(licensing_out.FleetOut)
    assert [list(unit) for unit in fleet["units"]] == [list(FLEET_UNIT)]

    preview = admin_api.get(f"/v1/admin/invoice/{batch.customer_id}").json()
    assert set(preview) == _fields(billing_out.InvoicePreviewOut)
    line_fields = _fields(billing_out.InvoiceLineOut)
    assert preview["lines"] and all(set(line) <= line_fields for line in preview["lines"])

    customer = admin_api.get(f"/v1/admin/customers/{batch.customer_id}").json()
    assert set(customer) == _fields(customers_out.CustomerOut)

    conflicts = admin_api.get("/v1/admin/usage/conflicts").json()
    assert set(conflicts) == _fields(billing_out.UsageConflictPageOut)
    [row] = conflicts["conflicts"]
    assert set(row) == _fields(billing_out.UsageConflictRowOut)
    assert set(row["held"]) == set(row["sent"]) == _fields(billing_out.UsageCountsOut)


def test_the_fleet_unit_class_names_the_selectors_fields_in_order():
    # The CSV export's columns are FLEET_UNIT; the JSON answer renders through
    # FleetUnitOut: one list of names for both.
    assert list(licensing_out.FleetUnitOut().fields) == list(FLEET_UNIT)


def test_no_schema_only_serializer_module_is_left():
    import importlib.util

    for module in ("licensing.schemas",):
        assert importlib.util.find_spec(module) is None, module
