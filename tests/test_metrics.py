"""GET /metrics: Prometheus text for the monitoring network or an operator, with the
counters of every gunicorn worker added up (multiprocess mode) and the cluster's gauges
read from the database; on full nodes and device nodes (``config.device_wsgi``) alike."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest
from django.conf import settings
from django.test import Client

from events.services import event_emit
from tests.conftest import start_gunicorn, stop_gunicorn

pytestmark = pytest.mark.django_db


def _value(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+-]+)$"
    found = re.search(pattern, text, re.MULTILINE)
    assert found, f"{name}{labels} not in:\n{text[:3000]}"
    return float(found.group(1))


def test_metrics_need_the_allowlist_or_the_operator_key(client, settings):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_X_ADMIN_KEY="wrong").status_code == 403
    answer = client.get("/metrics", HTTP_X_ADMIN_KEY=settings.SVC_ADMIN_KEY)
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/plain")
    settings.SVC_METRICS_ALLOWLIST = ["127.0.0.0/8"]
    assert client.get("/metrics").status_code == 200


def test_metrics_answer_plain_http_under_the_tls_redirect(settings):
    """Prometheus scrapes each node over plain HTTP on the private network: /metrics, like
    /healthz, is not redirected to HTTPS (a node has no TLS port to follow it to)."""
    settings.SECURE_SSL_REDIRECT = True
    client = Client()  # its middleware reads the redirect setting when first called
    assert client.get("/v1/revocations").status_code == 301
    answer = client.get("/metrics", HTTP_X_ADMIN_KEY=settings.SVC_ADMIN_KEY)
    assert answer.status_code == 200


def test_counters_and_gauges_follow_what_happens(
    client, device_api, admin_api, make_batch, settings, django_capture_on_commit_callbacks
):
    settings.SVC_METRICS_ALLOWLIST = ["127.0.0.0/8"]
    before = client.get("/metrics").content.decode()
    batch = make_batch(units=1)
    body = {"batch_token": batch.license.token, "device_id": "cam-m1"}
    unit = device_api.post("/v1/activate", body, format="json").json()
    device_api.post("/v1/activate", body, format="json")
    device_api.post("/v1/activate", {**body, "device_id": "cam-m2"}, format="json")  # 402
    with django_capture_on_commit_callbacks(execute=True):  # counted once committed
        admin_api.post("/v1/admin/revoke", {"license_id": unit["license_id"]}, format="json")
    event_emit("signing_key.revoked", data={"kid": "k"})
    # An address outside the allowlist over the limit: 429 before the view runs.
    settings.SVC_ACTIVATION_ALLOWLIST = []
    settings.SVC_ACTIVATION_RATE = "1/10s"
    outside = {"format": "json", "REMOTE_ADDR": "198.51.100.7"}
    assert device_api.post("/v1/activate", {}, **outside).status_code == 400
    assert device_api.post("/v1/activate", body, **outside).status_code == 429
    after = client.get("/metrics").content.decode()
    for result in ("new", "reactivated", "refused", "throttled"):
        name, labels = "svc_activations_total", f'{{result="{result}"}}'
        assert _value(after, name, labels) - _value(before, name, labels) == 1, result
    assert _value(after, "svc_revocations_total") - _value(before, "svc_revocations_total") == 1
    assert _value(after, "svc_revocation_list_seq") >= 1
    assert _value(after, "svc_signing_seconds_count", '{signer="file"}') > 0
    assert _value(after, "svc_event_backlog") == 0  # no endpoint registered
    assert _value(after, "svc_event_deliveries_total", '{result="ok"}') == 0
    four = "svc_http_responses_total", '{status_class="4xx"}'
    assert _value(after, *four) - _value(before, *four) == 3  # 402, 400 and 429


@pytest.mark.live
def test_a_gunicorn_node_adds_up_its_workers(live_service, transactional_db, make_batch):
    """Three workers answer the activations; /metrics, wherever it lands, counts all."""
    batch = make_batch(units=40)
    for n in range(30):
        request = urllib.request.Request(
            f"{live_service.url}/v1/activate",
            data=json.dumps({"batch_token": batch.license.token, "device_id": f"m-{n}"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=30).read()
    scrapes = []
    for _ in range(6):
        request = urllib.request.Request(
            f"{live_service.url}/metrics", headers={"X-Admin-Key": settings.SVC_ADMIN_KEY}
        )
        scrapes.append(urllib.request.urlopen(request, timeout=30).read().decode())
    for text in scrapes:
        assert _value(text, "svc_activations_total", '{result="new"}') >= 30
    # Every scrape sees the same count, whichever worker answered it.
    counts = {_value(text, "svc_activations_total", '{result="new"}') for text in scrapes}
    assert len(counts) == 1, counts


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as answer:
        return answer.code, answer.read().decode()


def _post(url: str, body: dict, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as answer:
        return answer.code, json.load(answer)


@pytest.mark.live
def test_a_device_node_counts_the_cameras_traffic(transactional_db, make_batch, tmp_path):
    """The device application (config.device_wsgi) serves /metrics under the full nodes'
    rule: its monitoring network (here 10.9.0.0/16, behind the trusted proxy 127.0.0.1)
    without a key, anyone else with the operator key only. Its counters hold what the
    cameras did there: a seat taken, a refusal (402), a throttled activation (429) and
    a usage record, with the 4xx answers among the responses."""
    node = start_gunicorn(
        tmp_path,
        app="config.device_wsgi",
        SVC_ACTIVATION_ALLOWLIST="",
        SVC_ACTIVATION_RATE="2/10m",
        SVC_METRICS_ALLOWLIST="10.9.0.0/16",
        SVC_TRUSTED_PROXIES="127.0.0.1/32",
    )
    try:
        batch = make_batch(units=1)
        activate = f"{node.url}/v1/activate"
        status, unit = _post(activate, {"batch_token": batch.license.token, "device_id": "d-1"})
        assert status == 200, unit
        exhausted = {"batch_token": batch.license.token, "device_id": "d-2"}
        assert _post(activate, exhausted)[0] == 402
        assert _post(activate, exhausted)[0] == 429
        now = int(time.time())
        record = {"period_start": now - 1800, "period_end": now - 600, "inferences": 5,
                  "frames": 0, "stream_seconds": 0, "events": 0}  # fmt: skip
        auth = {"Authorization": f"Bearer {unit['unit_token']}"}
        upload = {"device_id": "d-1", "records": [record], "nonce": "metrics-1"}
        status, receipt = _post(f"{node.url}/v1/usage", upload, auth)
        assert status == 200 and receipt["accepted"] == 1, receipt

        metrics = f"{node.url}/metrics"
        outsider = {"X-Forwarded-For": "203.0.113.7"}
        assert _get(metrics, outsider)[0] == 401
        assert _get(metrics, {**outsider, "X-Admin-Key": "wrong"})[0] == 403
        status, text = _get(metrics, {"X-Forwarded-For": "10.9.3.4"})
        assert status == 200, text
        assert _get(metrics, {**outsider, "X-Admin-Key": node.admin_key})[0] == 200
    finally:
        stop_gunicorn(node)

    for result in ("new", "refused", "throttled"):
        assert _value(text, "svc_activations_total", f'{{result="{result}"}}') == 1, result
    assert _value(text, "svc_activations_total", '{result="reactivated"}') == 0
    assert _value(text, "svc_usage_records_total", '{result="accepted"}') == 1
    assert _value(text, "svc_signing_seconds_count", '{signer="file"}') >= 2  # token, receipt
    # 402, 429, and the two refused scrapes, whichever of the three workers answered.
    assert _value(text, "svc_http_responses_total", '{status_class="4xx"}') == 4
    assert _value(text, "svc_revocation_list_seq") >= 0  # the cluster's gauges too


def test_the_shipped_prometheus_config_and_alert_rules_hold():
    """deploy/prometheus: the scrape config is valid, and each alert rule fires on the
    series that should raise it and stays quiet otherwise (promtool's rule tests)."""
    import shutil
    import subprocess

    from tests.conftest import REPO, tool_missing

    promtool = shutil.which("promtool")
    if promtool is None:
        tool_missing("promtool (Debian package prometheus) is not installed")
    directory = REPO / "deploy" / "prometheus"
    for command in (["check", "config", "prometheus.yml"], ["test", "rules", "alerts_test.yml"]):
        result = subprocess.run(
            [promtool, *command], cwd=directory, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stdout + result.stderr
