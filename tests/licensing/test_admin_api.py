"""Admin endpoints of spec §4.3 (catalogue, batches, licences, revoke, fleet) and the
X-Admin-Key gate of contract §4."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.urls import get_resolver
from django.utils import timezone
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api.views import DeviceApi
from devices.token import verify_token
from licensing.models import Batch, License
from licensing.services.activation import unit_activate
from operators.authentication import OperatorKeyAuthentication
from operators.permissions import IsOperator, requires
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db


def post(client, path, body):
    return client.post(path, body, format="json")


# --- X-Admin-Key --------------------------------------------------------------------


def test_missing_admin_key_is_401(device_api):
    response = device_api.get("/v1/admin/catalogue")
    assert response.status_code == 401
    assert response.json() == {"detail": "X-Admin-Key header required"}


def test_wrong_admin_key_is_403_and_not_echoed(device_api, settings):
    response = device_api.get("/v1/admin/fleet", HTTP_X_ADMIN_KEY="guess-" + "x" * 30)
    assert response.status_code == 403
    assert "guess" not in response.content.decode()
    assert settings.SVC_ADMIN_KEY not in response.content.decode()


def test_admin_api_answers_503_until_a_key_is_configured(admin_api, settings):
    settings.SVC_ADMIN_KEY = ""
    response = admin_api.get("/v1/admin/catalogue")
    assert response.status_code == 503
    assert "SVC_ADMIN_KEY" in response.json()["detail"]


def test_unknown_admin_route_needs_the_key_then_is_json_404(admin_api, device_api):
    assert device_api.get("/v1/admin/nothing").status_code == 401
    response = admin_api.get("/v1/admin/nothing")
    assert response.status_code == 404
    assert "/v1/admin/nothing" in response.json()["detail"]


def _drf_views(patterns, prefix=""):
    """(route, view class) of every DRF view the URLconf serves, includes followed."""
    from django.urls import URLPattern, URLResolver

    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _drf_views(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            view_class = getattr(entry.callback, "view_class", None)
            if view_class is not None and issubclass(view_class, APIView):
                yield prefix + str(entry.pattern), view_class


def test_every_api_view_is_an_operators_unless_it_is_a_device_or_customer_endpoint():
    """Authentication is declared by the view, not by where it is mounted: a view that
    derives from neither DeviceApi nor CustomerApi asks for X-Admin-Key wherever its
    route is; a CustomerApi asks for a customer key, and lives under v1/customer/."""
    from portal.api import CustomerApi
    from portal.authentication import CustomerKeyAuthentication, IsCustomer, IsWritingCustomer

    views = dict(_drf_views(get_resolver().url_patterns))
    customer = {route for route, view in views.items() if issubclass(view, CustomerApi)}
    assert customer and all(route.startswith("v1/customer/") for route in customer)
    # The air-gapped cameras' files take seats: a key made with write access (issue 44).
    writes = {"v1/customer/offline/activations", "v1/customer/offline/usage"}
    assert writes <= customer
    for route in customer:
        view = views[route]()
        assert [type(a) for a in view.get_authenticators()] == [CustomerKeyAuthentication]
        wanted = IsWritingCustomer if route in writes else IsCustomer
        assert [type(p) for p in view.get_permissions()] == [wanted]
    device = {route for route, view in views.items() if issubclass(view, DeviceApi)}
    assert device == {
        "v1/activate",
        "v1/revocations",
        "v1/revocations/status",
        "v1/license",
        "v1/usage",
    }
    for route, view in views.items():
        if route in device | customer or not route.startswith("v1/"):
            continue
        assert route.startswith("v1/admin/"), route
        assert [type(a) for a in view().get_authenticators()] == [OperatorKeyAuthentication]
        assert [type(p) for p in view().get_permissions()] == [IsOperator]


def test_an_operator_view_mounted_outside_the_admin_prefix_still_asks_for_the_key(
    admin_api, device_api, settings
):
    """The old gate protected a URL prefix; the view's own classes now do."""
    from django.urls import clear_url_caches, path

    import config.urls

    class Elsewhere(APIView):
        @requires("view_service")
        def get(self, request):
            return Response({"operator": str(request.user)})

    class Undecided(APIView):
        def get(self, request):
            return Response({"operator": str(request.user)})

    extra = [path("elsewhere", Elsewhere.as_view()), path("undecided", Undecided.as_view())]
    original = config.urls.urlpatterns
    config.urls.urlpatterns = extra + list(original)
    clear_url_caches()
    try:
        assert device_api.get("/elsewhere").status_code == 401
        assert device_api.get("/elsewhere", HTTP_X_ADMIN_KEY="wrong").status_code == 403
        response = admin_api.get("/elsewhere")
        assert response.status_code == 200
        assert response.json() == {"operator": "bootstrap"}
        # A method that declares no capability is closed to every key, the bootstrap's too.
        response = admin_api.get("/undecided")
        assert response.status_code == 403
        assert "declares no permission" in response.json()["detail"]
    finally:
        config.urls.urlpatterns = original
        clear_url_caches()


