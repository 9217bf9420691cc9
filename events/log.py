"""The event log as its readers follow it: webhook endpoints and alert mailboxes, each at
a position ``(xid, id)`` they move forward only.

At least once and in order, provably: a reader takes only the events whose writing
transaction ended before the statement's snapshot: those whose ``xid`` is below the
oldest transaction of this database the snapshot still saw running (its ``xip``, less
the transactions running in other databases of the cluster, which never write here; the
snapshot's ``xmax`` when there is none). Every event a later read can see for the first
time is then written by a transaction at or past that horizon, so it sorts after every
event already taken, and no position can pass it. The cost: an event waits for every
transaction of this database that began writing before its own to end (a long writing
transaction delays deliveries; it loses none). This is how PgQ batches its queues, per
database.

A transaction that ended after the snapshot counts as running, whatever its database
(it may have written here, and its rows are not in the snapshot); so does one whose
database the server does not show to the application's role. Either way a reader waits,
never skips.
"""

from __future__ import annotations

from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL

from events.models import Event

Position = tuple[int, int]  # (xid, id) of the last event a reader is done with

# The horizon: the oldest transaction the statement's snapshot saw running (its xip,
# other databases' running transactions left out; past xmax every one is running), and
# the reader's own transaction when it wrote, which the xip leaves out. The reader's own
# events are read too: its writes are its own to see (a test in one transaction).
_OWN = "(pg_current_xact_id_if_assigned()::text)::bigint"
_HORIZON = f"""LEAST(
    (SELECT min(running::text::bigint) FROM pg_snapshot_xip(pg_current_snapshot()) AS running
     WHERE xid(running) NOT IN (
        SELECT backend_xid FROM pg_stat_activity
        WHERE backend_xid IS NOT NULL AND datname IS DISTINCT FROM current_database())),
    pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
    {_OWN})"""  # noqa: S608 - constant SQL
_ENDED = (f"({_HORIZON})", _OWN)


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


def before(event: Event) -> Position:
    """The position just before ``event``: a reader moved there takes it next."""
    return (event.xid, event.id - 1)
