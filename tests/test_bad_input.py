"""Hostile and malformed input at the HTTP edge ("Production edge", parts 4 and 6): every
case answers 4xx (or 503 for a database outage) with a JSON ``{"detail": ...}`` that
names the bound or the problem, never a 500 or a stack trace, and writes nothing."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from django.conf import settings
from django.db import DataError, InterfaceError, OperationalError

from audit.models import AuditEntry
from billing.limits import MAX_COUNTER
from billing.models import Invoice, UsageRecord
from config.api.parsers import JSON_MAX_DEPTH
from config.errors import DB_RETRY_AFTER_SECONDS, api_exception_handler
from customers.models import Customer
from licensing.models import Activation, Batch, License
from licensing.services.activation import unit_activate
from svccore.claims import API_QUOTA_MAX, MAX_STREAMS_MAX, TERM_DAYS_MAX, UNITS_MAX
from tests.billing.conftest import record
from tests.conftest import REPO, _free_port

pytestmark = pytest.mark.django_db

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z

POST_ENDPOINTS = [
    "/v1/activate",
    "/v1/usage",
    "/v1/admin/customers",
    "/v1/admin/batches",
    "/v1/admin/licenses",
    "/v1/admin/licenses/register",
    "/v1/admin/revoke",
    "/v1/admin/invoices",
    "/v1/admin/invoices/INV-1/credit-note",
]


def written() -> dict[str, int]:
    """Row counts of everything a request could write."""
    models = (Customer, Batch, License, Activation, UsageRecord, Invoice, AuditEntry)
    return {model.__name__: model.objects.count() for model in models}


def refused(response, status: int) -> str:
    """The ``detail`` of a JSON refusal with ``status``, checked to be nothing more."""
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"detail"}
    assert "Traceback" not in body["detail"]
    return body["detail"]


def post_raw(client, path: str, body: bytes | str, **headers):
    return client.generic("POST", path, body, content_type="application/json", **headers)


def activated(batch, device_id: str = "cam-1") -> License:
    """The unit licence of ``device_id``, activated from ``batch``."""
    return License.objects.get(
        pk=unit_activate(batch_token=batch.license.token, device_id=device_id).license_id
    )


def upload(client, unit: License, records: list[dict], *, device_id: str | None = None):
    """POST /v1/usage as the device holding ``unit``."""
    body = {"device_id": device_id or unit.device_id, "license_id": unit.id, "records": records}
    return client.post("/v1/usage", body, format="json", HTTP_AUTHORIZATION=f"Bearer {unit.token}")


# --- 1. JSON nesting ------------------------------------------------------------------


@pytest.mark.parametrize("path", POST_ENDPOINTS)
def test_json_nested_100000_deep_is_400_on_every_post_endpoint(admin_api, path):
    before = written()
    response = post_raw(admin_api, path, "[" * 100_000 + "]" * 100_000)
    assert refused(response, 400) == f"JSON nested deeper than {JSON_MAX_DEPTH} levels"
    assert written() == before


@pytest.mark.parametrize(
    "body",
    [
        '{"a": ' * 1000 + "1" + "}" * 1000,
        # A string ending in an escaped backslash ends at the quote after it.
        '{"device_id": "cam\\\\", "x": ' + "[" * 40 + "]" * 40 + "}",
        '{"device_id": "\\"[[[", "x": [' + "{}, " * 40 + "[" * 40 + "]" * 40 + "]}",
    ],
)
def test_objects_and_arrays_nested_too_deep_are_400(device_api, body):
    detail = refused(post_raw(device_api, "/v1/activate", body), 400)
    assert detail == f"JSON nested deeper than {JSON_MAX_DEPTH} levels"


def test_json_at_the_depth_limit_is_parsed(admin_api):
    # 32 levels are JSON like any other: the endpoint itself answers (a wrong body here).
    deep = "[" * (JSON_MAX_DEPTH - 1) + "]" * (JSON_MAX_DEPTH - 1)
    detail = refused(post_raw(admin_api, "/v1/admin/revoke", f'{{"license_id": {deep}}}'), 400)
    assert "nested" not in detail
    too_deep = "[" * JSON_MAX_DEPTH + "]" * JSON_MAX_DEPTH
    detail = refused(post_raw(admin_api, "/v1/admin/revoke", f'{{"license_id": {too_deep}}}'), 400)
    assert detail == f"JSON nested deeper than {JSON_MAX_DEPTH} levels"


def test_brackets_inside_strings_are_not_nesting(device_api, make_batch):
    batch = make_batch(units=1)
    device_id = '[{\\"' + "[" * 60 + "{" * 60
    body = f'{{"batch_token": "{batch.license.token}", "device_id": "{device_id}"}}'
    response = post_raw(device_api, "/v1/activate", body)
    assert response.status_code == 200, response.json()
    assert Activation.objects.get().device_id == '[{"' + "[" * 60 + "{" * 60


@pytest.mark.parametrize(
    "body",
    [
        "[" * 20 + "}" * 20 + "]" * 20,
        "[" * 20 + "]" * 40,
        '{"a": [' + "}" * 40,
        '["' + "[" * 40 + "]",  # an unterminated string: its brackets are text
    ],
)
def test_malformed_json_is_still_400_not_valid_json(device_api, body):
    detail = refused(post_raw(device_api, "/v1/activate", body), 400)
    assert detail.startswith("request body is not valid JSON")


def test_nesting_in_another_charset_is_counted_too(device_api):
    body = ("[" * 1000 + "]" * 1000).encode("utf-16")
    response = device_api.generic(
        "POST", "/v1/activate", body, content_type="application/json; charset=utf-16"
    )
    assert refused(response, 400) == f"JSON nested deeper than {JSON_MAX_DEPTH} levels"


def test_unclosed_brackets_count_as_nesting(device_api):
    detail = refused(post_raw(device_api, "/v1/activate", "[" * 100_000), 400)
    assert detail == f"JSON nested deeper than {JSON_MAX_DEPTH} levels"


# --- 2. control characters in path and query parameters -------------------------------


@pytest.mark.parametrize("char", ["%00", "%01", "%1B", "%7F"])
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/admin/batches/B-2026-{}"),
        ("GET", "/v1/admin/usage/LIC-{}"),
        ("GET", "/v1/admin/invoice/CUST-{}"),
        ("GET", "/v1/admin/invoice/{}?period_days=30"),
        ("POST", "/v1/admin/invoices/INV-{}/credit-note"),
    ],
)
def test_control_characters_in_path_ids_are_404(admin_api, customer, method, path, char):
    before = written()
    response = admin_api.generic(
        method, path.format(char), '{"reason": "x"}', content_type="application/json"
    )
    assert refused(response, 404).startswith(f"no endpoint {method} /v1/admin/")
    assert written() == before


@pytest.mark.parametrize("name", ["customer_id", "batch_id"])
@pytest.mark.parametrize("char", ["%00", "%01", "%E2%80%AE"])
def test_control_characters_in_fleet_filters_are_400(admin_api, name, char):
    detail = refused(admin_api.get(f"/v1/admin/fleet?{name}=X{char}"), 400)
    assert detail.startswith(f"{name}: ")


def test_database_data_error_is_400_not_500():
    # The last line of defence: whatever value the database refuses is the caller's.
    response = api_exception_handler(
        DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes\nDETAIL: x"), {}
    )
    assert response.status_code == 400
    assert response.data == {
        "detail": "a value of this request cannot be stored or looked up: "
        "PostgreSQL text fields cannot contain NUL (0x00) bytes"
    }


# --- 3. integer query parameters --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (str(2**63), "Ensure this value is less than or equal to 253402300799."),
        (str(10**30), "Ensure this value is less than or equal to 253402300799."),
        ("253402300800", "Ensure this value is less than or equal to 253402300799."),
        ("-1", "Ensure this value is greater than or equal to 0."),
        ("1e3", "A valid integer is required."),
    ],
)
def test_fleet_before_out_of_range_is_400_naming_the_bound(admin_api, value, message):
    detail = refused(admin_api.get(f"/v1/admin/fleet?before={value}"), 400)
    assert detail == f"before: {message}"


def test_fleet_before_at_the_bound_is_answered(admin_api):
    response = admin_api.get("/v1/admin/fleet?before=253402300799")
    assert response.status_code == 200
    assert response.json()["count"] == 0


@pytest.mark.parametrize("value", [str(2**63), "0", "99999999"])
def test_invoice_period_days_out_of_range_is_400(admin_api, customer, value):
    detail = refused(admin_api.get(f"/v1/admin/invoice/{customer.id}?period_days={value}"), 400)
    assert "1..3660" in detail


def test_revocations_since_beyond_64_bits_is_answered(device_api):
    response = device_api.get(f"/v1/revocations?since={10**19 - 1}")
    assert refused(response, 409).startswith("revocation list is at sequence")
    detail = refused(device_api.get(f"/v1/revocations?since={10**19}"), 400)
    assert detail.startswith("since must be a revocation-list sequence number")


# --- 4. X-Forwarded-For hops that are not addresses -------------------------------------


@pytest.mark.parametrize("forwarded", ["not-an-ip", "198.51.100.7, unknown", "203.0.113.5:4711"])
def test_forwarded_hop_that_is_not_an_ip_falls_back_to_remote_addr(
    device_api, make_batch, settings, forwarded
):
    settings.SVC_TRUSTED_PROXIES = ["127.0.0.0/8"]
    batch = make_batch(units=1)
    response = device_api.post(
        "/v1/activate",
        {"batch_token": batch.license.token, "device_id": "cam-xff"},
        format="json",
        HTTP_X_FORWARDED_FOR=forwarded,
    )
    assert response.status_code == 200, response.content[:500]
    assert Activation.objects.get().client_ip == "127.0.0.1"


def test_forwarded_hop_that_is_not_an_ip_keeps_the_audit_entry(admin_api, settings):
    settings.SVC_TRUSTED_PROXIES = ["127.0.0.0/8"]
    response = admin_api.post(
        "/v1/admin/customers",
        {"name": "Acme", "kind": "oem"},
        format="json",
        HTTP_X_FORWARDED_FOR="garbage",
    )
    assert response.status_code == 201
    entry = AuditEntry.objects.get(action="customer.create")
    assert (entry.result, entry.ip) == ("ok", "127.0.0.1")


# --- 5. CIDR settings -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["SVC_TRUSTED_PROXIES", "SVC_ACTIVATION_ALLOWLIST"])
@pytest.mark.parametrize("value", ["10.0.0.0/8,not-a-cidr", "10.0.0.0/33", "300.1.1.1"])
def test_invalid_cidr_setting_stops_start_up(name, value):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", name: value}
    bad = value.split(",")[-1]
    result = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; settings.DEBUG"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert f"{name}: {bad!r} is not a CIDR" in result.stderr


def test_valid_cidr_settings_start():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "SVC_TRUSTED_PROXIES": " 10.0.0.0/8 , 2001:db8::/32,192.0.2.1",
        "SVC_ACTIVATION_ALLOWLIST": "",
    }
    code = "from django.conf import settings; print(settings.SVC_TRUSTED_PROXIES)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['10.0.0.0/8', '2001:db8::/32', '192.0.2.1']"


# --- 6. oversized bodies ----------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/activate", "/v1/usage", "/v1/admin/batches"])
def test_ten_megabyte_body_is_413_naming_the_limit(admin_api, path):
    before = written()
    body = '{"device_id": "' + "x" * (10 * 1024 * 1024) + '"}'
    detail = refused(post_raw(admin_api, path, body), 413)
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert detail == f"request body is {len(body)} bytes; at most {limit} bytes are accepted"
    assert written() == before


def test_largest_usage_upload_fits_the_body_limit(device_api, make_batch, server_clock):
    device_id = "cam-" + "9" * 124
    # Activated a month before the records (a record lies within its licence's life).
    with server_clock.at(dt.datetime.fromtimestamp(T0 - 30 * 86400, dt.UTC)):
        unit = activated(make_batch(units=1), device_id)
    big = MAX_COUNTER
    records = [
        record(T0 + i * 3600, inferences=big, frames=big, stream_seconds=big, events=big)
        for i in range(1000)
    ]
    body = json.dumps(
        {"device_id": device_id, "license_id": unit.id, "records": records, "nonce": "n" * 43},
        indent=2,
    )
    assert len(body) < settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = post_raw(device_api, "/v1/usage", body, HTTP_AUTHORIZATION=f"Bearer {unit.token}")
    assert response.status_code == 200, response.content[:300]
    assert response.json()["accepted"] == 1000


# --- 7. numbers signed into tokens or counted -------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [
        ("api_quota", 10**30, API_QUOTA_MAX),
        ("api_quota", API_QUOTA_MAX + 1, API_QUOTA_MAX),
        ("max_streams", 2**64, MAX_STREAMS_MAX),
        ("term_days", 2**63, TERM_DAYS_MAX),
    ],
)
def test_license_numbers_above_their_bound_are_400(admin_api, customer, field, value, bound):
    before = written()
    body = {"customer_id": customer.id, "sku": "VISION-PRO", "device_id": "cam-1", field: value}
    detail = refused(admin_api.post("/v1/admin/licenses", body, format="json"), 400)
    assert detail.startswith(f"{field}: ")
    assert str(bound) in detail
    assert written() == before


def test_license_numbers_at_their_bound_are_signed(admin_api, customer):
    body = {
        "customer_id": customer.id,
        "sku": "VISION-PRO",
        "device_id": "cam-1",
        "api_quota": API_QUOTA_MAX,
        "max_streams": MAX_STREAMS_MAX,
        "term_days": TERM_DAYS_MAX,
    }
    response = admin_api.post("/v1/admin/licenses", body, format="json")
    assert response.status_code == 201, response.json()
    claims = License.objects.get().claims
    assert claims["lim"]["api_calls"] == API_QUOTA_MAX
    assert claims["lim"]["max_streams"] == MAX_STREAMS_MAX


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [("units", 10**30, UNITS_MAX), ("term_days", 10**30, TERM_DAYS_MAX)],
)
def test_batch_numbers_above_their_bound_are_400(admin_api, customer, field, value, bound):
    before = written()
    body = {"customer_id": customer.id, "sku": "VISION-PRO", "units": 10, field: value}
    detail = refused(admin_api.post("/v1/admin/batches", body, format="json"), 400)
    assert detail.startswith(f"{field}: ")
    assert str(bound) in detail
    assert written() == before


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("period_days", 10**30, "less than or equal to 3660"),
        ("period_days", 0, "greater than or equal to 1"),
        ("period_end", 2**63, "less than or equal to 253402300799"),
        ("period_end", -1, "greater than or equal to 0"),
    ],
)
def test_invoice_issue_numbers_out_of_range_are_400(admin_api, customer, field, value, message):
    before = written()
    body = {"customer_id": customer.id, field: value}
    detail = refused(admin_api.post("/v1/admin/invoices", body, format="json"), 400)
    assert detail == f"{field}: Ensure this value is {message}."
    assert written() == before


def test_usage_counter_above_its_bound_is_400(device_api, make_batch):
    unit = activated(make_batch(units=1))
    before = written()
    detail = refused(upload(device_api, unit, [record(T0, inferences=2**64)]), 400)
    assert detail == f"records[0].inferences must be between 0 and {MAX_COUNTER}, not {2**64}"
    assert written() == before


# --- 8. control and bidi characters in device ids ----------------------------------------

BAD_DEVICE_IDS = [
    ("cam-\u202e1", "U+202E"),  # right-to-left override
    ("cam\u200b-1", "U+200B"),  # zero width space
    ("\ufeffcam-1", "U+FEFF"),  # byte order mark
    ("cam-1\x1b[31m", "U+001B"),  # escape
    ("cam\n-1", "U+000A"),
    ("cam\x85-1", "U+0085"),
]


@pytest.mark.parametrize(("device_id", "code"), BAD_DEVICE_IDS)
def test_activation_refuses_control_characters_in_device_id(
    device_api, make_batch, device_id, code
):
    batch = make_batch(units=1)
    before = written()
    body = {"batch_token": batch.license.token, "device_id": device_id}
    detail = refused(device_api.post("/v1/activate", body, format="json"), 400)
    assert detail.startswith("device_id: ")
    assert code in detail
    assert device_id not in detail  # never echoed: it would reorder the operator's screen
    assert written() == before


@pytest.mark.parametrize(("device_id", "code"), BAD_DEVICE_IDS)
def test_license_issue_refuses_control_characters_in_device_id(
    admin_api, customer, device_id, code
):
    before = written()
    body = {"customer_id": customer.id, "sku": "VISION-PRO", "device_id": device_id}
    detail = refused(admin_api.post("/v1/admin/licenses", body, format="json"), 400)
    assert detail.startswith("device_id: ")
    assert code in detail
    assert written() == before


@pytest.mark.parametrize(("device_id", "code"), BAD_DEVICE_IDS)
def test_usage_refuses_control_characters_in_device_id(device_api, make_batch, device_id, code):
    unit = activated(make_batch(units=1))
    before = written()
    detail = refused(upload(device_api, unit, [record(T0)], device_id=device_id), 400)
    assert detail.startswith("device_id ")
    assert code in detail
    assert written() == before


def test_printable_unicode_device_ids_are_still_accepted(device_api, make_batch):
    batch = make_batch(units=1)
    body = {"batch_token": batch.license.token, "device_id": "Kamera-Süd 東京 #1"}
    response = device_api.post("/v1/activate", body, format="json")
    assert response.status_code == 200, response.json()


# --- 9. database unavailable ---------------------------------------------------------------


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_database_errors_map_to_503_with_retry_after(error):
    response = api_exception_handler(error('connection to server at "10.0.0.5" failed'), {})
    assert response.status_code == 503
    assert response["Retry-After"] == str(DB_RETRY_AFTER_SECONDS)
    assert json.loads(response.content) == {
        "detail": f"database unavailable; retry in {DB_RETRY_AFTER_SECONDS} s "
        "(the service log has the details)"
    }


def _unreachable_database() -> str:
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        return "sqlite:////nonexistent-directory/svc.sqlite3"
    return f"postgres://postgres@127.0.0.1:{_free_port()}/svc"


@pytest.fixture(scope="module")
def server_without_database(tmp_path_factory):
    """gunicorn whose database cannot be reached (healthz answers 503)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("nodb") / "server.log"
    env = {
        **os.environ,
        "DATABASE_URL": _unreachable_database(),
        "SVC_SIGNING_KEY_FILE": str(settings.SVC_SIGNING_KEY_FILE),
        "SVC_ADMIN_KEY": settings.SVC_ADMIN_KEY,
        "SVC_SECRET_KEY": settings.SECRET_KEY,
        "SVC_DEBUG": "0",
        "SVC_ACTIVATION_ALLOWLIST": "127.0.0.0/8",
        "SVC_LOG_LEVEL": "CRITICAL",
    }
    command = [
        sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}",
        "--workers", "1", "--threads", "2", "--worker-class", "gthread", "--timeout", "30",
    ]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"gunicorn did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _call(url: str, method: str = "GET", body: bytes | None = None, **headers: str):
    request = urllib.request.Request(url, method=method, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.mark.live
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/revocations?since=0", None),
        ("GET", "/v1/admin/batches/B-2026-X", None),
        ("GET", "/v1/admin/fleet", None),
        ("POST", "/v1/admin/customers", b'{"name": "Acme", "kind": "oem"}'),
        ("POST", "/v1/activate", b'{"batch_token": "SVC1.x.y", "device_id": "cam-1"}'),
    ],
)
def test_database_down_is_503_with_retry_after(server_without_database, method, path, body):
    status, headers, content = _call(
        server_without_database + path,
        method,
        body,
        **{"X-Admin-Key": settings.SVC_ADMIN_KEY, "Content-Type": "application/json"},
    )
    assert status == 503, content[:500]
    assert headers["Retry-After"] == str(DB_RETRY_AFTER_SECONDS)
    detail = json.loads(content)["detail"]
    assert detail.startswith("database unavailable")
    assert "nonexistent" not in detail and "postgres" not in detail


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/admin/fleet?limit=١٠", "limit"),
        ("/v1/admin/fleet?limit=%EF%BC%91%EF%BC%92", "limit"),  # fullwidth "１２"
        ("/v1/admin/fleet?before=%D9%A3", "before"),  # Arabic-Indic three
        ("/v1/admin/expiring?days=%EF%BC%91%EF%BC%92", "days"),
        ("/v1/admin/expiring?days=12.0", "days"),
        ("/v1/admin/expiring?days=+12", "days"),
    ],
)
def test_query_integers_are_ascii_digits_only(admin_api, path, name):
    response = admin_api.get(path)
    assert response.status_code == 400
    assert response.json()["detail"] == f"{name}: A valid integer is required."


@pytest.mark.parametrize("query", ["customer_id=CUST-NOBODY0000", "batch_id=B-2026-NOBODY0000"])
def test_fleet_filter_naming_nothing_is_404(admin_api, query):
    response = admin_api.get(f"/v1/admin/fleet?{query}")
    assert response.status_code == 404
    assert "does not exist" in response.json()["detail"]


def _operations_with_a_body():
    """Every /v1/admin operation whose OpenAPI entry takes a request body."""
    from drf_spectacular.generators import SchemaGenerator

    document = SchemaGenerator().get_schema(request=None, public=True)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if path.startswith("/v1/admin") and "requestBody" in operation:
                yield method, re.sub(r"\{[^}]+\}", "X-1", path)


@pytest.mark.django_db
def test_every_admin_body_refuses_an_unknown_field_naming_it(admin_api):
    operations = list(_operations_with_a_body())
    assert len(operations) >= 10, operations  # the walk found the admin API
    for method, path in operations:
        response = getattr(admin_api, method)(path, {"zz_unknown": 1}, format="json")
        assert response.status_code == 400, (method, path, response.content)
        assert "unknown field 'zz_unknown': this endpoint takes" in response.json()["detail"], (
            method,
            path,
        )
