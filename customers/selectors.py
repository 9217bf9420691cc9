"""Reads of customers that are more than a primary-key lookup."""

from __future__ import annotations

from config.errors import NotFound
from customers.models import Customer


def customer_check(customer_id: str | None) -> None:
    """NotFound when ``customer_id`` is given and names no customer: the customer part of
    every admin list filter (:func:`licensing.selectors.filters_check` adds batches and
    licences; the event log has only this part)."""
    if customer_id and not Customer.objects.filter(pk=customer_id).exists():
        raise NotFound(f"customer {customer_id} does not exist")
