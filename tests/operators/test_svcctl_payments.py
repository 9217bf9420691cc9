"""`svcctl payment-record`, `payments` and `payment-import` (issue 43), each through the
real admin API (Django's test client stands in for the HTTP connection)."""

from __future__ import annotations

import json
from decimal import Decimal
from types import SimpleNamespace

import pytest

from billing.payment_models import Payment
from svcctl.client import ApiError
from svcctl.commands import payments
from tests.billing.payment_support import invoice
from tests.billing.test_camt053 import v08

pytestmark = pytest.mark.django_db


class ThroughTestClient:
    """svcctl's AdminClient, answered by the service in this process."""

    def __init__(self, api):
        self.api = api

    def _answer(self, response):
        body = json.loads(response.content or b"null", parse_float=Decimal)
        if response.status_code >= 400:
            raise ApiError(body["detail"], response.status_code)
        return body

    def get(self, path, **query):
        return self._answer(self.api.get(f"/v1/admin/{path}", query))

    def post(self, path, body):
        return self._answer(self.api.post(f"/v1/admin/{path}", body, format="json"))


@pytest.fixture
def wired(admin_api, monkeypatch):
    monkeypatch.setattr(payments, "connect", lambda args: ThroughTestClient(admin_api))


def test_record_then_list(customer, wired, capsys):
    inv = invoice(customer, "1190.00", tax="190.00")
    args = SimpleNamespace(number=inv.number, amount="1000.00", date="2026-01-10",
                           reference="SEPA 42", note=None, json=False)  # fmt: skip
    assert payments.cmd_payment_record(args) == 0
    out = capsys.readouterr().out
    assert f"recorded 1,000.00 EUR against {inv.number} (paid on 2026-01-10)" in out
    assert f"{inv.number}: partly paid, balance 190.00 EUR" in out
    assert payments.cmd_payments(SimpleNamespace(number=inv.number, json=False)) == 0
    listed = capsys.readouterr().out
    assert "2026-01-10" in listed and "SEPA 42" in listed and "1,000.00" in listed


def test_a_refusal_is_the_service_detail(customer, wired):
    inv = invoice(customer, "10.00", currency="JPY")
    args = SimpleNamespace(number=inv.number, amount="10.5", date=None, reference=None,
                           note=None, json=False)  # fmt: skip
    with pytest.raises(ApiError, match="more decimals than JPY"):
        payments.cmd_payment_record(args)


def test_import_with_a_dry_run_first(customer, wired, tmp_path, capsys):
    inv = invoice(customer, "10.00")
    path = tmp_path / "statement.xml"
    path.write_bytes(v08("10.00", inv.number))
    args = SimpleNamespace(file=str(path), dry_run=True, strict=False, json=False)
    assert payments.cmd_payment_import(args) == 0
    captured = capsys.readouterr()
    assert "matched" in captured.out and inv.number in captured.out
    assert "dry run: nothing was imported" in captured.err
    assert not Payment.objects.exists()
    args.dry_run = False
    assert payments.cmd_payment_import(args) == 0
    assert Payment.objects.count() == 1
    assert payments.cmd_payment_import(args) == 0  # again: already imported
    assert "1 already imported" in capsys.readouterr().err
    path.write_bytes(v08("10.00", "no number here").replace(b"77001", b"77003"))
    args.strict = True
    assert payments.cmd_payment_import(args) == 1
