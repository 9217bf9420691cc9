"""Payment reminders (issue 43): SVC_REMINDER_DAYS past due, the first, second and final
reminder e-mailed to the customer's contact with the invoice's PDF, each once (two runs
at once included); ``invoice.overdue`` once; ``invoice.paid`` and ``invoice.overdue``
delivered to webhooks like any event."""

from __future__ import annotations

import datetime as dt
import io
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core import mail
from django.core.management import call_command
from django.db import connection, connections

from billing.payment_models import PaymentReminder
from billing.payments import payment_record
from billing.reminders import level_due, reminders_send
from config import clock
from events import delivery
from events.models import Event
from events.scan import events_scan
from tests.billing.payment_support import credit_note, invoice
from tests.events.receiver import Receiver

D = dt.timedelta


@pytest.fixture
def billed(customer):
    customer.contact = "accounts@customer.example.com"
    customer.save()
    return customer


def test_level_due_follows_the_schedule():
    schedule = (7, 21, 35)
    assert [level_due(days, schedule) for days in (0, 6, 7, 20, 21, 35, 400)] == [
        0, 0, 1, 1, 2, 3, 3
    ]  # fmt: skip


@pytest.mark.django_db
def test_reminders_are_sent_once_each_at_their_day(billed, settings):
    settings.SVC_REMINDER_DAYS = (7, 21, 35)
    now = clock.now()
    late = invoice(billed, "119.00", tax="19.00", issued_at=now - D(days=30 + 8))
    invoice(billed, "50.00", issued_at=now - D(days=30 + 3))  # overdue, no reminder yet
    paid = invoice(billed, "10.00", issued_at=now - D(days=60))
    payment_record(number=paid.number, amount="10.00")
    void = invoice(billed, "10.00", issued_at=now - D(days=60))
    credit_note(void)

    run = reminders_send(now)
    assert run.sent == [(late.number, 1)] and run.overdue_events == 2
    message = mail.outbox[0]
    assert message.to == ["accounts@customer.example.com"]
    assert late.number in message.subject and "First reminder" in message.subject
    assert "119.00 EUR" in message.body and "8 day(s) overdue" in message.body
    assert message.attachments[0][0] == f"{late.number}.pdf"
    assert message.attachments[0][1].startswith(b"%PDF")

    assert reminders_send(now).sent == []  # again the same day: nothing
    second = invoice_number_of_second(billed, late)
    assert sorted(reminders_send(now + D(days=14)).sent) == [(late.number, 2), (second, 1)]
    final = reminders_send(now + D(days=28))
    assert sorted(final.sent) == [(late.number, 3), (second, 2)]
    assert "final reminder" in next(m for m in mail.outbox if "Final" in m.subject).body
    assert reminders_send(now + D(days=29)).sent == []
    assert PaymentReminder.objects.filter(invoice=late).count() == 3
    overdue = Event.objects.filter(type="invoice.overdue")
    assert sorted(e.data["invoice_number"] for e in overdue) == sorted([late.number, second])
    data = overdue.get(data__invoice_number=late.number).data
    assert (data["balance"], data["currency"], data["days_overdue"]) == ("119.00", "EUR", 8)


def invoice_number_of_second(customer, late) -> str:
    return customer.invoices.filter(kind="invoice", total=50).get().number


@pytest.mark.django_db
def test_a_paid_invoice_gets_no_further_reminder(billed, settings):
    settings.SVC_REMINDER_DAYS = (7, 21)
    now = clock.now()
    late = invoice(billed, "100.00", issued_at=now - D(days=40))
    assert reminders_send(now).sent == [(late.number, 1)]
    payment_record(number=late.number, amount="100.00")
    assert reminders_send(now + D(days=30)).sent == []
    assert Event.objects.filter(type="invoice.paid").count() == 1


