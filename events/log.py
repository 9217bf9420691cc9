"""The event log as its readers follow it: webhook endpoints and alert mailboxes, each at
a position ``(xid, id)`` they move forward only.

At least once and in order, provably: a reader takes only the events whose writing
transaction ended before the statement's snapshot, that is whose ``xid`` is below the
snapshot's ``xmin`` (the oldest transaction still running). Every event a later read
can see for the first time is then written by a transaction at or past that ``xmin``,
so it sorts after every event already taken, and no position can pass it. The cost: an
event waits for every transaction that began writing before its own to end, on this
database or another of the cluster (a long writing transaction delays deliveries; it
loses none). This is how PgQ batches its queues.

On SQLite one writer commits at a time, in id order, and ``xid`` is 0: the order is the
ids', and every committed event can be taken.
"""

from __future__ import annotations

from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL

from events.models import Event

Position = tuple[int, int]  # (xid, id) of the last event a reader is done with

# The oldest transaction still running when the statement's snapshot was taken; the
# reader's own transaction, when it wrote, is at that xmin and is read (its writes are
# its own to see: a test in one transaction, or a scan that delivers what it wrote).
_ENDED = (
    "(pg_snapshot_xmin(pg_current_snapshot())::text)::bigint",
    "(pg_current_xact_id_if_assigned()::text)::bigint",
)


def settled() -> Q:
    """The events whose transactions have ended: no event a later read sees for the
    first time sorts before them."""
    if connection.vendor != "postgresql":
        return Q()
    horizon, own = (RawSQL(sql, []) for sql in _ENDED)  # noqa: S611 - constant SQL
    return Q(xid__lt=horizon) | Q(xid=own)


def past(position: Position) -> Q:
    xid, event_id = position
    return Q(xid__gt=xid) | Q(xid=xid, id__gt=event_id)


def unread(position: Position) -> QuerySet[Event]:
    """Events after ``position`` that may be taken now, in the log's order."""
    return Event.objects.filter(past(position), settled()).order_by("xid", "id")


def end() -> Position:
    """The position of a reader that starts now: it hears of every event not yet taken
    by an existing reader (a transaction still running) and of every later one."""
    last = Event.objects.filter(settled()).order_by("-xid", "-id").values_list("xid", "id")
    taken = last.first() or (0, 0)
    if connection.vendor != "postgresql":
        return taken
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_ENDED[0]}")  # noqa: S608 - constant SQL
        (horizon,) = cursor.fetchone()
    return max(taken, (horizon - 1, 2**63 - 1))


def of(event: Event) -> Position:
    return (event.xid, event.id)


def before(event: Event) -> Position:
    """The position just before ``event``: a reader moved there takes it next."""
    return (event.xid, event.id - 1)
