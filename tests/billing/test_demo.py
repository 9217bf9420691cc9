"""The demo history (issue 43, item 7): ``manage.py demo`` fills every finance page with
90 days of traffic written through the services, reconciles clean, refuses a database
holding real data, and writes nothing the second time; ``POST /v1/admin/demo`` (what
``svcctl demo`` calls) runs it on a development server only."""

from __future__ import annotations

import datetime as dt
import io
import time
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from billing.demo import DEMO_ID_PREFIX
from billing.models import Invoice, UsageRecord
from customers.models import Customer
from licensing.models import Activation, Batch
from portal import services as portal_services
from svcctl.commands import demo as command

pytestmark = pytest.mark.django_db

# The server's clock for the history: "today" is 1 October 2026, so the 90 days are
# 3 July - 30 September and the three invoices' periods are these, read inclusively.
NOW = dt.datetime(2026, 10, 1, 9, 30, tzinfo=dt.UTC)
PERIODS = ("3 July – 1 August 2026", "2–31 August 2026", "1–30 September 2026")


def _demo() -> str:
    out = io.StringIO()
    call_command("demo", stdout=out)
    return out.getvalue()


def _portal_client(customer: Customer) -> Client:
    _, link = portal_services.invitation_create(
        customer_id=customer.pk,
        email="controller@demo.invalid",
        invited_by="ops",
        link_base="http://testserver/portal/invitation/",
    )
    secret = link.rstrip("/").rsplit("/", 1)[1]
    account = portal_services.invitation_accept(secret=secret, password="demo horse 42 staple")
    client = Client()
    client.force_login(account.user)
    return client


def _counts() -> tuple[int, ...]:
    return (
        Customer.objects.count(),
        Batch.objects.count(),
        Activation.objects.count(),
        UsageRecord.objects.count(),
        Invoice.objects.count(),
    )


def test_the_demo_fills_every_finance_page_reconciles_clean_and_runs_once(
    admin_client, server_clock
):
    with server_clock.at(NOW):
        started = time.monotonic()
        printed = _demo()
        seconds = time.monotonic() - started
        assert seconds < 60, seconds
        # Progress, period by period, in the one date format.
        assert "writing 90 days of history, 3 July – 30 September 2026" in printed
        for period in PERIODS:
            assert f"\n{period}: " in printed
        assert "credit note CN-" in printed

        customers = list(Customer.objects.order_by("country"))
        assert [c.country for c in customers] == ["DE", "FR", "JP", "KW"]
        assert all(c.id.startswith(DEMO_ID_PREFIX) and len(c.name) > 50 for c in customers)
        invoices = Invoice.objects.filter(kind=Invoice.Kind.INVOICE)
        assert invoices.count() == 12
        assert set(invoices.values_list("currency", flat=True)) == {"EUR", "JPY", "KWD"}
        for customer in customers:
            # Contiguous periods over the 90 days, ending today (the German customer's
            # partial price credit leaves its periods as they were).
            mine = invoices.filter(customer=customer)
            days = [(i.period_end - i.period_start).days for i in mine.order_by("period_start")]
            assert days == [30, 30, 30], days
            assert mine.order_by("period_start").last().period_end == NOW.replace(hour=0, minute=0)
            assert all(i.total > 0 for i in invoices.filter(customer=customer))
        # VAT as the customers' countries make it: domestic, reverse charge, outside EU.
        categories = {i.customer.country: {t.category for t in i.taxes.all()} for i in invoices}
        assert categories == {"DE": {"S"}, "FR": {"AE"}, "JP": {"O"}, "KW": {"O"}}
        note = Invoice.objects.get(kind=Invoice.Kind.CREDIT_NOTE)
        assert note.credits.customer.country == "DE" and note.total < 0
        # A partial credit: two units of the invoice's first line, a price credit.
        assert note.partial and note.price_only
        (credited,) = note.lines.all()
        assert credited.quantity == -2 and credited.credited_line == 1
        assert -note.total < note.credits.total
        german = customers[0]
        latest = invoices.filter(customer=german).order_by("period_end").last()

        out = io.StringIO()
        call_command("reconcile", "--deep", stdout=out)
        assert "OK: nothing is billed twice" in out.getvalue()

        # Every finance page, filled: the console's invoice list, an invoice's page, the
        # customer's page, the dashboard (its ledger panel from the demo's reconciliation)
        # and the portal's invoices.
        listing = admin_client.get("/admin/billing/invoice/").content.decode()
        assert all(i.number in listing for i in invoices) and note.number in listing
        assert all(period in listing for period in PERIODS)
        document = admin_client.get(reverse("console-document", args=[latest.number]))
        page = document.content.decode()
        assert document.status_code == 200
        assert german.name.replace("&", "&amp;") in page
        assert PERIODS[-1] in page
        customer_page = admin_client.get(f"/admin/customers/customer/{german.pk}/change/")
        assert latest.number in customer_page.content.decode()
        dashboard = admin_client.get(reverse("console-dashboard")).content.decode()
        assert 'id="ledger-checked"' in dashboard and 'id="ledger-never"' not in dashboard
        assert customers[3].name.replace("&", "&amp;") in dashboard
        portal = _portal_client(german).get(reverse("portal-invoices")).content.decode()
        for number in invoices.filter(customer=german).values_list("number", flat=True):
            assert number in portal
        assert note.number in portal and PERIODS[0] in portal

        # A second run finds the demo and writes nothing.
        before = _counts()
        assert "the demo is already there (4 customers); nothing written" in _demo()
        assert _counts() == before