# --- catalogue ----------------------------------------------------------------------


def test_catalogue_lists_every_sku_with_contract_fields(admin_api):
    skus = {entry["sku"]: entry for entry in admin_api.get("/v1/admin/catalogue").json()["skus"]}
    assert sorted(skus) == ["ANPR-PERPETUAL", "API-METERED", "DETECT-STD", "VISION-PRO"]
    detect = skus["DETECT-STD"]
    assert detect["modules"] == ["detect"]
    assert (detect["max_streams"], detect["max_fps"], detect["api_calls"]) == (4, 15, 0)
    assert (detect["term_days"], detect["grace_days"]) == (365, 14)
    assert detect["allowance_per_unit"] == 50000 and detect["currency"] == "EUR"
    assert detect["unit_price_tiers"] == [
        {"from_units": 1, "unit_price": 90},
        {"from_units": 100, "unit_price": 80},
        {"from_units": 1000, "unit_price": 70},
    ]
    assert detect["overage_tiers"][1] == {"from_inferences": 1000000, "price_per_1000": 0.35}
    assert skus["ANPR-PERPETUAL"]["maintenance_rate"] == 0.18
    assert skus["ANPR-PERPETUAL"]["overage_tiers"] == []
    assert {entry["max_offline_days"] for entry in skus.values()} == {None}  # no lease


def test_catalogue_shows_a_sku_s_check_in_lease(admin_api):
    from licensing.models import Sku
    from svccore import catalogue

    Sku.objects.filter(code="DETECT-STD").update(max_offline_days=14)
    skus = {entry["sku"]: entry for entry in admin_api.get("/v1/admin/catalogue").json()["skus"]}
    assert skus["DETECT-STD"]["max_offline_days"] == 14
    assert skus["VISION-PRO"]["max_offline_days"] is None
    # A catalogue file may carry it; one without it means no lease; nonsense is refused.
    entry = catalogue.load_entries()[0]
    assert entry["max_offline_days"] is None
    assert catalogue.normalise_entry(entry | {"max_offline_days": 7})["max_offline_days"] == 7
    for bad in (0, -1, "7", 7.5, True):
        with pytest.raises(ValueError, match="max_offline_days"):
            catalogue.normalise_entry(entry | {"max_offline_days": bad})


# --- batches ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sku", "units", "unit_price"),
    [
        ("VISION-PRO", 99, 240),
        ("VISION-PRO", 100, 210),
        ("VISION-PRO", 1000, 180),
        ("ANPR-PERPETUAL", 50, 540),
        ("DETECT-STD", 1, 90),
    ],
)
def test_batch_is_priced_by_volume_tier(admin_api, customer, sku, units, unit_price):
    response = post(
        admin_api, "/v1/admin/batches", {"customer_id": customer.id, "sku": sku, "units": units}
    )
    assert response.status_code == 201
    body = response.json()
    assert body["unit_price"] == unit_price
    assert body["order_value"] == unit_price * units
    assert body["units"] == units


def test_batch_key_is_unbound_and_requires_activation(admin_api, customer, signing_key):
    before = int(time.time())
    body = post(
        admin_api,
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "VISION-PRO", "units": 25, "term_days": None},
    ).json()
    assert body["batch_id"].startswith(f"B-{timezone.now().year}-")
    claims = verify_token(body["batch_token"], signing_key.public_key())
    assert claims["dev"] == "*" and claims["act"] == "required"
    assert claims["batch"] == {"id": body["batch_id"], "units": 25}
    assert claims["lic"] == body["license_id"]
    assert claims["ent"] == {"anpr": False, "defect": True, "detect": True, "ppe": True}
    assert claims["lim"] == {"max_streams": 8, "max_fps": 30, "api_calls": 0}
    assert claims["grace_days"] == 30 and claims["iss"] == "svc-test"
    # term_days null uses the SKU default term (365 days).
    assert before + 365 * 86400 <= body["expires_at"] <= int(time.time()) + 365 * 86400
    assert claims["exp"] == body["expires_at"]


