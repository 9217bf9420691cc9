"""E-mail alerts: what an operator (and, if asked, a customer) must act on - a batch
filling up, a term about to end or begun its grace, a webhook endpoint disabled - as one
digest per recipient per SVC_ALERT_INTERVAL_MINUTES at most, through Django's e-mail
backend. Run by the webhook worker every minute (``alerts_send``); a digest is claimed by
one conditional UPDATE, so several workers send it once."""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.core.mail import send_mail

from config import clock
from customers.models import Customer
from events import log as event_log
from events.models import AlertMailbox, Event
from svccore import dates

log = logging.getLogger(__name__)

OPERATOR_TYPES = (
    Event.Type.BATCH_THRESHOLD,
    Event.Type.LICENSE_EXPIRING,
    Event.Type.LICENSE_GRACE_STARTED,
    Event.Type.LICENSE_LEASE_EXPIRING,
    Event.Type.LICENSE_LEASE_EXPIRED,
    Event.Type.LICENSE_SUSPENDED,
    Event.Type.LICENSE_REINSTATED,
    Event.Type.LICENSE_TRIAL_EXPIRING,
    Event.Type.WEBHOOK_DISABLED,
)
CUSTOMER_TYPES = OPERATOR_TYPES
DIGEST_MAX = 200  # events in one digest; the rest follow in the next


def _when(seconds: int) -> str:
    if not seconds:
        return "never (perpetual)"
    return dates.moment(seconds)


def _term_of(data: dict) -> str:
    what = f"batch {data['batch_id']}" if data.get("batch_id") else f"licence {data['license_id']}"
    return f"{what} of {data['customer_id']} ({data['sku']})"


def line(event: Event) -> str:
    """One event as a sentence with the ids and numbers needed to act."""
    data = event.data
    if event.type == Event.Type.BATCH_THRESHOLD:
        return (
            f"Batch {data['batch_id']} of {data['customer_id']} ({data['sku']}) has used "
            f"{data['percent']} % of its units: {data['units_activated']:,} of "
            f"{data['units_purchased']:,}."
        )
    if event.type == Event.Type.LICENSE_EXPIRING:
        return (
            f"The term of {_term_of(data)} ends "
            f"{_when(data['expires_at'])}, in {data['days']} day(s) or less; renew it to keep "
            "its cameras running."
        )
    if event.type == Event.Type.LICENSE_GRACE_STARTED:
        return (
            f"The term of {_term_of(data)} ended "
            f"{_when(data['expires_at'])}; its cameras run on grace for {data['grace_days']} "
            "day(s)."
        )
    if event.type in (Event.Type.LICENSE_LEASE_EXPIRING, Event.Type.LICENSE_LEASE_EXPIRED):
        camera = (
            f"camera {data['device_id']} (licence {data['license_id']} of {data['customer_id']})"
        )
        if event.type == Event.Type.LICENSE_LEASE_EXPIRED:
            return (
                f"The check-in lease of {camera} ended {_when(data['lease_end'])}: it has not "
                f"synced for {data['max_offline_days']} day(s) and refuses analytics until it "
                "does."
            )
        return (
            f"The check-in lease of {camera} ends {_when(data['lease_end'])}: it must sync "
            "by then to keep its analytics running."
        )
    if event.type in (Event.Type.LICENSE_SUSPENDED, Event.Type.LICENSE_REINSTATED):
        what = {
            "license": f"licence {data.get('license_id')}",
            "batch": f"batch {data.get('batch_id')} (all its units)",
            "customer": "every licence",
        }[data["scope"]]
        if event.type == Event.Type.LICENSE_SUSPENDED:
            return (
                f"{what[0].upper()}{what[1:]} of {data['customer_id']} was suspended "
                f"({data['reason']}): its cameras refuse analytics from their next sync."
            )
        return (
            f"{what[0].upper()}{what[1:]} of {data['customer_id']} was reinstated: its "
            "cameras resume analytics at their next sync."
        )
    if event.type == Event.Type.LICENSE_TRIAL_EXPIRING:
        return (
            f"The trial of camera {data['device_id']} (licence {data['license_id']} of "
            f"{data['customer_id']}, batch {data['batch_id']}, {data['sku']}) ends "
            f"{_when(data['expires_at'])}, in {data['days']} day(s) or less: its analytics "
            "stop then unless the batch is converted to paid."
        )
    if event.type == Event.Type.WEBHOOK_DISABLED:
        return (
            f"Webhook endpoint {data['webhook_id']} ({data['url']}) was disabled: {data['reason']}"
        )
    return f"{event.type}: {data}"


def _recipients() -> list[tuple[str, str]]:
    """(address, customer id or "" for an operator)."""
    recipients = [(address, "") for address in settings.SVC_ALERT_EMAILS]
    if settings.SVC_ALERT_CUSTOMERS:
        contacts = Customer.objects.filter(contact__contains="@").values_list("contact", "id")
        recipients += [(contact.strip(), customer_id) for contact, customer_id in contacts]
    return recipients


def alerts_send(now: dt.datetime | None = None) -> int:
    """Send every digest that is due; returns how many were sent."""
    now = now or clock.now()
    interval = dt.timedelta(minutes=settings.SVC_ALERT_INTERVAL_MINUTES)
    head_xid, head = event_log.end()
    sent = 0
    for address, customer_id in _recipients():
        box, created = AlertMailbox.objects.get_or_create(
            address=address,
            customer_id=customer_id,
            defaults={"position_xid": head_xid, "position": head},
        )
        if created:
            continue  # a new recipient hears about what happens from now on
        if box.last_sent_at is not None and now - box.last_sent_at < interval:
            continue
        events = event_log.unread((box.position_xid, box.position)).filter(
            type__in=CUSTOMER_TYPES if customer_id else OPERATOR_TYPES
        )
        if customer_id:
            events = events.filter(customer_id=customer_id)
        batch = list(events[:DIGEST_MAX])
        if not batch:
            continue
        claimed = AlertMailbox.objects.filter(pk=box.pk, last_sent_at=box.last_sent_at).update(
            last_sent_at=now
        )
        if not claimed:
            continue  # another worker is sending this digest
        subject = f"[licensing] {len(batch)} alert{'s' if len(batch) != 1 else ''}"
        if customer_id:
            subject += f" for {customer_id}"
        body = "\n".join(f"- {line(event)}" for event in batch)
        body += (
            f"\n\nAt most one such e-mail every {settings.SVC_ALERT_INTERVAL_MINUTES} minutes.\n"
        )
        try:
            send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [address])
        except Exception as failure:  # SMTP down: the same digest, next minute
            AlertMailbox.objects.filter(pk=box.pk).update(last_sent_at=box.last_sent_at)
            log.warning("alert e-mail to %s not sent: %s", address, type(failure).__name__)
            continue
        AlertMailbox.objects.filter(pk=box.pk).update(
            position_xid=batch[-1].xid, position=batch[-1].id
        )
        sent += 1
    return sent
