"""The registered signing keys of the authority."""

from __future__ import annotations

from django.db import models

from config import clock


class SigningKey(models.Model):
    """A signing key of the authority, by key id: its public half, its root-signed key
    certificate (``devices.keys``, ``SVCK1``) and where it stands.

    The private key is never stored: the server's lives in ``SVC_SIGNING_KEY_FILE``, an
    air-gap minting key on its offline workstation. State, most decisive first: revoked
    (nothing it signed verifies), retired (signs nothing more; its tokens verify until
    they expire), active (the key ``SVC_SIGNING_KEY_FILE`` holds), standby (certified,
    not in use here).
    """

    class Use(models.TextChoices):
        ONLINE = "online", "online (licences, list pages, receipts)"
        OFFLINE = "offline", "offline (air-gap minting: licences only)"

    class State(models.TextChoices):
        REVOKED = "revoked", "revoked"
        RETIRED = "retired", "retired"
        ACTIVE = "active", "active"
        STANDBY = "standby", "standby"

    kid = models.CharField(primary_key=True, max_length=16, verbose_name="key id")
    public_key = models.CharField(max_length=64, help_text="Unpadded base64url of the raw key.")
    fingerprint = models.CharField(max_length=64, unique=True, help_text="Hex SHA-256.")
    certificate = models.TextField(blank=True, help_text="SVCK1 key certificate from a root.")
    use = models.CharField(max_length=8, choices=Use.choices, default=Use.ONLINE)
    not_before = models.BigIntegerField(default=0, help_text="Unix seconds, from the certificate.")
    not_after = models.BigIntegerField(default=0, help_text="Unix seconds; 0 = no end.")
    created_at = models.DateTimeField(default=clock.now)
    retired_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoke_reason = models.CharField(max_length=500, blank=True)

    class Meta:
        # The table licensing created before keys had their own app; kept, so the move
        # changed no row.
        db_table = "licensing_signingkey"
        ordering = ["created_at", "kid"]
        verbose_name = "signing key"

    def __str__(self) -> str:
        return self.kid