def test_batch_term_days_overrides_and_zero_is_perpetual(admin_api, customer):
    def expires(term):
        body = {"customer_id": customer.id, "sku": "DETECT-STD", "units": 1, "term_days": term}
        return post(admin_api, "/v1/admin/batches", body).json()["expires_at"]

    assert abs(expires(10) - (time.time() + 10 * 86400)) < 5
    assert expires(0) == 0


def test_batch_for_unknown_customer_is_404_and_unknown_sku_is_400(admin_api, customer):
    missing = post(
        admin_api,
        "/v1/admin/batches",
        {"customer_id": "CUST-NOPE", "sku": "VISION-PRO", "units": 1},
    )
    assert missing.status_code == 404 and "CUST-NOPE" in missing.json()["detail"]
    bad_sku = post(
        admin_api, "/v1/admin/batches", {"customer_id": customer.id, "sku": "NOPE", "units": 1}
    )
    assert bad_sku.status_code == 400
    assert "NOPE" in bad_sku.json()["detail"] and "VISION-PRO" in bad_sku.json()["detail"]


@pytest.mark.parametrize("units", [0, -1, "10", 1.5, True, None])
def test_batch_units_must_be_a_positive_integer(admin_api, customer, units):
    body = {"customer_id": customer.id, "sku": "VISION-PRO", "units": units}
    response = post(admin_api, "/v1/admin/batches", body)
    assert response.status_code == 400
    assert "units" in response.json()["detail"]
    assert not Batch.objects.exists()


def test_batch_status_shows_seat_accounting(admin_api, device_api, make_batch):
    batch = make_batch(units=5)
    for device in ("a", "b"):
        device_api.post(
            "/v1/activate", {"batch_token": batch.license.token, "device_id": device}, format="json"
        )
    body = admin_api.get(f"/v1/admin/batches/{batch.id}").json()
    assert body == {
        "batch_id": batch.id,
        "customer_id": batch.customer_id,
        "sku": "VISION-PRO",
        "units_purchased": 5,
        "units_activated": 2,
        "units_remaining": 3,
        "expires_at": int(batch.expires_at.timestamp()),
        "max_offline_days": None,  # no check-in lease (issue 42): the SKU's, none
        "trial_days": None,  # sold paid, never a trial (issue 42)
        "trial_converted_at": None,
    }
    assert admin_api.get("/v1/admin/batches/B-2026-NOPE").status_code == 404


# --- direct licences ----------------------------------------------------------------


def test_direct_license_is_device_bound_and_priced_for_one_unit(admin_api, customer, signing_key):
    body = {
        "customer_id": customer.id,
        "sku": "DETECT-STD",
        "device_id": "cam-77",
        "term_days": 90,
        "api_quota": 5000,
        "max_streams": None,
        "activation": "optional",
    }
    response = post(admin_api, "/v1/admin/licenses", body)
    assert response.status_code == 201
    out = response.json()
    assert set(out) == {
        "license_id", "token", "customer_id", "sku", "device_id", "activation",
        "expires_at", "unit_price", "currency", "max_offline_days",
    }  # fmt: skip
    assert out["unit_price"] == 90 and out["currency"] == "EUR" and out["device_id"] == "cam-77"
    claims = verify_token(out["token"], signing_key.public_key())
    assert claims["dev"] == "cam-77" and claims["act"] == "optional"
    assert claims["lim"] == {"max_streams": 4, "max_fps": 15, "api_calls": 5000}
    assert claims["exp"] == out["expires_at"]
    assert abs(out["expires_at"] - (time.time() + 90 * 86400)) < 5
    assert License.objects.get(pk=out["license_id"]).kind == License.Kind.DIRECT


