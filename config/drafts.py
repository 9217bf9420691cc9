"""Drafts: what a write would do, by doing it and rolling it back.

A confirmation page must show exactly what the action will do (the invoice's lines and
total, a renewal's new end and amount). Computing that with separate read-only code
would be a second copy of the rules, free to drift from the first. :func:`drafted` runs
the real service in a transaction it then rolls back, reading what it needs from the
result first: the same code decides both, and nothing it wrote stays (rows, numbers
taken from a sequence, events, audit entries written in the transaction).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import transaction

T = TypeVar("T")
R = TypeVar("R")


class _RollBack(Exception):
    pass


def drafted(make: Callable[[], T], read: Callable[[T], R]) -> R:
    """``read(make())``, computed in a transaction that is then rolled back. An error of
    ``make`` (the service's refusal) propagates as it would from the real action."""
    result: list[R] = []
    try:
        with transaction.atomic():
            result.append(read(make()))
            raise _RollBack
    except _RollBack:
        pass
    return result[0]
