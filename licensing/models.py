"""Catalogue, batches, licences and activations.

Seat accounting is enforced by the database as the last line of defence: a batch can
never have more activations than units purchased (check constraint), and a device is on
file at most once per batch (unique constraint).
"""

from __future__ import annotations

import hashlib
import secrets
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q
from django.db.models.lookups import GreaterThanOrEqual

from config import clock
from svccore import addons, catalogue, dates


def token_digest(token: str) -> str:
    """Lowercase hex SHA-256 of a token's text: what ``License.token_sha256`` stores."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Sku(models.Model):
    code = models.CharField(primary_key=True, max_length=64, verbose_name="SKU")
    name = models.CharField(max_length=200)
    modules = models.JSONField(default=list, help_text='Modules switched on, e.g. ["detect"].')
    max_streams = models.PositiveIntegerField()
    max_fps = models.PositiveIntegerField()
    api_calls = models.PositiveBigIntegerField(help_text="Device quota; 0 = unmetered.")
    term_days = models.PositiveIntegerField(help_text="Default term; 0 = perpetual.")
    grace_days = models.PositiveIntegerField()
    allowance_per_unit = models.PositiveBigIntegerField(
        help_text="Inferences per active unit per 30 days, pooled per customer and SKU."
    )
    currency = models.CharField(max_length=3)
    unit_price_tiers = models.JSONField(
        default=list, help_text='[{"from_units": 1, "unit_price": "90"}, ...]'
    )
    overage_tiers = models.JSONField(
        default=list, help_text='[{"from_inferences": 0, "price_per_1000": "0.50"}, ...]'
    )
    maintenance_rate = models.DecimalField(max_digits=6, decimal_places=4, default=Decimal("0"))
    max_offline_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        verbose_name="max offline days",
        help_text="Check-in lease: days a camera may run analytics without a sync (empty: "
        "no lease). The default of the SKU's batches and licences.",
    )
    identity_policy = models.CharField(
        max_length=40,
        blank=True,
        default="",
        db_default="",
        verbose_name="identity policy",
        help_text="How a unit's identity components must match (issue 45): all, most, "
        "most:N or one:NAME (empty: most:2).",
    )
    trial_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        verbose_name="trial days",
        help_text="Trial SKU: its batches are trials by default, each camera's licence "
        "running this many days from its first activation, unbilled until converted "
        "(empty: batches are sold, not trialled, unless issued with trial days).",
    )

    class Meta:
        ordering = ["code"]
        verbose_name = "catalogue entry"
        verbose_name_plural = "catalogue"

    def __str__(self) -> str:
        return self.code

    @property
    def is_perpetual(self) -> bool:
        return self.term_days == 0

    def entry(self) -> dict[str, Any]:
        """The contract §5 entry, prices as Decimal."""
        return catalogue.normalise_entry(
            {
                name: getattr(self, name)
                for name in (*catalogue.ENTRY_FIELDS, *catalogue.OPTIONAL_FIELDS)
                if name != "sku"
            }
            | {"sku": self.code}
        )

    def unit_price_for(self, units: int) -> Decimal:
        return catalogue.unit_price(self.entry()["unit_price_tiers"], units)

    def clean(self) -> None:
        try:
            entry = self.entry()
            catalogue.unit_price(entry["unit_price_tiers"], 1)
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise ValidationError(f"invalid catalogue entry: {exc}") from exc
        unknown = [m for m in self.modules if not isinstance(m, str)]
        if unknown:
            raise ValidationError("modules must be a list of module names")


# A batch is near exhaustion once this share of its units is activated (exhausted ones
# included): the console's red progress bar, its batch filter and the dashboard list.
# Integer maths, so the database and Python agree exactly.
NEAR_EXHAUSTION_PERCENT = 90


def is_near_exhaustion(*, activated: int, purchased: int) -> bool:
    return purchased > 0 and activated * 100 >= purchased * NEAR_EXHAUSTION_PERCENT


def near_exhaustion_condition() -> GreaterThanOrEqual:
    """:func:`is_near_exhaustion` as a condition on Batch rows, for ``.filter()``."""
    return GreaterThanOrEqual(
        F("units_activated") * 100, F("units_purchased") * NEAR_EXHAUSTION_PERCENT
    )


class Batch(models.Model):
    id = models.CharField(primary_key=True, max_length=64, verbose_name="batch id")
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="batches"
    )
    # The SKU code as text, not a foreign key: a batch outlives catalogue edits, and an
    # activation against a SKU that has gone missing must answer 500, not crash.
    sku = models.CharField(max_length=64, db_index=True, verbose_name="SKU")
    units_purchased = models.PositiveIntegerField()
    units_activated = models.PositiveIntegerField(default=0)
    released_seats = models.PositiveIntegerField(
        default=0,
        help_text="Seats released by an operator (dead or replaced cameras) and not yet "
        "taken again: the next activations on them are transfers, not billed again. "
        "Always at most the units remaining (licensing.services.seats keeps it so at every "
        "commit).",
    )
    unit_price = models.DecimalField(max_digits=14, decimal_places=4)
    currency = models.CharField(max_length=3)
    issued_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty = perpetual.")
    license = models.OneToOneField(
        "licensing.License",
        on_delete=models.PROTECT,
        related_name="batch_key_of",
        verbose_name="batch key licence",
    )
    max_offline_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        verbose_name="max offline days",
        help_text="Check-in lease of the batch's units, overriding the SKU's (empty: the SKU's).",
    )
    addons_version = models.PositiveIntegerField(
        default=0,
        db_default=0,
        verbose_name="add-ons version",
        help_text="Moves with every add-on added to or removed from the batch (issue 42): a "
        "unit whose licence carries an older one is re-signed when its device next asks.",
    )
    trial_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        verbose_name="trial days",
        help_text="A trial batch (licensing.trials): each camera's licence runs this many days "
        "from its first activation and its activation is not billed. Emptied when the batch "
        "is converted to paid (its TrialConversion keeps the days); empty: a paid batch.",
    )
    identity_policy = models.CharField(
        max_length=40,
        blank=True,
        default="",
        db_default="",
        verbose_name="identity policy",
        help_text="How its units' identity components must match, overriding the SKU's "
        "(empty: the SKU's).",
    )

    class Meta:
        ordering = ["-issued_at"]
        verbose_name_plural = "batches"
        constraints = [
            models.CheckConstraint(
                condition=Q(units_activated__lte=F("units_purchased")),
                name="batch_activated_within_purchased",
            ),
            models.CheckConstraint(
                condition=Q(units_purchased__gte=1), name="batch_purchases_at_least_one_unit"
            ),
        ]
        # What is about to end (licensing.selectors.expiring_list).
        indexes = [
            models.Index(
                fields=["expires_at"],
                name="batch_expires",
                condition=Q(expires_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def units_remaining(self) -> int:
        return self.units_purchased - self.units_activated

    @property
    def is_trial(self) -> bool:
        """A trial not converted yet (licensing.trials)."""
        return self.trial_days is not None


class License(models.Model):
    class Kind(models.TextChoices):
        BATCH_KEY = "batch_key", "Batch key"
        UNIT = "unit", "Unit (activated from a batch)"
        DIRECT = "direct", "Direct licence"
        OFFLINE = "offline", "Offline-minted licence"

    class Activation(models.TextChoices):
        REQUIRED = "required", "required"
        OPTIONAL = "optional", "optional"

    id = models.CharField(primary_key=True, max_length=64, verbose_name="licence id")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # Indexed by license_customer_recent (customer first), not by an index of its own.
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="licenses", db_index=False
    )
    sku = models.CharField(max_length=64, verbose_name="SKU")
    device_id = models.CharField(max_length=128, help_text="Bound fingerprint, or * (unbound).")
    activation = models.CharField(max_length=8, choices=Activation.choices)
    batch = models.ForeignKey(
        Batch,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="unit_licenses",
        help_text="Source batch of a unit licence.",
    )
    issued_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty = perpetual.")
    grace_days = models.PositiveIntegerField(default=0)
    unit_price = models.DecimalField(max_digits=14, decimal_places=4, null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    claims = models.JSONField()
    token = models.TextField()
    # A presented token counts only when it is byte for byte the one issued: a validly
    # signed variant (other claims, same licence id) is a sign of a leaked signing key.
    token_sha256 = models.CharField(
        max_length=64, verbose_name="token SHA-256", help_text="Hex SHA-256 of the token."
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoke_reason = models.CharField(max_length=500, blank=True)
    max_offline_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        verbose_name="max offline days",
        help_text="Check-in lease of this licence, overriding its batch's and SKU's "
        "(empty: theirs).",
    )
    checked_in_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its device last received a signed status (activation or sync): "
        "its lease runs from here.",
    )
    addons_version = models.PositiveIntegerField(
        default=0,
        db_default=0,
        verbose_name="add-ons version",
        help_text="A unit licence: its batch's add-ons version that its token carries.",
    )
    sold_claims = models.JSONField(
        null=True,
        blank=True,
        help_text="A direct licence with add-ons: its entitlements and caps as sold ({ent, "
        "lim}), before any add-on (empty: its claims are as sold).",
    )
    trial = models.BooleanField(
        default=False,
        db_default=False,
        help_text="The token on file is a trial licence (claim trial: true): a unit of a "
        "trial batch, its term running from its activation. Cleared when its batch is "
        "converted and the unit re-signed as paid.",
    )

    class Meta:
        ordering = ["-issued_at"]
        verbose_name = "licence"
        indexes = [
            models.Index(fields=["customer", "sku", "kind"], name="license_customer_sku_kind"),
            models.Index(
                fields=["revoked_at"],
                name="license_revoked",
                condition=Q(revoked_at__isnull=False),
            ),
            # What the console lists at fleet scale (issue 15): every list in its order
            # (newest first, then id), whole or narrowed by customer, SKU or a kind other
            # than unit (a small partial index: units are nearly all of the table). Device
            # ids by prefix: license_device_prefix, in the "C" collation (migration 0006).
            models.Index(fields=["-issued_at", "-id"], name="license_recent_first"),
            models.Index(fields=["customer", "-issued_at", "-id"], name="license_customer_recent"),
            models.Index(fields=["sku", "-issued_at", "-id"], name="license_sku_recent"),
            models.Index(
                fields=["-issued_at", "-id"],
                name="license_not_unit_recent",
                condition=~Q(kind="unit"),
            ),
            # Rating: a customer's direct licences by issue time, and its revoked licences
            # by revocation time (both small: the customer's units are not in them).
            models.Index(
                fields=["customer", "issued_at"],
                name="license_direct_issued",
                condition=Q(kind="direct"),
            ),
            models.Index(
                fields=["customer", "revoked_at"],
                include=["kind", "sku", "device_id"],
                name="license_customer_revoked",
                condition=Q(revoked_at__isnull=False),
            ),
            # Direct licences about to end (licensing.selectors.expiring_list).
            models.Index(
                fields=["expires_at"],
                name="license_direct_expires",
                condition=Q(kind="direct", expires_at__isnull=False),
            ),
            # Leases ending (licensing.leases.lease_ends_before: the scan's lease events,
            # the dashboard's units past their lease): only licences under a lease have a
            # check-in, and revoked ones are never asked for.
            models.Index(
                fields=["checked_in_at"],
                name="license_checked_in",
                condition=Q(checked_in_at__isnull=False, revoked_at__isnull=True),
            ),
            # The few licences with a lease of their own (leases.lease_day_values, read by
            # the dashboard): found without reading the others.
            models.Index(
                fields=["max_offline_days"],
                name="license_own_lease",
                condition=Q(max_offline_days__isnull=False),
            ),
            # Units on trial about to end (licensing.scan.trials_scan).
            models.Index(
                fields=["expires_at"], name="license_trial_expires", condition=Q(trial=True)
            ),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class Activation(models.Model):
    # Indexed by activation_batch_recent (batch first), not by an index of its own.
    batch = models.ForeignKey(
        Batch, on_delete=models.PROTECT, related_name="activations", db_index=False
    )
    device_id = models.CharField(max_length=128)
    license = models.OneToOneField(
        License, on_delete=models.PROTECT, related_name="activation_record"
    )
    fingerprint_source = models.CharField(max_length=32, blank=True)
    weak_binding = models.BooleanField(default=False)
    sdk_version = models.CharField(max_length=64, blank=True)
    activated_at = models.DateTimeField(default=clock.now)
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    transfer_of = models.OneToOneField(
        "licensing.SeatRelease",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="replacement",
        help_text="The seat release whose seat this activation took: a transfer from a dead "
        "or replaced camera, not billed again.",
    )
    # When the unit last fetched its signed status, uploaded usage or activated again
    # (issue 42): written at most once per SVC_LAST_SEEN_MINUTES, after the request's own
    # work (licensing.services.seen). Empty: not seen since the column was added.
    last_seen_at = models.DateTimeField(
        "last seen",
        null=True,
        blank=True,
        help_text="Last status fetch, usage upload or activation (to within "
        "SVC_LAST_SEEN_MINUTES); empty: never seen since this was recorded.",
    )
    trial = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Activated from a trial batch: never billed as an activation (its batch's "
        "conversion bills the trial units in service, once). Written once, like the rest "
        "of what billing reads.",
    )
    # The identity components the unit is bound to (issue 45; licensing.identity):
    # {name: SHA-256 hex}, and the hash of that set, which the activation's one lookup
    # reads to tell an unchanged set from a changed one at no extra query.
    components = models.JSONField(null=True, blank=True)  # NULL: none reported
    components_sha256 = models.CharField(
        max_length=64, blank=True, default="", db_default="", verbose_name="components SHA-256"
    )
    # Where the unit's component set was last seen from (bit-for-bit clones, issue 45):
    # NULL means the activation's own client_ip since activated_at. Written only when
    # the address changes, never by a sync from the unchanged address (licensing.identity).
    last_ip = models.GenericIPAddressField(
        "last address",
        null=True,
        blank=True,
        help_text="Address the unit last reported its components from (empty: the "
        "activation's address).",
    )
    last_ip_since = models.DateTimeField("at that address since", null=True, blank=True)
    previous_ip = models.GenericIPAddressField("address before", null=True, blank=True)

    class Meta:
        ordering = ["-activated_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "device_id"], name="activation_once_per_batch")
        ]
        indexes = [
            models.Index(fields=["-activated_at", "-id"], name="activation_recent_first"),
            # A batch's fleet newest first, and the activations of a batch in part of a
            # day (rating's window edges: transfer_of included, so counting billable ones
            # reads the index alone).
            models.Index(
                fields=["batch", "-activated_at", "-id"],
                include=["transfer_of"],
                name="activation_batch_recent",
            ),
            # The console's filters at fleet scale (issue 15); its search by device-id
            # prefix has activation_device_prefix, in the "C" collation (migration 0006).
            models.Index(
                fields=["-activated_at", "-id"],
                name="activation_weak_recent",
                condition=Q(weak_binding=True),
            ),
            models.Index(
                fields=["fingerprint_source", "-activated_at", "-id"],
                name="activation_source_recent",
            ),
            # Units not seen since a moment (the silent count and filter, issue 42).
            models.Index(fields=["last_seen_at"], name="activation_last_seen"),
        ]

    def __str__(self) -> str:
        return f"{self.device_id} on {self.batch_id}"


class ActivationDaily(models.Model):
    """New activations of one batch on one UTC day (of ``activated_at``): billable ones,
    transfers (onto a released seat, never billed) and trials (licensing.trials: billed
    by their batch's conversion, not as activations) apart.

    Kept by database triggers on ``licensing_activation`` (migration 0006), in the
    statement that inserts, moves or deletes an activation and so in its transaction:
    a rollup row never disagrees with the activations committed with it, whoever
    writes them (the activation hot path, a bulk load, a test back-dating rows), and the
    hot path stays at its four statements. Rating and the dashboard sum these rows
    instead of counting activations (``billing.selectors``), like ``UsageDaily`` for
    usage."""

    # Indexed by activation_daily_once (batch first), not by an index of its own.
    batch = models.ForeignKey(
        Batch, on_delete=models.PROTECT, related_name="activation_days", db_index=False
    )
    day = models.DateField(help_text="UTC day of the activations' activated_at.")
    activations = models.BigIntegerField(
        default=0, help_text="Billable: not transfers, not trials."
    )
    transfers = models.BigIntegerField(default=0, help_text="Onto released seats: not billed.")
    trials = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text="From trial batches: not billed as activations (a conversion bills them).",
    )

    class Meta:
        verbose_name = "daily activations"
        verbose_name_plural = "daily activations"
        ordering = ["-day", "batch"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "day"], name="activation_daily_once"),
        ]
        indexes = [models.Index(fields=["day"], name="activation_daily_day")]

    def __str__(self) -> str:
        return f"{self.batch_id} {self.day}"


class SeatRelease(models.Model):
    """A seat an operator gave back to its batch: the unit licence of a dead or replaced
    camera, revoked, its seat free again. The activation that takes the seat next points
    here (``Activation.transfer_of``) and is a transfer, not a new billable unit."""

    batch = models.ForeignKey(Batch, on_delete=models.PROTECT, related_name="seat_releases")
    license = models.OneToOneField(
        License,
        on_delete=models.PROTECT,
        related_name="seat_release",
        verbose_name="released licence",
    )
    device_id = models.CharField(max_length=128)
    released_at = models.DateTimeField(default=clock.now)
    reason = models.CharField(max_length=500)

    class Meta:
        ordering = ["-released_at", "-id"]
        indexes = [models.Index(fields=["batch", "released_at"], name="seat_release_batch_time")]

    def __str__(self) -> str:
        return f"seat of {self.device_id} on {self.batch_id}"


class Renewal(models.Model):
    """One renewal of a batch or of a direct licence for another term
    (``licensing.services.renewals``): the new end, and what it is billed, once
    (``billing.ledger``): ``units`` x ``unit_price``, the units activated on the batch
    and not revoked when it was renewed (1 for a direct licence) at the price the batch
    or licence recorded when it was sold. Written once: on PostgreSQL a trigger refuses
    UPDATE and DELETE (billing migration 0009)."""

    class Basis(models.TextChoices):
        BEFORE_EXPIRY = "before_expiry", "before expiry: from the old end"
        IN_GRACE = "in_grace", "in the grace period: from the old end"
        AFTER_GRACE = "after_grace", "after the grace period: from the renewal"

    idempotency_key = models.CharField(
        max_length=200, help_text="The request's key: a retry answers this renewal."
    )
    request_digest = models.CharField(
        max_length=64,
        help_text="SHA-256 of what was asked (target and term): the same key "
        "with another request is refused.",
    )
    # Indexed by renewal_customer_time (customer first), not by an index of its own.
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="renewals", db_index=False
    )
    sku = models.CharField(max_length=64, verbose_name="SKU")
    batch = models.ForeignKey(
        Batch, on_delete=models.PROTECT, null=True, blank=True, related_name="renewals"
    )
    license = models.ForeignKey(
        License,
        on_delete=models.PROTECT,
        related_name="renewals",
        verbose_name="licence",
        help_text="The batch key of a renewed batch, or the renewed direct licence.",
    )
    term_days = models.PositiveIntegerField()
    basis = models.CharField(max_length=16, choices=Basis.choices)
    previous_expires_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    renewed_at = models.DateTimeField()
    units = models.PositiveIntegerField(
        help_text="Billed quantity: units activated on the batch and not revoked when "
        "renewed (1 for a direct licence)."
    )
    unit_price = models.DecimalField(max_digits=14, decimal_places=4)
    currency = models.CharField(max_length=3)

    class Meta:
        ordering = ["-renewed_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["idempotency_key"], name="renewal_once_per_key"),
            models.CheckConstraint(
                condition=Q(expires_at__gt=F("previous_expires_at")),
                name="renewal_extends",
            ),
        ]
        indexes = [
            models.Index(fields=["customer", "renewed_at"], name="renewal_customer_time"),
        ]

    def __str__(self) -> str:
        return f"renewal of {self.batch_id or self.license_id} to {dates.day(self.expires_at)}"


class SupersededToken(models.Model):
    """A token the authority issued for a licence and later replaced by a re-signed one
    (a renewal's new ``exp``). It still counts as issued (``licensing.exact_tokens``
    consults this table only when a presented token is not the current one), so a device
    that has not fetched its renewed token yet keeps uploading usage and re-activating."""

    license = models.ForeignKey(
        License, on_delete=models.PROTECT, related_name="superseded_tokens", db_index=False
    )
    token_sha256 = models.CharField(max_length=64, verbose_name="token SHA-256")
    superseded_at = models.DateTimeField()

    class Meta:
        verbose_name = "superseded token"
        constraints = [
            models.UniqueConstraint(
                fields=["license", "token_sha256"], name="superseded_token_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.license_id} {self.token_sha256[:12]}"


def new_list_epoch() -> str:
    return secrets.token_hex(8)


class Revocation(models.Model):
    """One entry of the revocation list, numbered by the list's one sequence.

    ``license_id`` is the licence id as text, deliberately not a foreign key: the list is
    a narrow append-only log that devices page through by ``seq`` (the primary key serves
    ``WHERE seq > N ORDER BY seq LIMIT ...``), and a benchmark can fill a million rows
    with ``generate_series`` without a million licences behind them.
    """

    seq = models.BigIntegerField(primary_key=True, verbose_name="sequence number")
    license_id = models.CharField(max_length=64, verbose_name="licence id")
    revoked_at = models.DateTimeField()
    usable_until = models.BigIntegerField(
        help_text="Unix seconds of expiry + grace, after which the licence cannot run anyway "
        "and drops off the list; 0 = perpetual, never drops off."
    )

    class Meta:
        ordering = ["seq"]
        constraints = [
            # A constraint rather than unique=True: no second (LIKE) index on PostgreSQL
            # for a column only ever looked up by equality.
            models.UniqueConstraint(fields=["license_id"], name="revocation_once_per_licence"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="revocation_seq_positive"),
            models.CheckConstraint(
                condition=Q(usable_until__gte=0), name="revocation_usable_until_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.seq}: {self.license_id}"


class RevocationHead(models.Model):
    """The one row holding the revocation list's last sequence number.

    Revoking bumps ``seq`` with one UPDATE whose row lock is held until that transaction
    commits, so numbers become visible strictly in order. ``epoch`` is fresh whenever the
    row is created (a new or flushed database): cached pages of another list that reused
    the same numbers are never served. ``keys_version`` moves with every change to the
    signing keys, so answers carrying key certificates are rebuilt (read in the same
    single-row query as ``seq``).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.BigIntegerField(default=0)
    epoch = models.CharField(max_length=16, default=new_list_epoch)
    keys_version = models.BigIntegerField(
        default=0,
        help_text="Bumped by every signing-key install, retirement or revocation: the key "
        "certificates in list answers change with it.",
    )

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="revocation_head_singleton"),
        ]

    def __str__(self) -> str:
        return f"revocation list at {self.seq}"


