"""The replica's backend: :mod:`config.db.postgresql` that reports its own failures.

A replica that stops answering (refused, killed mid-query, dropped) raises as any
database does; this tells :func:`config.replica.replica_failed` first, so the request
is answered from the primary and the replica is left alone a while. The router never
sends a write here, and the session is read-only besides
(``default_transaction_read_only``, :func:`config.settings_checks.replica_database`).
"""

from __future__ import annotations

from django.db.utils import DatabaseErrorWrapper
from django.utils.functional import cached_property

from config.db.postgresql import base
from config.replica import replica_failed


class _NotingErrors(DatabaseErrorWrapper):
    def __exit__(self, exc_type, exc_value, traceback):
        if exc_type is not None and issubclass(
            exc_type, self.wrapper.Database.OperationalError | self.wrapper.Database.InterfaceError
        ):
            replica_failed()
        return super().__exit__(exc_type, exc_value, traceback)


class DatabaseWrapper(base.DatabaseWrapper):
    @cached_property
    def wrap_database_errors(self):
        return _NotingErrors(self)