@pytest.mark.django_db
def test_a_late_discovery_sends_only_the_highest_level_due(billed, settings):
    settings.SVC_REMINDER_DAYS = (7, 21, 35)
    late = invoice(billed, "100.00", issued_at=clock.now() - D(days=30 + 50))
    assert reminders_send().sent == [(late.number, 3)]
    assert len(mail.outbox) == 1


@pytest.mark.django_db
def test_no_address_no_reminder_but_the_event(customer, settings):
    customer.contact = "call Bob"
    customer.save()
    late = invoice(customer, "100.00", issued_at=clock.now() - D(days=40))
    run = reminders_send()
    assert run.no_address == [late.number] and not mail.outbox
    assert Event.objects.filter(type="invoice.overdue").count() == 1


@pytest.mark.django_db
def test_off_sends_none(billed, settings):
    settings.SVC_REMINDER_DAYS = ()
    invoice(billed, "100.00", issued_at=clock.now() - D(days=90))
    assert reminders_send().sent == [] and not mail.outbox


@pytest.mark.django_db
def test_a_failed_send_is_retried_by_the_next_run(billed, settings, monkeypatch):
    late = invoice(billed, "100.00", issued_at=clock.now() - D(days=40))

    def down(self, *args, **kwargs):
        raise OSError("SMTP down")

    monkeypatch.setattr("django.core.mail.EmailMessage.send", down)
    assert reminders_send().failed == [late.number]
    assert not PaymentReminder.objects.exists()
    monkeypatch.undo()
    assert reminders_send().sent == [(late.number, 1)]


@pytest.mark.django_db
def test_the_scheduled_pass_and_the_command_send_them(billed):
    late = invoice(billed, "100.00", issued_at=clock.now() - D(days=40))
    result = events_scan()
    assert result.written == {"invoice.overdue": 1, "payment.reminder": 1}
    assert events_scan().written == {}
    out = io.StringIO()
    late2 = invoice(billed, "70.00", issued_at=clock.now() - D(days=40))
    call_command("send_reminders", stdout=out)
    assert f"sent the first reminder of {late2.number}" in out.getvalue()
    assert late.number not in out.getvalue()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent workers: PostgreSQL")
def test_two_concurrent_runs_send_each_reminder_once(billed):
    now = clock.now()
    numbers = [invoice(billed, "100.00", issued_at=now - D(days=40)).number for _ in range(4)]
    start = threading.Barrier(2)

    def run():
        start.wait(timeout=30)
        try:
            return reminders_send(now).sent
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: run(), range(2)))
    sent = sorted(results[0] + results[1])
    assert sent == sorted((number, 1) for number in numbers)
    assert len(mail.outbox) == 4
    assert PaymentReminder.objects.count() == 4
    assert Event.objects.filter(type="invoice.overdue").count() == 4


@pytest.mark.django_db
def test_paid_and_overdue_reach_webhooks(billed, admin_api, settings):
    settings.SVC_WEBHOOK_ALLOW_HTTP = True
    settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
    receiver = Receiver().start()
    try:
        hook = admin_api.post(
            "/v1/admin/webhooks",
            {"url": receiver.url, "events": ["invoice.paid", "invoice.overdue"]},
            format="json",
        ).json()
        receiver.secrets = [hook["secret"]]
        late = invoice(billed, "100.00", issued_at=clock.now() - D(days=40))
        reminders_send()
        admin_api.post(f"/v1/admin/invoices/{late.number}/payments", {"amount": "100.00"},
                       format="json")  # fmt: skip
        for _ in range(10):
            if delivery.deliver_one() is None:
                break
        bodies = [d.body for d in receiver.accepted()]
    finally:
        receiver.stop()
    assert [b["type"] for b in bodies] == ["invoice.overdue", "invoice.paid"]
    paid = bodies[1]["data"]
    assert paid["invoice_number"] == late.number and paid["customer_id"] == billed.id
    assert (paid["total"], paid["paid"], paid["balance"], paid["currency"]) == (
        "100.00",
        "100.00",
        "0.00",
        "EUR",
    )