class StatusDocument(models.Model):
    """The signed status (SVCS1) of one licence for one device, made once and served
    until its window ends or what it says changes (issue 46, :mod:`licensing.status_store`).

    ``basis`` names every input the document was made from besides the time (the signing
    key, the list's epoch and keys version, the licence's revocation, lease days and
    hold): a request whose inputs read differently re-signs it, so no writer has to
    remember to invalidate it. ``etag`` is the hash of ``document``
    (:func:`devices.documents.status_etag`)."""

    license_id = models.CharField(max_length=64, verbose_name="licence id")
    device_id = models.CharField(max_length=128)
    basis = models.CharField(max_length=200)
    document = models.TextField()
    etag = models.CharField(max_length=72)
    seq = models.BigIntegerField()
    issued_at = models.BigIntegerField(help_text="Unix seconds it was signed.")
    valid_until = models.BigIntegerField(help_text="Unix seconds its window ends.")
    revoked_at = models.BigIntegerField(default=0)
    lease_end = models.BigIntegerField(default=0)
    suspended = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["license_id", "device_id"], name="status_document_per_unit"
            ),
        ]

    def __str__(self) -> str:
        return f"status of {self.license_id} for {self.device_id}"


class Suspension(models.Model):
    """An operator's reversible hold (issue 42): a licence, a batch key (all its units)
    or a customer (all its licences). A row exists while the hold lasts; reinstating
    deletes it (the audit log and the events keep the history). A unit is suspended
    while any hold names it, its batch or its customer."""

    class Kind(models.TextChoices):
        LICENSE = "license", "licence"
        BATCH = "batch", "batch"
        CUSTOMER = "customer", "customer"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    target = models.CharField(max_length=64, help_text="The licence, batch or customer id.")
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="suspensions"
    )
    reason = models.CharField(max_length=500)
    suspended_at = models.DateTimeField(default=clock.now)

    class Meta:
        ordering = ["-suspended_at"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "target"], name="suspension_one_per_target")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.target}"


