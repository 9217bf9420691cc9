"""The event log (an outbox: each event is written in the transaction of the change it
reports) and the webhook endpoints that receive it, with every delivery attempt.

A reader of the log (a webhook endpoint, an alert mailbox) keeps a position in it, and a
position must never be passed by an event that commits later. Ids cannot be that
position on PostgreSQL: an id is taken at the INSERT, and a transaction that took id 7
may commit after one that took id 8 was read. So the log's order is ``(xid, id)``, where
``xid`` is the id of the transaction that wrote the event, and readers take only events
whose transaction ended before every transaction still running began writing
(:mod:`events.log`). On SQLite one writer at a time commits in id order; ``xid`` is 0.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Expression, Q

from config import clock


class WritingTransaction(Expression):
    """The column default of ``Event.xid``: on PostgreSQL the id of the transaction
    writing the row (its top-level id, also inside a savepoint); 0 elsewhere."""

    output_field = models.BigIntegerField()
    allowed_default = True  # a column default: no column reference, no parameter

    def as_sql(self, compiler, connection):
        return "0", []

    def as_postgresql(self, compiler, connection):
        return "(pg_current_xact_id()::text)::bigint", []


class Event(models.Model):
    class Type(models.TextChoices):
        LICENSE_ACTIVATED = "license.activated", "license.activated"
        LICENSE_REVOKED = "license.revoked", "license.revoked"
        LICENSE_RENEWED = "license.renewed", "license.renewed"
        LICENSE_EXPIRING = "license.expiring", "license.expiring"
        LICENSE_GRACE_STARTED = "license.grace_started", "license.grace_started"
        LICENSE_LEASE_EXPIRING = "license.lease_expiring", "license.lease_expiring"
        LICENSE_LEASE_EXPIRED = "license.lease_expired", "license.lease_expired"
        LICENSE_SUSPENDED = "license.suspended", "license.suspended"
        LICENSE_REINSTATED = "license.reinstated", "license.reinstated"
        LICENSE_ADDON_ADDED = "license.addon_added", "license.addon_added"
        LICENSE_ADDON_REMOVED = "license.addon_removed", "license.addon_removed"
        LICENSE_TRIAL_EXPIRING = "license.trial_expiring", "license.trial_expiring"
        LICENSE_TRIAL_CONVERTED = "license.trial_converted", "license.trial_converted"
        LICENSE_REBOUND = "license.rebound", "license.rebound"
        LICENSE_CLONE_SUSPECTED = "license.clone_suspected", "license.clone_suspected"
        BATCH_THRESHOLD = "batch.threshold", "batch.threshold"
        SEAT_RELEASED = "seat.released", "seat.released"
        USAGE_QUOTA_THRESHOLD = "usage.quota_threshold", "usage.quota_threshold"
        USAGE_CONFLICT = "usage.conflict", "usage.conflict"
        INVOICE_ISSUED = "invoice.issued", "invoice.issued"
        CREDIT_NOTE_ISSUED = "credit_note.issued", "credit_note.issued"
        INVOICE_PAID = "invoice.paid", "invoice.paid"
        INVOICE_OVERDUE = "invoice.overdue", "invoice.overdue"
        SIGNING_KEY_REVOKED = "signing_key.revoked", "signing_key.revoked"
        TOKEN_COMPROMISE_SUSPECTED = "token.compromise_suspected", "token.compromise_suspected"  # noqa: S105 - a name
        WEBHOOK_DISABLED = "webhook.disabled", "webhook.disabled"

    # With xid, the position in the log: deliveries follow (xid, id); the log's pages
    # follow id.
    id = models.BigAutoField(primary_key=True)
    xid = models.BigIntegerField(
        db_default=WritingTransaction(),
        editable=False,
        verbose_name="transaction",
        help_text="PostgreSQL: the transaction that wrote the event (0 on SQLite, and for "
        "events written before 0003).",
    )
    event_id = models.CharField(max_length=40, verbose_name="event id", help_text="The webhook-id.")
    type = models.CharField(max_length=64, choices=Type.choices)
    customer_id = models.CharField(max_length=64, blank=True)
    data = models.JSONField()
    created_at = models.DateTimeField(default=clock.now)
    once_key = models.CharField(  # noqa: DJ001 - NULL: no key, so never a conflict
        max_length=200,
        null=True,
        blank=True,
        help_text="Set on events that happen once (a threshold, a reminder): a second "
        "scan, on this node or another, writes nothing.",
    )

    class Meta:
        ordering = ["-id"]
        # Written on every new activation: as few indexes as the reads need (the log
        # newest first by type or customer; an event by its id; once-only keys).
        indexes = [
            models.Index(fields=["type", "id"], name="event_type_position"),
            models.Index(fields=["customer_id", "id"], name="event_customer_position"),
            models.Index(fields=["xid", "id"], name="event_commit_position"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["event_id"], name="event_id_once"),
            models.UniqueConstraint(
                fields=["once_key"], condition=Q(once_key__isnull=False), name="event_once_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} {self.type}"


class Webhook(models.Model):
    id = models.CharField(primary_key=True, max_length=40, verbose_name="webhook id")
    url = models.URLField(max_length=2000)
    events = models.JSONField(help_text='Event types, or ["*"] for every type.')
    customer = models.ForeignKey(
        "customers.Customer",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="webhooks",
        help_text="Only this customer's events; empty: every customer's.",
    )
    # Kept to sign; shown once, when made or rotated (contract §9).
    secret = models.CharField(max_length=100)
    previous_secret = models.CharField(max_length=100, blank=True)
    previous_secret_until = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=clock.now)
    # Delivery state: in order per endpoint, so one position and one head attempt.
    position_xid = models.BigIntegerField(
        default=0, help_text="Transaction (xid) of the last event this endpoint is done with."
    )
    position = models.BigIntegerField(
        default=0, help_text="Id of the last event this endpoint is done with."
    )
    next_attempt_at = models.DateTimeField(default=clock.now, db_index=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(
        default=0, help_text="Failed attempts of the event at the head."
    )
    failing_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.id


class DeliveryAttempt(models.Model):
    # Kept when its endpoint is deleted: svc_event_deliveries_total counts this log and
    # must never go down.
    webhook = models.ForeignKey(
        Webhook, on_delete=models.SET_NULL, null=True, related_name="attempts_made"
    )
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="attempts")
    attempt = models.PositiveIntegerField()
    at = models.DateTimeField(default=clock.now, db_index=True)
    ok = models.BooleanField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField()
    response_excerpt = models.CharField(max_length=500, blank=True)
    error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.webhook_id or 'deleted'} {self.attempt} {'ok' if self.ok else 'failed'}"


class AlertMailbox(models.Model):
    """Where the e-mail alerts to one address stand: the last event it was told about,
    and when its last digest went (at most one per SVC_ALERT_INTERVAL_MINUTES)."""

    address = models.EmailField(max_length=254)
    customer_id = models.CharField(
        max_length=64,
        blank=True,
        help_text="A customer's contact: only its events. Empty: an operator.",
    )
    position_xid = models.BigIntegerField(
        default=0, help_text="Transaction (xid) of the last event reported."
    )
    position = models.BigIntegerField(help_text="Id of the last event reported.")
    last_sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["address", "customer_id"], name="alert_mailbox_once")
        ]

    def __str__(self) -> str:
        return f"{self.address} ({self.customer_id or 'operator'})"
