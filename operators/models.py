from __future__ import annotations

from django.db import models

from config import clock
from operators.roles import CAPABILITIES


class OperatorKey(models.Model):
    """A named ``X-Admin-Key``. Only an HMAC-SHA256 digest of the key is stored; the
    prefix (not secret) finds the row, the digest is compared in constant time."""

    name = models.CharField(max_length=100, unique=True)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=clock.now)
    created_by = models.CharField(max_length=150, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The roles (Django groups, operators.roles.ROLES) whose permissions the key holds.
    roles = models.JSONField(default=list)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # The table the audit app created before keys had their own app; kept, so the
        # move changed no row.
        db_table = "audit_operatorkey"
        ordering = ["name"]
        verbose_name = "operator API key"

    def __str__(self) -> str:
        return self.name

    @property
    def active(self) -> bool:
        return self.revoked_at is None and (
            self.expires_at is None or self.expires_at > clock.now()
        )


class Capability(models.Model):
    """No table: the holder of the service's permissions (``operators.roles``), which
    roles (Django groups) grant and ``User.has_perm("operators.<capability>")`` checks."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = list(CAPABILITIES.items())

    def __str__(self) -> str:
        return "capability"
