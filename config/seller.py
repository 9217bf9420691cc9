"""The seller every invoice and credit note names (issue 43): legal name, postal address,
VAT id, registration, bank account and contact, read from ``SVC_SELLER_*`` by
:mod:`config.settings`.

Production start-up refuses a seller that is incomplete or malformed, naming every
variable at fault at once. A node with no seller at all starts (a device-facing node, a
benchmark, a fresh install before finance has filled it in) and says so in its log and in
``manage.py check --deploy``; it issues, credits and prints no invoice until the seller is
set (:func:`billing.documents.require_seller` names the variables). With ``SVC_DEBUG=1``
an incomplete seller starts too (``make run`` writes an obvious demo seller to
``var/dev.env``, :data:`DEMO`). IBAN, BIC and the VAT id are checked with python-stdnum
(check digits, not only the shape).
"""

from __future__ import annotations

import os
import re

from django.core.exceptions import ImproperlyConfigured
from stdnum import bic, iban
from stdnum.eu import vat

# Variables production requires, and the ones that may stay empty.
REQUIRED = (
    "SVC_SELLER_NAME",
    "SVC_SELLER_ADDRESS",
    "SVC_SELLER_POSTCODE",
    "SVC_SELLER_CITY",
    "SVC_SELLER_COUNTRY",
    "SVC_SELLER_VAT_ID",
    "SVC_SELLER_IBAN",
    "SVC_SELLER_EMAIL",
)
OPTIONAL = ("SVC_SELLER_REGISTRATION", "SVC_SELLER_BIC", "SVC_SELLER_PHONE")

# What `make run` (manage.py dev_setup) writes to var/dev.env: a seller nobody could take
# for a real one. The IBAN is the well-known example of the German banks' association
# (valid check digits, no real account), the VAT id a checksum-valid made-up number.
DEMO = {
    "SVC_SELLER_NAME": "Demo Seller GmbH (not a real company)",
    "SVC_SELLER_ADDRESS": "Musterstraße 1",
    "SVC_SELLER_POSTCODE": "10115",
    "SVC_SELLER_CITY": "Berlin",
    "SVC_SELLER_COUNTRY": "DE",
    "SVC_SELLER_VAT_ID": "DE136695976",
    "SVC_SELLER_REGISTRATION": "Amtsgericht Demo HRB 00000 (demo)",
    "SVC_SELLER_IBAN": "DE89370400440532013000",
    "SVC_SELLER_BIC": "COBADEFFXXX",
    "SVC_SELLER_EMAIL": "billing@demo-seller.invalid",
    "SVC_SELLER_PHONE": "+49 30 0000000",
}
DEMO_NAME_MARK = "not a real company"


def is_demo(seller_name: str, iban: str) -> bool:
    """Whether the seller is :data:`DEMO` (the console warns on every document)."""
    return DEMO_NAME_MARK in seller_name or iban == DEMO["SVC_SELLER_IBAN"]


def _address_lines(text: str) -> list[str]:
    """Lines separated by a newline, ``\\n`` written out, or `` | ``."""
    return [
        line.strip()
        for line in text.replace("\\n", "\n").replace(" | ", "\n").splitlines()
        if line.strip()
    ]


def seller_settings(*, debug: bool) -> dict[str, object]:
    """The ``SVC_SELLER_*`` settings, checked. Every problem is collected so one start-up
    names all of them: "SVC_SELLER_IBAN: ... ; SVC_SELLER_CITY is not set"."""
    raw = {name: os.environ.get(name, "").strip() for name in REQUIRED + OPTIONAL}
    problems: list[str] = []
    missing = [name for name in REQUIRED if not raw[name]]
    if not debug and 0 < len(missing) < len(REQUIRED):
        problems.append(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: every "
            "invoice names its seller (docs/configuration.md, Seller)"
        )
    country = raw["SVC_SELLER_COUNTRY"].upper()
    if country and not re.fullmatch(r"[A-Z]{2}", country):
        problems.append(f"SVC_SELLER_COUNTRY must be an ISO 3166 alpha-2 code, not {country!r}")
    vat_id = vat.compact(raw["SVC_SELLER_VAT_ID"]) if raw["SVC_SELLER_VAT_ID"] else ""
    if vat_id:
        if not vat.is_valid(vat_id):
            problems.append(f"SVC_SELLER_VAT_ID {vat_id!r} is not a valid EU VAT id")
        elif country and vat_id[:2] not in (country, "EL" if country == "GR" else country):
            problems.append(f"SVC_SELLER_VAT_ID {vat_id!r} is not of SVC_SELLER_COUNTRY {country}")
    account = iban.compact(raw["SVC_SELLER_IBAN"]) if raw["SVC_SELLER_IBAN"] else ""
    if account and not iban.is_valid(account):
        problems.append("SVC_SELLER_IBAN is not a valid IBAN (length or check digits)")
    code = bic.compact(raw["SVC_SELLER_BIC"]) if raw["SVC_SELLER_BIC"] else ""
    if code and not bic.is_valid(code):
        problems.append(f"SVC_SELLER_BIC {code!r} is not a valid BIC")
    email = raw["SVC_SELLER_EMAIL"]
    if email and not re.fullmatch(r"[^@\s,]+@[^@\s,]+\.[^@\s,]+", email):
        problems.append(f"SVC_SELLER_EMAIL {email!r} is not an e-mail address")
    if problems:
        raise ImproperlyConfigured("Seller: " + "; ".join(problems))
    return {
        "SVC_SELLER_NAME": raw["SVC_SELLER_NAME"],
        "SVC_SELLER_ADDRESS": _address_lines(raw["SVC_SELLER_ADDRESS"]),
        "SVC_SELLER_POSTCODE": raw["SVC_SELLER_POSTCODE"],
        "SVC_SELLER_CITY": raw["SVC_SELLER_CITY"],
        "SVC_SELLER_COUNTRY": country,
        "SVC_SELLER_VAT_ID": vat_id,
        "SVC_SELLER_REGISTRATION": raw["SVC_SELLER_REGISTRATION"],
        "SVC_SELLER_IBAN": account,
        "SVC_SELLER_BIC": code,
        "SVC_SELLER_EMAIL": email,
        "SVC_SELLER_PHONE": raw["SVC_SELLER_PHONE"],
        # What no document can be issued or printed without (billing.documents).
        "SVC_SELLER_MISSING": tuple(missing),
    }


def missing_message(missing: tuple[str, ...]) -> str:
    """What a node without a seller says, at start-up and when asked for a document."""
    return (
        f"the seller is not set ({', '.join(missing)}): no invoice or credit note is "
        "issued or printed until it is (docs/configuration.md, Seller)"
    )