class AddOn(models.Model):
    """A module or a raised cap sold for a SKU's batches and licences after the sale
    (issue 42 item 4): the catalogue's add-on, priced per unit per term of its SKU (per
    unit, once, for a perpetual SKU) in the SKU's currency. What a grant sold is copied
    onto it (:class:`AddOnGrant`): editing an add-on changes later sales only."""

    # Goes with its SKU (an add-on of no SKU sells nothing); one that was sold is kept
    # by its grants (PROTECT), and so is its SKU.
    sku = models.ForeignKey(
        Sku, on_delete=models.CASCADE, related_name="addons", verbose_name="SKU", db_index=False
    )
    code = models.CharField(
        max_length=32,
        help_text='Short name, unique for the SKU, e.g. "anpr" (lower case letters, digits, '
        "- and _).",
    )
    name = models.CharField(max_length=200)
    modules = models.JSONField(
        default=list, blank=True, help_text='Modules it switches on, e.g. ["anpr"].'
    )
    extra_streams = models.PositiveIntegerField(
        default=0, help_text="Added to lim.max_streams of each unit (0: none)."
    )
    extra_fps = models.PositiveIntegerField(
        default=0, help_text="Added to lim.max_fps of each unit (0: none)."
    )
    extra_api_calls = models.PositiveBigIntegerField(
        default=0,
        verbose_name="extra API calls",
        help_text="Added to lim.api_calls of each unit (0: none; an unmetered unit stays "
        "unmetered).",
    )
    unit_price = models.DecimalField(
        max_digits=14,
        decimal_places=4,
        help_text="Per unit for one term of the SKU (term_days), billed pro rata for the rest "
        "of the term; per unit, once, for a perpetual SKU. In the SKU's currency.",
    )
    available = models.BooleanField(
        default=True, help_text="Offered for sale; grants already made are unaffected."
    )

    class Meta:
        ordering = ["sku", "code"]
        verbose_name = "add-on"
        constraints = [
            models.UniqueConstraint(fields=["sku", "code"], name="addon_code_per_sku"),
            models.CheckConstraint(condition=Q(unit_price__gt=0), name="addon_priced"),
        ]

    def __str__(self) -> str:
        return f"{self.sku_id} {self.code}"

    def clean(self) -> None:
        problem = addons.addon_problem(
            code=self.code,
            modules=self.modules,
            extra_streams=self.extra_streams,
            extra_fps=self.extra_fps,
            extra_api_calls=self.extra_api_calls,
        )
        if problem:
            raise ValidationError(problem)


