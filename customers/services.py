from __future__ import annotations

from django.db import IntegrityError, transaction

from audit.services import audited
from config.errors import Conflict, InvalidInput, NotFound
from customers.models import Customer
from svccore import ids

_ID_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


def customer_get(*, customer_id: str) -> Customer:
    try:
        return Customer.objects.get(pk=customer_id)
    except Customer.DoesNotExist:
        raise NotFound(f"customer {customer_id} does not exist") from None


@audited("customer.create")
@transaction.atomic
def customer_create(*, name: str, kind: str, contact: str = "", id: str | None = None) -> Customer:
    """Create a customer; an operator-chosen ``id`` is stored with the ``CUST-`` prefix."""
    if kind not in Customer.Kind.values:
        raise InvalidInput(f"kind must be one of {', '.join(Customer.Kind.values)}, not {kind!r}")
    if id:
        chosen = id.strip()
        # Checked before upper-casing too: "ß".upper() is "SS", which would pass.
        if not chosen.isascii():
            chosen = "\x00"
        chosen = chosen.upper()
        if not chosen.startswith("CUST-"):
            chosen = f"CUST-{chosen}"
        if len(chosen) > 64 or len(chosen) < 6 or not set(chosen) <= _ID_CHARS:
            raise InvalidInput(
                "id must be 1-59 characters of A-Z, 0-9, '-' or '_' (after the CUST- prefix)"
            )
        customer_id = chosen
    else:
        customer_id = ids.customer_id()
    if Customer.objects.filter(pk=customer_id).exists():
        raise Conflict(f"customer id {customer_id} is already taken")
    try:
        with transaction.atomic():
            return Customer.objects.create(id=customer_id, name=name, kind=kind, contact=contact)
    except IntegrityError:
        raise Conflict(f"customer id {customer_id} is already taken") from None