def test_the_demo_refuses_a_database_holding_real_data(customer):
    before = _counts()
    with pytest.raises(CommandError) as refused:
        _demo()
    message = str(refused.value)
    assert "this database holds real data" in message
    assert customer.id in message and "nothing was written" in message
    assert _counts() == before


def test_the_demo_endpoint_is_for_development_servers_only(admin_api, settings, server_clock):
    settings.DEBUG = False
    refused = admin_api.post("/v1/admin/demo", {}, format="json")
    assert refused.status_code == 404
    assert "development server" in refused.json()["detail"]
    assert Customer.objects.count() == 0

    settings.DEBUG = True
    with server_clock.at(NOW):
        first = admin_api.post("/v1/admin/demo", {}, format="json")
        assert first.status_code == 201, first.content
        body = first.json()
        assert body["created"] is True and len(body["customers"]) == 4
        assert len(body["invoices"]) == 12 and len(body["credit_notes"]) == 1
        again = admin_api.post("/v1/admin/demo", {}, format="json")
        assert again.status_code == 200 and again.json()["created"] is False
        assert again.json()["invoices"] == body["invoices"]


def test_the_demo_endpoint_names_the_real_data_it_refuses(admin_api, settings, customer):
    settings.DEBUG = True
    refused = admin_api.post("/v1/admin/demo", {}, format="json")
    assert refused.status_code == 409
    assert customer.id in refused.json()["detail"]


def test_svcctl_demo_posts_and_says_what_the_server_wrote(monkeypatch, capsys):
    answers = [
        {"created": True, "customers": ["CUST-DEMO-1"] * 4, "invoices": ["INV-1"] * 12,
         "credit_notes": ["CN-2026-000001"], "seconds": 4.2},
        {"created": False, "customers": ["CUST-DEMO-1"] * 4, "invoices": ["INV-1"] * 12,
         "credit_notes": ["CN-2026-000001"], "seconds": 0.01},
    ]  # fmt: skip
    posts = []

    class Client:
        def post(self, path, body):
            posts.append(path)
            return answers[len(posts) - 1]

    monkeypatch.setattr(command, "connect", lambda args: Client())
    args = SimpleNamespace(json=False)
    assert command.cmd_demo(args) == 0 and command.cmd_demo(args) == 0
    out = capsys.readouterr().out
    assert posts == ["demo", "demo"]
    assert "demo written in 4.2 s: 4 customers, 12 invoices, credit note(s) CN-2026-000001" in out
    assert "the demo is already there (4 customers); nothing written" in out