def test_direct_license_caps_and_validation(admin_api, customer):
    base = {"customer_id": customer.id, "sku": "VISION-PRO", "device_id": "cam-1", "term_days": 30}
    streams = post(admin_api, "/v1/admin/licenses", {**base, "max_streams": 2, "api_quota": 0})
    assert streams.status_code == 201
    unbound = post(admin_api, "/v1/admin/licenses", {**base, "device_id": "*"})
    assert unbound.status_code == 400 and "required" in unbound.json()["detail"]
    batch_style = post(
        admin_api, "/v1/admin/licenses", {**base, "device_id": "*", "activation": "required"}
    )
    assert batch_style.status_code == 201
    assert post(admin_api, "/v1/admin/licenses", {**base, "sku": "X"}).status_code == 400
    assert (
        post(admin_api, "/v1/admin/licenses", {**base, "customer_id": "CUST-X"}).status_code == 404
    )
    assert post(admin_api, "/v1/admin/licenses", {**base, "activation": "maybe"}).status_code == 400


# --- revocation ---------------------------------------------------------------------


def test_revoke_is_idempotent_and_listed(admin_api, device_api, make_batch):
    batch = make_batch()
    unit = device_api.post(
        "/v1/activate", {"batch_token": batch.license.token, "device_id": "cam-1"}, format="json"
    ).json()
    first = post(admin_api, "/v1/admin/revoke", {"license_id": unit["license_id"], "reason": "RMA"})
    assert first.status_code == 200
    assert first.json()["revoked"] is True and first.json()["reason"] == "RMA"
    again = post(admin_api, "/v1/admin/revoke", {"license_id": unit["license_id"], "reason": "x"})
    assert again.json() == first.json()
    crl = device_api.get("/v1/revocations").json()
    assert crl["revoked"] == [unit["license_id"]]
    assert abs(crl["as_of"] - time.time()) < 5
    assert post(admin_api, "/v1/admin/revoke", {"license_id": "LIC-NOPE"}).status_code == 404


def test_revocation_list_needs_no_credentials(device_api):
    response = device_api.get("/v1/revocations")
    assert response.status_code == 200 and response.json()["revoked"] == []


# --- fleet --------------------------------------------------------------------------


def test_fleet_lists_activation_records_most_recent_first(
    admin_api, device_api, make_batch, server_clock
):
    now = timezone.now()
    with server_clock.at(now - dt.timedelta(minutes=40)):
        batch = make_batch()
        other = make_batch(owner=CustomerFactory(), sku="DETECT-STD")
    for minutes_ago, token, device, weak in (
        (30, batch.license.token, "cam-old", False),
        (20, other.license.token, "cam-mac", True),
        (10, batch.license.token, "cam-new", False),
    ):
        with server_clock.at(now - dt.timedelta(minutes=minutes_ago)):
            device_api.post(
                "/v1/activate",
                {"batch_token": token, "device_id": device, "weak_binding": weak,
                 "fingerprint_source": "mac" if weak else "env", "sdk_version": "1.0.0"},
                format="json",
            )  # fmt: skip
    body = admin_api.get("/v1/admin/fleet").json()
    assert [u["device_id"] for u in body["units"]] == ["cam-new", "cam-mac", "cam-old"]
    assert body["count"] == 3
    record = body["units"][1]
    assert record["weak_binding"] == 1 and record["fingerprint_source"] == "mac"
    assert record["customer_id"] == other.customer_id and record["sku"] == "DETECT-STD"
    assert record["revoked"] == 0 and record["sdk_version"] == "1.0.0"

    def devices(query):
        return [u["device_id"] for u in admin_api.get(f"/v1/admin/fleet?{query}").json()["units"]]

    assert devices("weak_binding=1") == ["cam-mac"]
    assert devices(f"batch_id={batch.id}") == ["cam-new", "cam-old"]
    assert devices(f"customer_id={other.customer_id}") == ["cam-mac"]
    assert devices(f"before={body['units'][0]['activated_at']}") == ["cam-mac", "cam-old"]
    assert admin_api.get("/v1/admin/fleet?before=soon").status_code == 400
    # A filter present but blank is refused, not dropped (which would list every unit).
    for name in ("customer_id", "batch_id", "weak_binding", "before"):
        blank = admin_api.get(f"/v1/admin/fleet?{name}=")
        assert blank.status_code == 400 and blank.json()["detail"].startswith(f"{name}: ")


def test_fleet_caps_at_1000_units(admin_api, make_batch):
    batch = make_batch(units=1001)
    for n in range(1001):
        unit_activate(batch_token=batch.license.token, device_id=f"d{n}")
    body = admin_api.get("/v1/admin/fleet").json()
    assert body["count"] == len(body["units"]) == 1000
