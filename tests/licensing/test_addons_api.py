"""The add-on endpoints (issue 42 item 4): GET/POST /v1/admin/batches/{id}/addons,
DELETE .../addons/{code}, the same under /v1/admin/licenses/{id}; the catalogue entry's
additive ``addons``. Errors are {"detail": ...} naming what to do; nothing is a 500."""

from __future__ import annotations

import pytest

from licensing.models import AddOn
from licensing.services import license_issue

pytestmark = pytest.mark.django_db


def test_the_catalogue_lists_each_skus_add_ons_in_its_currency(admin_api):
    skus = {entry["sku"]: entry for entry in admin_api.get("/v1/admin/catalogue").json()["skus"]}
    assert skus["VISION-PRO"]["addons"] == [
        {
            "code": "anpr",
            "name": "Number-plate recognition",
            "modules": ["anpr"],
            "extra_streams": 0,
            "extra_fps": 0,
            "extra_api_calls": 0,
            "unit_price": 60.00,
            "available": True,
        }
    ]
    assert skus["DETECT-STD"]["addons"][0]["extra_streams"] == 4
    assert skus["API-METERED"]["addons"] == []
    # The contract §5 fields are all still there, as they were.
    assert skus["VISION-PRO"]["modules"] == ["detect", "defect", "ppe"]


def test_add_list_and_remove_a_batch_add_on(admin_api, make_batch):
    batch = make_batch(units=3)
    url = f"/v1/admin/batches/{batch.id}/addons"

    added = admin_api.post(url, {"addon": "anpr"}, format="json")

    assert added.status_code == 201, added.json()
    body = added.json()
    assert body["addon"] == "anpr" and body["changed"] is True and body["active"] is True
    assert (body["batch_id"], body["license_id"]) == (batch.id, batch.license_id)
    assert (body["unit_price"], body["currency"], body["term_days"]) == (60.00, "EUR", 365)
    assert body["removed_at"] == 0 and body["expires_at"] == int(batch.expires_at.timestamp())
    again = admin_api.post(url, {"addon": "anpr"}, format="json")
    assert again.status_code == 200 and again.json()["changed"] is False

    listed = admin_api.get(url).json()
    assert [(a["addon"], a["active"]) for a in listed["addons"]] == [("anpr", True)]

    removed = admin_api.delete(f"{url}/anpr?reason=trial%20over")
    assert removed.status_code == 200, removed.json()
    assert removed.json()["active"] is False and removed.json()["remove_reason"] == "trial over"
    assert removed.json()["removed_at"] > 0
    assert admin_api.delete(f"{url}/anpr").json()["changed"] is False
    # Through the batch key's licence id, the same batch.
    keyed = admin_api.get(f"/v1/admin/licenses/{batch.license_id}/addons").json()
    assert keyed["batch_id"] == batch.id and len(keyed["addons"]) == 1


def test_a_direct_licenses_add_ons(admin_api, customer):
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-1")
    url = f"/v1/admin/licenses/{lic.id}/addons"
    added = admin_api.post(url, {"addon": "streams-4"}, format="json")
    assert added.status_code == 201 and added.json()["batch_id"] is None
    assert admin_api.get(url).json()["addons"][0]["extra_streams"] == 4
    assert admin_api.delete(f"{url}/streams-4").status_code == 200


@pytest.mark.parametrize(
    "path, body, status, detail",
    [
        (
            "batches/{batch}/addons",
            {"addon": "nope"},
            400,
            "has no add-on 'nope'; its add-ons are anpr",
        ),
        ("batches/{batch}/addons", {"addon": "Bad Code!"}, 400, "must be an add-on code"),
        ("batches/{batch}/addons", {}, 400, "addon"),
        ("batches/{batch}/addons", {"addon": 7}, 400, "addon"),
        ("batches/B-2026-NOSUCHBATCH/addons", {"addon": "anpr"}, 404, "does not exist"),
        ("licenses/{unit}/addons", {"addon": "anpr"}, 400, "add the add-on to the batch"),
        ("licenses/LIC-NOSUCHLICENSE/addons", {"addon": "anpr"}, 404, "does not exist"),
    ],
)
def test_refusals(admin_api, make_batch, device_api, path, body, status, detail):
    batch = make_batch(units=2)
    unit = device_api.post(
        "/v1/activate", {"batch_token": batch.license.token, "device_id": "cam-1"}, format="json"
    ).json()["license_id"]
    url = "/v1/admin/" + path.format(batch=batch.id, unit=unit)
    response = admin_api.post(url, body, format="json")
    assert response.status_code == status, response.json()
    assert detail in str(response.json()["detail"])


def test_removing_one_never_added_is_404_and_a_withdrawn_add_on_is_not_sold(admin_api, make_batch):
    batch = make_batch(units=2)
    gone = admin_api.delete(f"/v1/admin/batches/{batch.id}/addons/anpr")
    assert gone.status_code == 404 and "has no add-on 'anpr'" in gone.json()["detail"]
    AddOn.objects.filter(code="anpr").update(available=False)
    refused = admin_api.post(
        f"/v1/admin/batches/{batch.id}/addons", {"addon": "anpr"}, format="json"
    )
    assert refused.status_code == 400 and "no longer offered" in refused.json()["detail"]
