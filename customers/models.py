from __future__ import annotations

from django.db import models
from django.db.models.functions import Lower, Trim

from config import clock


class Customer(models.Model):
    class Kind(models.TextChoices):
        OEM = "oem", "OEM"
        END_USER = "end_user", "End user"

    id = models.CharField(primary_key=True, max_length=64, verbose_name="customer id")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    contact = models.CharField(max_length=254, blank=True)
    # The buyer block of its invoices and credit notes (billing.documents).
    billing_address = models.TextField(
        max_length=500, blank=True, help_text="Postal address printed on invoices."
    )
    tax_id = models.CharField(
        max_length=64, blank=True, verbose_name="tax id", help_text="VAT or tax number."
    )
    # VAT (issue 43, billing.vat): where the customer is established, its VAT id (an EU
    # one makes a cross-border supply a reverse charge), and why its supplies are exempt.
    country = models.CharField(
        max_length=2,
        blank=True,
        db_default="",
        default="",
        help_text="ISO 3166 alpha-2 code; empty: the seller's country.",
    )
    vat_id = models.CharField(
        max_length=32,
        blank=True,
        db_default="",
        default="",
        verbose_name="VAT id",
        help_text="EU VAT identification number, check digits verified.",
    )
    tax_exemption = models.CharField(
        max_length=200,
        blank=True,
        db_default="",
        default="",
        help_text="Why the customer's invoices are VAT-exempt (printed on them); empty: "
        "not exempt.",
    )
    created_at = models.DateTimeField(default=clock.now, db_index=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            # One customer per name, ignoring case and surrounding spaces; the service
            # (customers.services.customer_create) refuses first, naming the customer.
            models.UniqueConstraint(Lower(Trim("name")), name="customer_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"
