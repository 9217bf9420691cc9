"""Customer accounts and what they own: the invitation that made each one, the
read-only API keys a customer creates, and the renewals it asks for."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from config import clock


class CustomerUser(models.Model):
    """A person of a customer: a Django user (never staff) that belongs to exactly one
    customer and sees only its data."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="customer_account"
    )
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="accounts"
    )
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=clock.now)
    invited_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["customer_id", "user__username"]
        verbose_name = "customer user"

    def __str__(self) -> str:
        return f"{self.user.get_username()} ({self.customer_id})"


class Invitation(models.Model):
    """An operator's invitation to a customer: the e-mailed link holds a secret of which
    only the SHA-256 digest is kept; it sets a password once, before it expires."""

    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="invitations"
    )
    email = models.EmailField(max_length=254)
    name = models.CharField(max_length=200, blank=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField()
    invited_by = models.CharField(max_length=150, blank=True)
    accepted_at = models.DateTimeField(null=True, blank=True)
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    withdrawn_by = models.CharField(max_length=150, blank=True)
    account = models.OneToOneField(
        CustomerUser, on_delete=models.SET_NULL, null=True, blank=True, related_name="invitation"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.email} to {self.customer_id}"

    @property
    def state(self) -> str:
        if self.accepted_at is not None:
            return "accepted"
        if self.withdrawn_at is not None:
            return "withdrawn"
        return "expired" if self.expires_at <= clock.now() else "pending"


class CustomerApiKey(models.Model):
    """A key of one customer for /v1/customer/... (read-only unless ``write``): the
    prefix (not secret) finds the row, an HMAC-SHA256 digest of the key is compared in
    constant time.

    ``owner`` is the portal user who created it: the key dies with its owner
    (deactivating the user revokes it, and a key whose owner is inactive opens nothing).
    Keys made outside the portal have none."""

    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="api_keys"
    )
    owner = models.ForeignKey(
        CustomerUser,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="api_keys",
        help_text="The portal user who created it; deactivating them revokes it.",
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=clock.now)
    created_by = models.CharField(max_length=150, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    write = models.BooleanField(
        default=False,
        help_text="May also upload air-gapped cameras' files (/v1/customer/offline/...), "
        "which takes seats; otherwise the key only reads.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "customer API key"
        constraints = [
            models.UniqueConstraint(
                fields=["customer", "name"],
                condition=Q(revoked_at__isnull=True),
                name="customer_key_name_once",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.customer_id})"


class RenewalRequest(models.Model):
    """A customer's request to renew a batch or a direct licence. Nothing is renewed or
    billed until an operator approves it (the renewal then runs as an operator's)."""

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        APPROVED = "approved", "approved"
        DECLINED = "declined", "declined"

    id = models.CharField(primary_key=True, max_length=40, verbose_name="request id")
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="renewal_requests"
    )
    batch_id = models.CharField(max_length=64, blank=True)
    license_id = models.CharField(max_length=64, blank=True)
    term_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Days asked for; empty: the SKU's term."
    )
    note = models.CharField(max_length=500, blank=True)
    requested_by = models.CharField(max_length=150)
    requested_at = models.DateTimeField(default=clock.now)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=150, blank=True)
    decision_note = models.CharField(max_length=500, blank=True)
    new_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]

    def __str__(self) -> str:
        return self.id

    @property
    def target(self) -> str:
        return f"batch {self.batch_id}" if self.batch_id else f"licence {self.license_id}"
