"""The rows of the identity binding (issue 45): a unit's hashed components, its
rebindings after repairs and the clones suspected of it (:mod:`licensing.identity`).
Imported by :mod:`licensing.models`, so they are the app's models."""

from __future__ import annotations

from django.db import models

from config import clock
from svccore import dates


class UnitComponent(models.Model):
    """One hashed identity component a unit is bound to: found by its digest within a
    batch, the predecessor of a repaired camera that reports a new device id."""

    # The unit's licence, not its activation record: its id is known before the rows
    # of a new unit are written together (licensing.services.activation).
    license = models.ForeignKey(
        "licensing.License", on_delete=models.PROTECT, related_name="components_held"
    )
    batch = models.ForeignKey("licensing.Batch", on_delete=models.PROTECT, db_index=False)
    name = models.CharField(max_length=32)
    digest = models.CharField(max_length=64, help_text="SHA-256 hex of the component.")

    class Meta:
        verbose_name = "unit component"
        constraints = [
            models.UniqueConstraint(fields=["license", "name"], name="unit_component_once")
        ]
        indexes = [models.Index(fields=["batch", "digest"], name="unit_component_batch_digest")]

    def __str__(self) -> str:
        return f"{self.name} {self.digest[:12]}"


class Rebinding(models.Model):
    """A unit's licence moved to a changed component set (a repair): no seat taken."""

    activation = models.ForeignKey(
        "licensing.Activation", on_delete=models.PROTECT, related_name="rebindings"
    )
    rebound_at = models.DateTimeField(default=clock.now)
    old_device_id = models.CharField(max_length=128)
    new_device_id = models.CharField(max_length=128)
    old_components = models.JSONField(default=dict)
    new_components = models.JSONField(default=dict)
    changed = models.JSONField(default=list, help_text="Names of the components that changed.")
    via = models.CharField(max_length=16, help_text="activation or sync")

    class Meta:
        ordering = ["-rebound_at", "-id"]
        indexes = [models.Index(fields=["activation", "-rebound_at"], name="rebinding_unit_recent")]

    def __str__(self) -> str:
        return f"rebinding of {self.activation_id} at {dates.day(self.rebound_at)}"


class CloneSuspicion(models.Model):
    """A unit's licence presented with components that diverge from the set it is bound
    to (below its policy): a copy of a camera's state on other hardware, or a repair
    beyond the rebinding bound; or with its very set from two addresses in turn faster
    than one camera moves (a bit-for-bit copy, ``addresses`` set). The original is the
    unit's first activation."""

    activation = models.ForeignKey(
        "licensing.Activation", on_delete=models.PROTECT, related_name="clone_suspicions"
    )
    detected_at = models.DateTimeField(default=clock.now)
    device_id = models.CharField(max_length=128, help_text="The device id the copy reported.")
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    components = models.JSONField(default=dict, help_text="The copy's hashed components.")
    components_sha256 = models.CharField(max_length=64)
    evidence = models.JSONField(default=dict)
    # The second signal (the same set from two addresses in turn): the two addresses,
    # sorted, comma-separated, one suspicion per pair; empty for a diverging set.
    addresses = models.CharField(max_length=100, blank=True, default="", db_default="")
    copy_revoked_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="An operator revoked the copy: requests with its components (for the "
        "same set from two addresses: from its address) are refused.",
    )

    class Meta:
        ordering = ["-detected_at", "-id"]
        verbose_name = "clone suspicion"
        indexes = [
            models.Index(fields=["-detected_at", "-id"], name="clone_recent"),
            models.Index(fields=["activation", "components_sha256"], name="clone_unit_set"),
        ]

    def __str__(self) -> str:
        return f"clone of {self.activation_id} at {dates.moment(self.detected_at)}"
