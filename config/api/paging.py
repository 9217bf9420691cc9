"""Keyset paging: one page of a list in a total order, and the cursor of the next.

Every paged list of the service (the fleet, invoices, usage conflicts, events) reads a
page the same way: the rows after the previous page's last one, in the list's total
order, one more than asked to know whether another page follows, and the next cursor
made from the last row shown. A position, never an offset: rows written meanwhile
neither repeat nor skip one. What a cursor holds is each list's own (the fleet's is an
opaque, MAC'd (activated_at, id); the id lists' a row id in decimal, as the API has
always given them; the portal's batches and licences the id of the last row shown);
:func:`id_page` is the id lists' whole rule, :func:`named_row_page` the portal's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from config.errors import InvalidInput

T = TypeVar("T")

ID_CURSOR_DIGITS = 19  # a 64-bit id; the schema's cursor pattern says the same


def keyset_page(
    rows: Any, *, limit: int, cursor_of: Callable[[T], str]
) -> tuple[list[T], str | None]:
    """The first ``limit`` of ``rows`` (ordered, and starting after the cursor's position
    already: a queryset or any sliceable), and the cursor of the last one when more
    follow (``None``: this is the last page)."""
    found: Sequence[T] = list(rows[: limit + 1])  # one more than asked: a next page?
    page = list(found[:limit])
    return page, (cursor_of(page[-1]) if len(found) > limit else None)


def id_cursor_position(cursor: str) -> int:
    """The row id an id cursor names: ASCII decimal digits, at most
    :data:`ID_CURSOR_DIGITS`; anything else is refused (400) as a cursor the API did
    not give."""
    if not cursor.isascii() or not cursor.isdigit() or len(cursor) > ID_CURSOR_DIGITS:
        raise _not_given(cursor)
    return int(cursor)


def _not_given(cursor: str) -> InvalidInput:
    return InvalidInput(f"cursor must be a next_cursor this API gave, not {cursor[:40]!r}")


def id_page(rows: Any, *, cursor: str | None, limit: int) -> tuple[list[Any], str | None]:
    """A page of ``rows`` newest first by id (a queryset ordered by ``-id``) after the
    row ``cursor`` names, and the next cursor: the id of the page's last row."""
    if cursor is not None:
        rows = rows.filter(id__lt=id_cursor_position(cursor))
    return keyset_page(rows, limit=limit, cursor_of=lambda row: str(row.id))


def named_row_page(
    rows: Any, *, cursor: str | None, limit: int, by: str
) -> tuple[list[Any], str | None]:
    """A page of ``rows`` newest first by (``by``, primary key): a queryset ordered by
    ``-by, -pk`` whose ids are names (the portal's batches and licences), after the row
    ``cursor`` names, and the next cursor: the id of the page's last row. A cursor naming
    no row of ``rows`` is refused (400) as one the API did not give."""
    if cursor is not None:
        last = rows.filter(pk=cursor).values_list(by, flat=True).first()
        if last is None:
            raise _not_given(cursor)
        rows = rows.filter(**{f"{by}__lte": last}).exclude(**{by: last, "pk__gte": cursor})
    return keyset_page(rows, limit=limit, cursor_of=lambda row: str(row.pk))
