"""The device application (``config.device_wsgi``, issue 27): the routes cameras call,
with only the middleware they need, answering exactly as the full application does.

Both run in their own gunicorn on the same database. Every request of a list (good and
bad activations, usage, licence refresh, the revocation list, oversized and malformed
bodies, NUL bytes, unknown routes) goes to both: status, body and every security header
must agree; the console and admin API are a JSON 404 on the device application.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest

from customers.services import customer_create
from licensing.services import batch_issue
from tests.conftest import start_gunicorn, stop_gunicorn

pytestmark = pytest.mark.live

SECURITY_HEADERS = (
    "X-Content-Type-Options",
    "X-Frame-Options",
    "Referrer-Policy",
    "Cross-Origin-Opener-Policy",
    "Content-Type",
    "Retry-After",
)


@pytest.fixture(scope="module")
def device_service(django_db_setup, django_db_blocker, signing_key_file, tmp_path_factory):
    service = start_gunicorn(tmp_path_factory.mktemp("device-gunicorn"), app="config.device_wsgi")
    try:
        yield service
    finally:
        stop_gunicorn(service)


def _call(url: str, method: str, path: str, body: bytes | None = None, headers=None):
    request = urllib.request.Request(f"{url}{path}", data=body, method=method)
    for name, value in (headers or {"Content-Type": "application/json"}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as answer:
        return answer.code, dict(answer.headers), answer.read()


def _unstamped(body: bytes):
    """An answer without the moment its worker built it: a revocation list carries the
    second it was signed in (``as_of``, the document's ``iat``) and so its signature;
    each server's workers build their own. Everything else is compared byte for byte."""
    try:
        answer = json.loads(body)
    except ValueError:
        return body
    if not isinstance(answer, dict) or "as_of" not in answer:
        return body
    answer.pop("as_of")
    scheme, payload, signature = answer.pop("revocations").split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.pop("iat")
    assert scheme == "SVCR1" and signature
    return answer, claims


def _json(payload: dict) -> bytes:
    return json.dumps(payload).encode()


def test_the_device_application_answers_as_the_full_one(
    live_service, device_service, transactional_db
):
    customer = customer_create(name="Pool Test Cameras", kind="oem")
    batch = batch_issue(customer_id=customer.pk, sku="DETECT-STD", units=10)
    key = batch.license.token
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    requests = [
        ("GET", "/v1/revocations", None),
        ("GET", "/v1/revocations?since=abc", None),
        ("POST", "/v1/activate", b"{not json"),
        ("POST", "/v1/activate", _json({"batch_token": forged, "device_id": "cam-x"})),
        ("POST", "/v1/activate", _json({"batch_token": key})),
        ("POST", "/v1/activate", b"[" * 5000),
        ("POST", "/v1/activate", _json({"batch_token": key, "device_id": "x" * 300})),
        ("POST", "/v1/usage", _json({"device_id": "cam-1", "records": []})),
        ("GET", "/v1/license", None),
        ("GET", "/v1/revocations/status", None),
        ("GET", "/v1/activate", None),
        ("GET", "/v1/activate%00", None),
        ("GET", "/metrics", None),  # the same rule: no key, not the monitoring network
    ]
    for method, path, body in requests:
        full = _call(live_service.url, method, path, body)
        device = _call(device_service.url, method, path, body)
        assert device[0] == full[0], (method, path, device, full)
        assert _unstamped(device[2]) == _unstamped(full[2]), (method, path, device[2], full[2])
        for name in SECURITY_HEADERS:
            assert device[1].get(name) == full[1].get(name), (method, path, name)

    # An activation on each: the same answer's shape, and the seat counted once each.
    answers = []
    for url, device_id in ((live_service.url, "cam-full"), (device_service.url, "cam-pool")):
        body = _json({"batch_token": key, "device_id": device_id})
        status, _, body = _call(url, "POST", "/v1/activate", body)
        assert status == 200, body
        answers.append(json.loads(body))
    assert set(answers[0]) == set(answers[1])
    assert answers[1]["batch_units_remaining"] == answers[0]["batch_units_remaining"] - 1
    # And again on the device application: the same licence.
    again = _json({"batch_token": key, "device_id": "cam-pool"})
    status, _, body = _call(device_service.url, "POST", "/v1/activate", again)
    assert status == 200 and json.loads(body)["license_id"] == answers[1]["license_id"]

    # /metrics with the operator key: Prometheus text on both (the device node's counts
    # are its own).
    scrapes = [
        _call(url, "GET", "/metrics", headers={"X-Admin-Key": device_service.admin_key})
        for url in (live_service.url, device_service.url)
    ]
    assert [status for status, _, _ in scrapes] == [200, 200]
    assert scrapes[1][1]["Content-Type"] == scrapes[0][1]["Content-Type"]
    assert b'svc_activations_total{result="new"}' in scrapes[1][2]

    health = _call(device_service.url, "GET", "/healthz")
    assert health[0] == 200 and json.loads(health[2])["ok"] is True
    assert health[1]["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("path", ["/v1/admin/customers", "/admin/", "/openapi.json"])
def test_the_console_and_admin_api_are_not_on_the_device_application(
    device_service, transactional_db, path
):
    headers = {"X-Admin-Key": device_service.admin_key}
    status, _, body = _call(device_service.url, "GET", path, headers=headers)
    assert status == 404
    detail = json.loads(body)["detail"]
    assert detail.startswith(f"no endpoint GET {path} on this node: it serves the device API")