class AddOnGrant(models.Model):
    """An add-on sold for a batch (every unit of it, activated now or later) or for a
    direct licence, from ``added_at`` until removed (issue 42 item 4). The terms sold are
    copied from the catalogue: modules, caps, unit price, currency and the term the price
    is for. Billing reads them (``billing.ledger``); on PostgreSQL a trigger refuses to
    change them (billing migration 0015), and a grant is never deleted: removal sets
    ``removed_at``."""

    addon = models.ForeignKey(
        AddOn, on_delete=models.PROTECT, related_name="grants", verbose_name="add-on"
    )
    code = models.CharField(max_length=32, help_text="The add-on's code when sold.")
    name = models.CharField(max_length=200, help_text="The add-on's name when sold.")
    # Indexed by addon_grant_customer (customer first), not by an index of its own.
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="addon_grants", db_index=False
    )
    sku = models.CharField(max_length=64, verbose_name="SKU")
    batch = models.ForeignKey(
        Batch, on_delete=models.PROTECT, null=True, blank=True, related_name="addon_grants"
    )
    license = models.ForeignKey(
        License,
        on_delete=models.PROTECT,
        related_name="addon_grants",
        verbose_name="licence",
        help_text="The batch key of a batch's add-on, or the direct licence.",
    )
    modules = models.JSONField(default=list, blank=True)
    extra_streams = models.PositiveIntegerField(default=0)
    extra_fps = models.PositiveIntegerField(default=0)
    extra_api_calls = models.PositiveBigIntegerField(default=0, verbose_name="extra API calls")
    unit_price = models.DecimalField(max_digits=14, decimal_places=4)
    currency = models.CharField(max_length=3)
    term_days = models.PositiveIntegerField(
        help_text="The term the unit price is for (the SKU's when sold); 0: perpetual, the "
        "price is per unit, once."
    )
    added_at = models.DateTimeField()
    removed_at = models.DateTimeField(null=True, blank=True)
    remove_reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-added_at", "-id"]
        verbose_name = "add-on grant"
        constraints = [
            models.UniqueConstraint(
                fields=["license", "code"],
                condition=Q(removed_at__isnull=True),
                name="addon_grant_active_once",
            ),
            models.CheckConstraint(
                condition=Q(removed_at__isnull=True) | Q(removed_at__gte=F("added_at")),
                name="addon_grant_removed_after_added",
            ),
        ]
        indexes = [
            models.Index(fields=["customer", "-added_at"], name="addon_grant_customer"),
        ]

    def __str__(self) -> str:
        return f"{self.code} on {self.batch_id or self.license_id}"

    @property
    def active(self) -> bool:
        return self.removed_at is None


