"""Money on the wire (issue 13): every amount and price of the admin API is a JSON number
written with its currency's decimals (``630.00``, ``0.35``; ``630`` in yen), never
through a float, so a client that reads decimals gets the exact amount.

The assertions read the raw bytes of the answer (``response.content``): parsed to floats,
``630.0`` and ``630.00`` are the same value and the test could not tell them apart.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.renderers import JSONRenderer

from config.api.renderers import ExactJSONRenderer
from licensing.models import Sku
from licensing.services import license_issue
from licensing.services.activation import unit_activate
from svccore import money
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db

JAN, FEB = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2))


def exact(response) -> dict:
    """The answer's JSON with numbers read as decimals, as ``svcctl`` reads them."""
    return json.loads(response.content, parse_float=Decimal)


def sku(code: str, *, currency: str = "EUR", unit_price: str = "90", per_1000: str = "0.50"):
    """A catalogue entry an operator added (the catalogue is edited in the console)."""
    return Sku.objects.create(
        code=code,
        name=code.title(),
        modules=["detect"],
        max_streams=4,
        max_fps=15,
        api_calls=0,
        term_days=365,
        grace_days=14,
        allowance_per_unit=1000,
        currency=currency,
        unit_price_tiers=[{"from_units": 1, "unit_price": unit_price}],
        overage_tiers=[{"from_inferences": 0, "price_per_1000": per_1000}],
    )


def post_batch(admin_api, customer_id: str, code: str, units: int):
    response = admin_api.post(
        "/v1/admin/batches",
        {"customer_id": customer_id, "sku": code, "units": units, "term_days": None},
        format="json",
    )
    assert response.status_code == 201, response.content
    return response


def activate_all(batch_token: str, *devices: str) -> None:
    for device_id in devices:
        unit_activate(batch_token=batch_token, device_id=device_id)


def test_batch_issue_sends_unit_price_and_order_value_with_two_decimals(admin_api, customer):
    response = post_batch(admin_api, customer.id, "DETECT-STD", 7)
    assert b'"unit_price":90.00,' in response.content
    assert b'"order_value":630.00,' in response.content
    body = exact(response)
    assert (body["unit_price"], body["order_value"]) == (Decimal("90.00"), Decimal("630.00"))
    assert response.json()["order_value"] == 630.0  # a float reader sees the same value


