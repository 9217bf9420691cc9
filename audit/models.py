"""The audit log of operator actions."""

from __future__ import annotations

from django.db import models

from config import clock


class AuditEntry(models.Model):
    """One operator action (customer create, batch issue, licence issue, revoke, invoice
    issue, operator key changes): who, when, from where, what, and how it ended."""

    class ActorKind(models.TextChoices):
        API_KEY = "api_key", "API key"
        STAFF = "staff", "Staff (admin console)"
        SUPERUSER = "superuser", "Superuser (admin console, every permission)"
        CUSTOMER = "customer", "Customer user (portal)"
        CLI = "cli", "Command line (manage.py)"
        SYSTEM = "system", "System"

    class Result(models.TextChoices):
        OK = "ok", "ok"
        FAILED = "failed", "failed"
        REFUSED = "refused", "refused (possible key compromise)"

    at = models.DateTimeField(default=clock.now, db_index=True)
    actor = models.CharField(max_length=150, help_text="Admin user name or API key name.")
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    ip = models.GenericIPAddressField(null=True, blank=True, verbose_name="IP")
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=128, blank=True, db_index=True)
    detail = models.JSONField(default=dict, blank=True, help_text="Arguments of the action.")
    result = models.CharField(max_length=8, choices=Result.choices)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"

    def __str__(self) -> str:
        return f"{self.action} {self.target} by {self.actor} ({self.result})"
