"""Identifiers: random, unguessable, uppercase Crockford base32 (contract §3)."""

from __future__ import annotations

import secrets

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_LENGTH = 16  # 80 bits


def random_id(length: int = ID_LENGTH) -> str:
    """``length`` characters, each uniform over the 32 of CROCKFORD: one random byte
    each, of which the low five bits choose (256 is a multiple of 32, so no bias). One
    call for the bytes, not one secrets.choice per character (ten times slower, on
    every activation)."""
    return "".join(CROCKFORD[byte & 31] for byte in secrets.token_bytes(length))


CUSTOMER_PREFIX = "CUST-"


def customer_id() -> str:
    return f"{CUSTOMER_PREFIX}{random_id()}"


def chosen_customer_id(value: str) -> str:
    """A customer id an operator typed, as it is stored and looked up: trimmed, upper
    case, with the ``CUST-`` prefix added when missing (``acme`` -> ``CUST-ACME``). The
    one rule for the API, ``mint`` and ``svcctl``. A value that is not ASCII is only
    trimmed, for the caller's check to refuse ("ß".upper() is "SS", which would pass)."""
    chosen = value.strip()
    if not chosen.isascii():
        return chosen
    chosen = chosen.upper()
    return chosen if chosen.startswith(CUSTOMER_PREFIX) else f"{CUSTOMER_PREFIX}{chosen}"


def batch_id(year: int) -> str:
    return f"B-{year}-{random_id()}"


def license_id() -> str:
    return f"LIC-{random_id()}"