def test_license_issue_sends_its_unit_price_with_two_decimals(admin_api, customer):
    response = admin_api.post(
        "/v1/admin/licenses",
        {"customer_id": customer.id, "sku": "DETECT-STD", "device_id": "cam-1"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert b'"unit_price":90.00,' in response.content
    assert b'"currency":"EUR"' in response.content


def test_catalogue_tier_prices_keep_their_exact_text(admin_api):
    sku("TINY-PRICES", unit_price="0.0125", per_1000="0.035")
    content = admin_api.get("/v1/admin/catalogue").content
    assert b'{"from_units":1,"unit_price":90.00}' in content
    assert b'{"from_units":100,"unit_price":80.00}' in content
    assert b'{"from_inferences":0,"price_per_1000":0.50}' in content
    assert b'{"from_inferences":1000000,"price_per_1000":0.35}' in content
    # More decimals than the currency has are kept, never rounded away.
    assert b'{"from_units":1,"unit_price":0.0125}' in content
    assert b'{"from_inferences":0,"price_per_1000":0.035}' in content
    assert b"e+" not in content.lower() and b"E-" not in content


def test_invoice_preview_sends_money_with_the_currencys_decimals(admin_api, customer):
    batch = exact(post_batch(admin_api, customer.id, "DETECT-STD", 7))
    activate_all(batch["batch_token"], *(f"cam-{n}" for n in range(7)))
    response = admin_api.get(f"/v1/admin/invoice/{customer.id}")
    assert response.status_code == 200
    assert b'"quantity":7,' in response.content
    assert b'"unit_price":90.00,' in response.content
    assert b'"amount":630.00' in response.content
    assert response.content.endswith(b'"total":630.00}')


def test_empty_invoice_total_is_zero_with_two_decimals(admin_api, customer):
    content = admin_api.get(f"/v1/admin/invoice/{customer.id}").content
    assert b'"lines":[],"total":0.00}' in content


def test_a_sum_of_many_ten_cent_lines_is_exact(admin_api, customer):
    """Ten batches of a 0.10 SKU, one activation each: ten lines of 0.10. Summed as
    floats they make 0.9999999999999999; as the decimals on the wire, exactly 1.00."""
    sku("PENNY", unit_price="0.10")
    for n in range(10):
        batch = exact(post_batch(admin_api, customer.id, "PENNY", 1))
        activate_all(batch["batch_token"], f"penny-{n}")
    response = admin_api.get(f"/v1/admin/invoice/{customer.id}")
    assert response.content.count(b'"amount":0.10') == 10
    assert response.content.endswith(b'"total":1.00}')
    body = exact(response)
    assert sum(line["amount"] for line in body["lines"]) == body["total"] == Decimal("1.00")
    assert sum(line["amount"] for line in response.json()["lines"]) != 1.0  # why it matters


def test_a_currency_without_decimals_sends_whole_numbers(admin_api):
    sku("YEN-CAM", currency="JPY", unit_price="630")
    buyer = CustomerFactory()
    response = post_batch(admin_api, buyer.id, "YEN-CAM", 2)
    assert b'"unit_price":630,' in response.content
    assert b'"order_value":1260,' in response.content
    activate_all(exact(response)["batch_token"], "yen-1")
    content = admin_api.get(f"/v1/admin/invoice/{buyer.id}").content
    assert b'"currency":"JPY"' in content
    assert b'"unit_price":630,' in content and content.endswith(b'"total":630}')


def test_issued_invoice_and_credit_note_send_exact_money(
    admin_api, customer, device_api, server_clock
):
    """A direct licence of 15.00 issued in January, and 22 678 inferences: the allowance
    of 31 days is 10 333.33, so 12.345 thousand over it at 1.20 = 14.81. Quantities go
    out with their three decimals, prices and amounts with two."""
    with server_clock.at(JAN + dt.timedelta(days=4)):
        lic = license_issue(customer_id=customer.id, sku="API-METERED", device_id="m-1")
    start = int((JAN + dt.timedelta(days=9)).timestamp())
    record = {"period_start": start, "period_end": start + 3600, "inferences": 22_678}
    record |= {"frames": 0, "stream_seconds": 0, "events": 0}
    uploaded = device_api.post(
        "/v1/usage",
        {"device_id": "m-1", "license_id": lic.id, "records": [record]},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {lic.token}",
    )
    assert uploaded.status_code == 200, uploaded.content
    response = admin_api.post(
        "/v1/admin/invoices",
        {"customer_id": customer.id, "period_days": 31, "period_end": int(FEB.timestamp())},
        format="json",
    )
    assert response.status_code == 201, response.content
    content = response.content
    assert b'"quantity":1,"unit":"licence","unit_price":15.00,"amount":15.00' in content
    assert b'"quantity":12.345,"unit":"1000 inferences","unit_price":1.20,"amount":14.81' in (
        content
    )
    assert content.endswith(b'"total":29.81}')

    number = exact(response)["number"]
    note = admin_api.post(
        f"/v1/admin/invoices/{number}/credit-note", {"reason": "test"}, format="json"
    )
    assert note.status_code == 201, note.content
    assert b'"quantity":-1,"unit":"licence","unit_price":15.00,"amount":-15.00' in note.content
    assert b'"quantity":-12.345,' in note.content and note.content.endswith(b'"total":-29.81}')


def test_the_schema_still_says_money_is_a_number():
    schema = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    fields = {
        "BatchOut": ("unit_price", "order_value"),
        "LicenseOut": ("unit_price",),
        "InvoiceLineOut": ("quantity", "unit_price", "amount"),
        "InvoicePreviewOut": ("total",),
        "InvoiceOut": ("total",),
        "UnitPriceTierOut": ("unit_price",),
        "OverageTierOut": ("price_per_1000",),
    }
    for component, names in fields.items():
        for name in names:
            assert schema[component]["properties"][name]["type"] == "number", (component, name)


# --- the renderer itself --------------------------------------------------------------


def test_answers_without_decimals_are_written_exactly_as_drf_writes_them():
    """Random JSON (strings with escapes and U+2028, big integers, floats, nesting):
    the renderer's bytes equal DRF's, compact and indented."""
    rng = random.Random(13)

    def value(depth: int = 0):
        pick = rng.random()
        if depth > 3 or pick < 0.5:
            return rng.choice(
                [None, True, False, 0, -7, 2**70, 1.5, -0.0, 1e300, "", 'a"\\\n\u2028é\x01']
            )
        if pick < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {f"k{n}é": value(depth + 1) for n in range(rng.randint(0, 3))}

    for _ in range(300):
        data = value()
        for media_type in (None, "application/json; indent=2"):
            ours = ExactJSONRenderer().render(data, media_type)
            assert ours == JSONRenderer().render(data, media_type)
            # Beside a Decimal (the exact path) the rest is written the same way too.
            with_money = ExactJSONRenderer().render([Decimal("0.10"), data], media_type)
            assert with_money == JSONRenderer().render(["0.10", data], media_type).replace(
                b'"0.10"', b"0.10", 1
            )


def test_decimals_are_written_in_positional_notation_and_never_as_nan():
    renderer = ExactJSONRenderer()
    assert renderer.render({"a": Decimal("1E+3"), "b": Decimal("1E-7")}) == (
        b'{"a":1000,"b":0.0000001}'
    )
    with pytest.raises(ValueError, match="not a JSON number"):
        renderer.render({"a": Decimal("NaN")})


@pytest.mark.parametrize(
    ("value", "currency", "shown"),
    [("630", "EUR", "630.00"), ("630.0", "eur", "630.00"), ("0.35", "EUR", "0.35"),
     ("90.0000", "EUR", "90.00"), ("0.0125", "EUR", "0.0125"), ("630.00", "JPY", "630"),
     ("630.50", "JPY", "630.5"), ("2.5", "KWD", "2.500"), ("1E+3", "EUR", "1000.00"),
     ("-15", "EUR", "-15.00"), ("0", "", "0.00")],
)  # fmt: skip
def test_money_has_the_currencys_decimals_and_is_never_rounded(value, currency, shown):
    assert f"{money.amount(Decimal(value), currency):f}" == shown


def test_money_refuses_floats():
    with pytest.raises(TypeError):
        money.amount(630.0, "EUR")


def test_quantities_lose_only_their_trailing_zeros():
    assert [f"{money.quantity(Decimal(v)):f}" for v in ("3.000", "12.345", "1.500", "0")] == [
        "3",
        "12.345",
        "1.5",
        "0",
    ]
