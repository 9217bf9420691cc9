"""The console's search of units and licences by any part of an id (issue 41): the
search was by a device id's start, so ``8E305A87`` found nothing inside a MAC-derived
id, while the portal's matched any part.

First what the term names whole, as :class:`config.admin.base.IndexedSearchMixin` does
(a licence or batch id, a customer's id or part of its name). Otherwise every row whose
``search_contains`` columns (device id, licence id) hold the term anywhere, any case:
Django's ``icontains``, ``UPPER(col::text) LIKE UPPER('%term%')`` on PostgreSQL, which
the trigram indexes of licensing migration 0013 serve (a term of three characters or
more); SQLite scans. Listed in device-id order (the "C" collation index), so a term
most rows hold is read along that index and stops at a page.
"""

from __future__ import annotations

from django.contrib.admin.views.main import ORDER_VAR
from django.db.models import Q

from config.admin.base import IndexedSearchMixin, byte_order


class AnyPartSearchMixin(IndexedSearchMixin):
    """:class:`IndexedSearchMixin`'s whole names, then any part of ``search_contains``."""

    search_contains: tuple[str, ...] = ()
    search_order: str = "device_id"

    def get_search_fields(self, request):
        return [*super().get_search_fields(request), *self.search_contains]

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        named, duplicates = super().get_search_results(request, queryset, term)
        if not term or named.exists():
            return named, duplicates
        held = Q(pk__in=[])
        for field in self.search_contains:
            held |= Q(**{f"{field}__icontains": term})
        found = queryset.filter(held)
        if ORDER_VAR not in request.GET:  # (the change list has ordered the list already)
            found = found.order_by(byte_order(self.search_order).asc(), "-pk")
        return found, False
