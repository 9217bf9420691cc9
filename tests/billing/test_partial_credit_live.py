"""Partial credit notes through a real server (issue 43 item 4): two credit notes racing
for an invoice line's last units, one wins (the customer's row lock serialises them),
the other is refused naming what remains; and ``svcctl credit-note --line N=QTY``
with --dry-run, --rebill and a refusal."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.db.models import Sum

from billing.document_checks import document_problems
from billing.models import Invoice, LedgerEntry
from tests.billing.test_ledger_concurrency import _call, _race
from tests.operators.test_svcctl import svcctl

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

JAN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def invoiced(customer, make_batch, activate):
    batch = make_batch(units=10, sku="VISION-PRO")
    for n in range(5):
        activate(batch, f"cam-{n}", at=JAN + dt.timedelta(days=n + 1))
    call_command(
        "issue_invoices", "--period-days", "31", "--end", "2026-02-01", stdout=io.StringIO()
    )
    return Invoice.objects.get()


def test_two_credit_notes_racing_for_the_last_units_one_wins(live_service, invoiced):
    admin = {"X-Admin-Key": live_service.admin_key}
    path = f"/v1/admin/invoices/{invoiced.number}/credit-note"
    status, _ = _call(
        live_service.url, path, {"reason": "first", "lines": [{"line": 1, "quantity": 3}]}, admin
    )
    assert status == 201
    body = {"reason": "race", "lines": [{"line": 1, "quantity": 2}], "rebill": True}
    results = _race([lambda: _call(live_service.url, path, body, admin)] * 2)
    assert sorted(status for status, _ in results) == [201, 409], results
    refused = next(answer for status, answer in results if status == 409)
    # Its only line is fully credited now: the invoice has nothing left.
    assert "already credited by CN-" in refused["detail"]
    assert "nothing of it remains" in refused["detail"]
    assert Invoice.objects.filter(kind="credit_note").count() == 2
    reversed_events = LedgerEntry.objects.filter(document__kind="credit_note")
    assert reversed_events.aggregate(n=Sum("quantity"))["n"] == -2
    assert document_problems(deep=True) == []


def test_svcctl_credits_chosen_lines(live_service, invoiced):
    online = {"SVC_URL": live_service.url, "SVC_ADMIN_KEY": live_service.admin_key}
    dry = svcctl(
        "credit-note", invoiced.number, "--reason", "two units", "--line", "1=2", "--dry-run",
        env=online,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "-480.00 EUR net" in dry.stdout and "a price credit" in dry.stdout
    assert "nothing issued" in dry.stderr
    assert not Invoice.objects.filter(kind="credit_note").exists()
    asked = svcctl(
        "credit-note", invoiced.number, "--reason", "two units", "--line", "1=2", env=online,
        stdin="",
    )  # fmt: skip
    assert asked.returncode == 2 and "in part, -480.00 EUR (price only)?" in asked.stderr
    done = svcctl(
        "credit-note", invoiced.number, "--reason", "two units", "--line", "1=2", "--rebill",
        "--yes", "--json", env=online,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    note = json.loads(done.stdout)
    assert (note["partial"], note["rebill"], note["total"]) == (True, True, -480.0)
    over = svcctl(
        "credit-note", invoiced.number, "--reason", "x", "--line", "1=4", "--yes", env=online
    )
    assert over.returncode == 1 and "already credited 2, asked 4" in over.stderr
    bad = svcctl("credit-note", invoiced.number, "--reason", "x", "--line", "one", env=online)
    assert bad.returncode == 2 and "POSITION=QUANTITY" in bad.stderr
    assert document_problems(deep=True) == []
