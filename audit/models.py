"""The audit log of operator actions."""

from __future__ import annotations

from django.db import models

from config import clock


class AuditEntry(models.Model):
    """One operator action (customer create, batch issue, licence issue, revoke, invoice
    issue, operator key changes): who, when, from where, what, and how it ended; or one
    refusal (a wrong or unauthorised key, a missing permission, a limit, a wrong code),
    identical ones of the same clock minute counted in ``repeats`` on one row
    (:func:`audit.services.audit_refusal`)."""

    class ActorKind(models.TextChoices):
        API_KEY = "api_key", "API key"
        STAFF = "staff", "Staff (admin console)"
        SUPERUSER = "superuser", "Superuser (admin console, every permission)"
        CUSTOMER = "customer", "Customer user (portal)"
        CUSTOMER_KEY = "customer_key", "Customer API key"
        DEVICE = "device", "Camera (device API)"
        CLI = "cli", "Command line (manage.py)"
        SYSTEM = "system", "System"

    class Result(models.TextChoices):
        OK = "ok", "ok"
        FAILED = "failed", "failed"
        # Any refusal: a wrong or unauthorised key, a missing permission, a limit, a
        # wrong code, a lockout (audit.services.audit_refusal).
        REFUSED = "refused", "refused"

    at = models.DateTimeField(default=clock.now, db_index=True)
    actor = models.CharField(max_length=150, help_text="Admin user name or API key name.")
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    ip = models.GenericIPAddressField(null=True, blank=True, verbose_name="IP")
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=128, blank=True, db_index=True)
    detail = models.JSONField(default=dict, blank=True, help_text="Arguments of the action.")
    result = models.CharField(max_length=8, choices=Result.choices)
    message = models.TextField(blank=True)
    # A refusal's: the key presented (named even when expired or revoked), the
    # permission that was needed, and the HTTP status answered.
    key_name = models.CharField(max_length=150, blank=True, db_index=True)
    capability = models.CharField(max_length=64, blank=True)
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    # How many identical refusals this row stands for (same actor, actor kind, key name,
    # address, action, target and status in the same clock minute): the only column
    # ever updated, by one ``SET repeats = repeats + 1``.
    repeats = models.PositiveIntegerField(default=1)
    # A refusal's identity and minute (sha256, hex); unique, so concurrent workers
    # agree on one row per minute. NULL for actions.
    fingerprint = models.CharField(max_length=64, null=True, blank=True, unique=True,
                                   editable=False)  # fmt: skip

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(repeats__gte=1), name="audit_repeats_positive"
            )
        ]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"

    def __str__(self) -> str:
        return f"{self.action} {self.target} by {self.actor} ({self.result})"