class AddOnCharge(models.Model):
    """What one licence is billed for an add-on it carries (issue 42 item 4): written in
    the transaction that signs a token carrying the add-on for time not yet paid for
    (the add-on's sale to a direct licence, a unit's activation or its re-signing at the
    sync after the add-on was added or its batch renewed), from ``starts_at`` to
    ``ends_at`` (the token's end). ``quantity``: days of that time (pro rata of the
    grant's ``term_days``), or 1 for a perpetual add-on. Billed once, as itself, by its id
    (``billing.ledger``); written once: on PostgreSQL a trigger refuses UPDATE and DELETE
    (billing migration 0015)."""

    grant = models.ForeignKey(AddOnGrant, on_delete=models.PROTECT, related_name="charges")
    # Indexed by addon_charge_customer (customer first), not by an index of its own.
    customer = models.ForeignKey(
        "customers.Customer", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    sku = models.CharField(max_length=64, verbose_name="SKU")
    batch = models.ForeignKey(
        Batch, on_delete=models.PROTECT, null=True, blank=True, related_name="+", db_index=False
    )
    license = models.ForeignKey(
        License,
        on_delete=models.PROTECT,
        related_name="addon_charges",
        verbose_name="licence",
        help_text="The unit or direct licence that carries the add-on.",
    )
    charged_at = models.DateTimeField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True, help_text="Empty: perpetual.")
    quantity = models.PositiveIntegerField(
        help_text="Days from starts_at to ends_at, a started day counted whole; 1 for a "
        "perpetual add-on."
    )
    unit_price = models.DecimalField(max_digits=14, decimal_places=4)
    currency = models.CharField(max_length=3)

    class Meta:
        ordering = ["-charged_at", "-id"]
        verbose_name = "add-on charge"
        constraints = [
            models.UniqueConstraint(
                fields=["license", "grant", "starts_at"], name="addon_charge_once"
            ),
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=F("starts_at")),
                name="addon_charge_covers_time",
            ),
        ]
        indexes = [
            models.Index(fields=["customer", "charged_at"], name="addon_charge_customer"),
        ]

    def __str__(self) -> str:
        return f"{self.grant_id} on {self.license_id} from {dates.day(self.starts_at)}"


