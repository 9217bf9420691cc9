"""Identifiers: random, unguessable, uppercase Crockford base32 (contract §3)."""

from __future__ import annotations

import secrets

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_LENGTH = 16  # 80 bits


def random_id(length: int = ID_LENGTH) -> str:
    return "".join(secrets.choice(CROCKFORD) for _ in range(length))


def customer_id() -> str:
    return f"CUST-{random_id()}"


def batch_id(year: int) -> str:
    return f"B-{year}-{random_id()}"


def license_id() -> str:
    return f"LIC-{random_id()}"
