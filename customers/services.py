from __future__ import annotations

import re

from django.db import IntegrityError, transaction
from django.db.models import Value
from django.db.models.functions import Lower, Trim

from audit.services import audited
from config.errors import Conflict, InvalidInput, NotFound
from customers.models import Customer
from customers.tax_identity import check_country, check_vat_id
from svccore import ids

# An operator-chosen id, trimmed: 1-59 of A-Z, a-z, 0-9, '-' and '_' (upper-cased when
# stored), with or without the CUST- prefix in any case, but not the prefix alone. A
# pattern, not a loop, so that the OpenAPI schema states the very rule
# (customers.serializers); written without look-ahead, which not every engine reads.
_C = "[A-Za-z0-9_-]"
_NOT_PREFIX = (  # the five-character strings that are not "cust-" in any case
    "[A-BD-Za-bd-z0-9_-]" + _C * 4,
    "[Cc][A-TV-Za-tv-z0-9_-]" + _C * 3,
    "[Cc][Uu][A-RT-Za-rt-z0-9_-]" + _C * 2,
    "[Cc][Uu][Ss][A-SU-Za-su-z0-9_-]" + _C,
    "[Cc][Uu][Ss][Tt][A-Za-z0-9_]",
)
CHOSEN_ID = re.compile(
    f"(?:[Cc][Uu][Ss][Tt]-{_C}{{1,59}}|{_C}{{1,4}}|{_C}{{6,59}}|{'|'.join(_NOT_PREFIX)})"
)


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
def customer_create(
    *,
    name: str,
    kind: str,
    contact: str = "",
    id: str | None = None,
    billing_address: str = "",
    tax_id: str = "",
    country: str = "",
    vat_id: str = "",
    tax_exemption: str = "",
) -> Customer:
    """Create a customer; an operator-chosen ``id`` is stored with the ``CUST-`` prefix.
    The name is trimmed and must not be another customer's (ignoring case): Conflict
    naming that customer."""
    name = name.strip()
    if not name:
        raise InvalidInput("name must not be empty")
    if kind not in Customer.Kind.values:
        raise InvalidInput(f"kind must be one of {', '.join(Customer.Kind.values)}, not {kind!r}")
    if id:
        if not CHOSEN_ID.fullmatch(id.strip()):
            raise InvalidInput(
                "id must be 1-59 characters of A-Z, 0-9, '-' or '_' (after the CUST- prefix)"
            )
        customer_id = ids.chosen_customer_id(id)
    else:
        customer_id = ids.customer_id()
    country = check_country(country)
    vat_id = check_vat_id(vat_id, country=country)
    if Customer.objects.filter(pk=customer_id).exists():
        raise Conflict(f"customer id {customer_id} is already taken")
    if existing := _customer_named(name):
        raise _name_taken(existing)
    try:
        with transaction.atomic():
            return Customer.objects.create(
                id=customer_id,
                name=name,
                kind=kind,
                contact=contact,
                billing_address=_address(billing_address),
                tax_id=tax_id.strip(),
                country=country,
                vat_id=vat_id,
                tax_exemption=" ".join(tax_exemption.split()),
            )
    except IntegrityError:
        # A concurrent create won: the database's unique id or name said which.
        if existing := _customer_named(name):
            raise _name_taken(existing) from None
        raise Conflict(f"customer id {customer_id} is already taken") from None


EDITABLE = (
    "name",
    "contact",
    "billing_address",
    "tax_id",
    "country",
    "vat_id",
    "tax_exemption",
)


def _address(text: str) -> str:
    """An address as typed, its lines trimmed and blank lines dropped (a pasted address
    keeps its line breaks; \\r\\n from a form becomes \\n)."""
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _changes_detail(customer: Customer, arguments: dict) -> dict:
    return {"customer_id": customer.pk, "changes": getattr(customer, "changes", {})}


@audited("customer.update", detail=_changes_detail)
@transaction.atomic
def customer_update(*, customer_id: str, **values: str) -> Customer:
    """Change a customer's name, contact, billing address, tax id, country, VAT id or tax
    exemption (the others keep theirs; a VAT id is checked against the country). The audit
    entry holds each changed field's value before and after (``customer.changes``); a new
    name must not be another customer's."""
    unknown = sorted(set(values) - set(EDITABLE))
    if unknown:
        raise InvalidInput(f"not editable: {', '.join(unknown)} (editable: {', '.join(EDITABLE)})")
    customer = Customer.objects.select_for_update().filter(pk=customer_id).first()
    if customer is None:
        raise NotFound(f"customer {customer_id} does not exist")
    cleaned = {
        name: _address(value) if name == "billing_address" else value.strip()
        for name, value in values.items()
    }
    if "country" in cleaned:
        cleaned["country"] = check_country(cleaned["country"])
    if "country" in cleaned or "vat_id" in cleaned:
        # A VAT id is checked against the country the customer will have.
        cleaned["vat_id"] = check_vat_id(
            cleaned.get("vat_id", customer.vat_id),
            country=cleaned.get("country", customer.country),
        )
    if "tax_exemption" in cleaned:
        cleaned["tax_exemption"] = " ".join(cleaned["tax_exemption"].split())
    if "name" in cleaned:
        if not cleaned["name"]:
            raise InvalidInput("name must not be empty")
        existing = _customer_named(cleaned["name"])
        if existing is not None and existing.pk != customer.pk:
            raise _name_taken(existing)
    changes = {
        name: {"before": getattr(customer, name), "after": value}
        for name, value in cleaned.items()
        if getattr(customer, name) != value
    }
    for name, change in changes.items():
        setattr(customer, name, change["after"])
    if changes:
        try:
            with transaction.atomic():
                customer.save(update_fields=list(changes))
        except IntegrityError:
            existing = _customer_named(cleaned["name"])
            raise _name_taken(existing) if existing else Conflict("name taken") from None
    customer.changes = changes
    return customer