class OfflineExchange(models.Model):
    """One file exchange of an air-gapped unit (issue 44): an activation request
    answered, or a usage export answered with a receipt. The same file read again is
    the same exchange (one row per licence, kind and the file's nonce): its date is
    the unit's last file exchange in the portal and the console."""

    class Kind(models.TextChoices):
        ACTIVATION = "activation", "activation"
        USAGE = "usage", "usage"

    license = models.ForeignKey(License, on_delete=models.PROTECT, related_name="+")
    customer = models.ForeignKey("customers.Customer", on_delete=models.PROTECT, related_name="+")
    device_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    nonce = models.CharField(max_length=64)
    channel = models.CharField(
        max_length=16, help_text="Where the file was read: api, customer-api, portal, console."
    )
    actor = models.CharField(max_length=150, blank=True)
    exchanged_at = models.DateTimeField(default=clock.now)
    seat_taken = models.BooleanField(
        default=False,
        help_text="The request took the seat (a new licence): read again, its answer "
        "still says so, and the camera starts its usage total at zero.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["license", "kind", "nonce"], name="offline_exchange_once"
            )
        ]
        indexes = [
            models.Index(fields=["customer", "-exchanged_at"], name="offline_exchange_recent"),
            models.Index(fields=["license", "-exchanged_at"], name="offline_exchange_unit"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} file of {self.device_id}"


class TrialUse(models.Model):
    """A device's trial of a SKU (licensing.trials): one per (SKU, device fingerprint),
    ever, written with the trial activation. A second trial activation of the same SKU
    by the same device, on any batch, is refused (409, code ``TRIAL_USED``); the unique
    constraint is the last line of defence under concurrency."""

    sku = models.CharField(max_length=64, verbose_name="SKU")
    device_id = models.CharField(max_length=128)
    batch = models.ForeignKey(Batch, on_delete=models.PROTECT, related_name="trial_uses")
    license = models.OneToOneField(
        License, on_delete=models.PROTECT, related_name="trial_use", verbose_name="licence"
    )
    used_at = models.DateTimeField(default=clock.now)

    class Meta:
        ordering = ["-used_at", "-id"]
        verbose_name = "trial use"
        constraints = [
            models.UniqueConstraint(fields=["sku", "device_id"], name="trial_once_per_device"),
        ]

    def __str__(self) -> str:
        return f"{self.sku} trial of {self.device_id}"


class TrialConversion(models.Model):
    """A trial batch converted to paid (licensing.services.trials): once per batch. Its
    trial units in service (activated and not revoked at conversion) became paid
    licences for ``term_days`` from ``converted_at`` (perpetual: ``expires_at`` empty),
    and are billed once (``billing.ledger``): ``units`` x ``unit_price``, the price the
    batch recorded when it was issued. Written once: on PostgreSQL a trigger refuses
    UPDATE and DELETE (billing migration 0014)."""

    batch = models.OneToOneField(Batch, on_delete=models.PROTECT, related_name="trial_conversion")
    # Indexed by trial_conversion_customer_time (customer first), not by an index of its own.
    customer = models.ForeignKey(
        "customers.Customer",
        on_delete=models.PROTECT,
        related_name="trial_conversions",
        db_index=False,
    )
    sku = models.CharField(max_length=64, verbose_name="SKU")
    license = models.ForeignKey(
        License,
        on_delete=models.PROTECT,
        related_name="trial_conversions",
        verbose_name="batch key licence",
    )
    trial_days = models.PositiveIntegerField(help_text="The batch's trial, as it ran.")
    term_days = models.PositiveIntegerField(
        help_text="The paid term from conversion; 0: perpetual."
    )
    previous_expires_at = models.DateTimeField(
        null=True, blank=True, help_text="The batch's end before (empty: perpetual)."
    )
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="The batch's and its units' end (empty: perpetual)."
    )
    converted_at = models.DateTimeField()
    units = models.PositiveIntegerField(
        help_text="Billed quantity: trial units activated and not revoked when converted."
    )
    unit_price = models.DecimalField(max_digits=14, decimal_places=4)
    currency = models.CharField(max_length=3)

    class Meta:
        ordering = ["-converted_at", "-id"]
        verbose_name = "trial conversion"
        indexes = [
            models.Index(
                fields=["customer", "converted_at"], name="trial_conversion_customer_time"
            ),
        ]

    def __str__(self) -> str:
        return f"conversion of {self.batch_id}"

    @property
    def amount(self) -> Decimal:
        return self.units * self.unit_price


# The identity binding's rows (issue 45) live in their own module, models of this app.
from licensing.identity_models import CloneSuspicion, Rebinding, UnitComponent  # noqa: E402, F401
