from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Value
from django.db.models.functions import Lower, Trim

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


def _customer_named(name: str) -> Customer | None:
    """The customer whose name is ``name`` ignoring case and surrounding spaces, as the
    database's unique index on ``lower(trim(name))`` compares them (SQLite lower-cases
    ASCII letters only, PostgreSQL every letter)."""
    return (
        Customer.objects.annotate(name_key=Lower(Trim("name")))
        .filter(name_key=Lower(Trim(Value(name))))
        .first()
    )


def _name_taken(existing: Customer) -> Conflict:
    return Conflict(
        f"customer {existing.id} is already named {existing.name!r} (names are compared "
        f"ignoring case and surrounding spaces): use {existing.id}, or give the new "
        "customer a name that tells the two apart"
    )


@audited("customer.create")
@transaction.atomic
def customer_create(*, name: str, kind: str, contact: str = "", id: str | None = None) -> Customer:
    """Create a customer; an operator-chosen ``id`` is stored with the ``CUST-`` prefix.
    The name is trimmed and must not be another customer's (ignoring case): Conflict
    naming that customer."""
    name = name.strip()
    if not name:
        raise InvalidInput("name must not be empty")
    if kind not in Customer.Kind.values:
        raise InvalidInput(f"kind must be one of {', '.join(Customer.Kind.values)}, not {kind!r}")
    if id:
        chosen = ids.chosen_customer_id(id)
        if len(chosen) > 64 or len(chosen) < 6 or not set(chosen) <= _ID_CHARS:
            raise InvalidInput(
                "id must be 1-59 characters of A-Z, 0-9, '-' or '_' (after the CUST- prefix)"
            )
        customer_id = chosen
    else:
        customer_id = ids.customer_id()
    if Customer.objects.filter(pk=customer_id).exists():
        raise Conflict(f"customer id {customer_id} is already taken")
    if existing := _customer_named(name):
        raise _name_taken(existing)
    try:
        with transaction.atomic():
            return Customer.objects.create(id=customer_id, name=name, kind=kind, contact=contact)
    except IntegrityError:
        # A concurrent create won: the database's unique id or name said which.
        if existing := _customer_named(name):
            raise _name_taken(existing) from None
        raise Conflict(f"customer id {customer_id} is already taken") from None
