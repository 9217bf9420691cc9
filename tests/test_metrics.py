"""GET /metrics: Prometheus text for the monitoring network or an operator, with the
counters of every gunicorn worker added up (multiprocess mode) and the cluster's gauges
read from the database."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from django.conf import settings

from events.services import event_emit

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
    after = client.get("/metrics").content.decode()
    for result in ("new", "reactivated", "refused"):
        name, labels = "svc_activations_total", f'{{result="{result}"}}'
        assert _value(after, name, labels) - _value(before, name, labels) == 1, result
    assert _value(after, "svc_revocations_total") - _value(before, "svc_revocations_total") == 1
    assert _value(after, "svc_revocation_list_seq") >= 1
    assert _value(after, "svc_signing_seconds_count", '{signer="file"}') > 0
    assert _value(after, "svc_event_backlog") == 0  # no endpoint registered
    assert _value(after, "svc_event_deliveries_total", '{result="ok"}') == 0
    assert _value(after, "svc_http_responses_total", '{status_class="4xx"}') >= 1


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
