"""Routes that answer something other than JSON take the client's Accept header for
what they answer (issue 39 item 7): an invoice's PDF to ``Accept: application/pdf`` (was
406), ``/metrics`` to ``Accept: text/plain`` (was 406 unless ``*/*`` came too) and
OpenMetrics to a client asking for it. Their errors stay ``{detail}`` JSON, and a JSON
route still refuses (406) a client that accepts only something else."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tests.portal.conftest import make_world

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
PROMETHEUS_SCRAPE = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@pytest.fixture
def world(db, server_clock, settings):
    settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
    return make_world(server_clock, "Alpha")


def _admin(accept: str | None) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_X_ADMIN_KEY=settings.SVC_ADMIN_KEY)
    if accept:
        client.credentials(HTTP_X_ADMIN_KEY=settings.SVC_ADMIN_KEY, HTTP_ACCEPT=accept)
    return client


def _customer(world, accept: str | None) -> APIClient:
    client = APIClient()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {world.key}"}
    if accept:
        headers["HTTP_ACCEPT"] = accept
    client.credentials(**headers)
    return client


def _json_error(response, status: int) -> None:
    assert response.status_code == status, response.status_code
    assert response["Content-Type"] == "application/json"
    assert set(json.loads(response.content)) == {"detail"}


PDF_ACCEPTS = [None, "application/pdf", "application/pdf, */*;q=0.1", "application/json", "*/*"]


@pytest.mark.parametrize("accept", PDF_ACCEPTS)
def test_the_admin_api_answers_the_pdf_to_who_accepts_it(world, accept):
    response = _admin(accept).get(f"/v1/admin/invoices/{world.invoice.number}.pdf")
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF-")


@pytest.mark.parametrize("accept", PDF_ACCEPTS)
def test_the_customer_api_answers_the_pdf_to_who_accepts_it(world, accept):
    response = _customer(world, accept).get(f"/v1/customer/invoices/{world.invoice.number}.pdf")
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF-")


def test_a_pdf_route_refuses_what_it_cannot_answer_in_json(world):
    _json_error(_admin("text/html").get(f"/v1/admin/invoices/{world.invoice.number}.pdf"), 406)


@pytest.mark.parametrize("accept", ["application/pdf", "application/json"])
def test_a_pdf_routes_errors_are_json(world, accept):
    _json_error(_admin(accept).get("/v1/admin/invoices/INV-1999-000001.pdf"), 404)
    no_key = APIClient()
    no_key.credentials(HTTP_ACCEPT=accept)
    _json_error(no_key.get(f"/v1/admin/invoices/{world.invoice.number}.pdf"), 401)
    _json_error(_customer(world, accept).get("/v1/customer/invoices/INV-1999-000001.pdf"), 404)


@pytest.mark.parametrize("accept", [None, "text/plain", "text/plain;version=0.0.4", "*/*"])
def test_metrics_answer_the_prometheus_text_format(db, accept):
    response = _admin(accept).get("/metrics")
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    assert "# TYPE svc_http_responses_total counter" in text
    assert "# EOF" not in text


@pytest.mark.parametrize("accept", [OPENMETRICS, PROMETHEUS_SCRAPE])
def test_metrics_answer_openmetrics_to_who_asks(db, accept):
    response = _admin(accept).get("/metrics")
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = response.content.decode()
    assert "# TYPE svc_http_responses counter" in text
    assert text.endswith("# EOF\n")


def test_metrics_errors_are_json_whatever_is_accepted(db):
    for accept in ("text/plain", OPENMETRICS):
        client = APIClient()
        client.credentials(HTTP_ACCEPT=accept)
        _json_error(client.get("/metrics"), 401)
    _json_error(_admin("image/png").get("/metrics"), 406)


def test_the_fleet_csv_answers_text_csv_accepted(db):
    response = _admin("text/csv").get("/v1/admin/fleet.csv")
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"] == "text/csv; charset=utf-8"


def test_a_json_route_still_refuses_a_client_that_takes_no_json(db):
    _json_error(_admin("application/pdf").get("/v1/admin/fleet"), 406)
    assert _admin("application/json").get("/v1/admin/fleet").status_code == 200
