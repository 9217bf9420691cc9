"""Django's PostgreSQL backend with a health check that costs no round trip.

``CONN_HEALTH_CHECKS`` makes Django check a persistent connection before each request
reuses it; Django's check is a ``SELECT 1``, one more round trip than a request whose
only work is one indexed read. A connection the server has closed (a restart,
``pg_terminate_backend``, a proxy's reset) has something to read before anyone asked:
the server's last message or the end of the stream. So an idle connection with nothing
to read is taken as usable; one with something to read gets Django's real check.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg.pq import TransactionStatus


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        if connection.info.transaction_status == TransactionStatus.IDLE:
            try:
                readable, _, _ = select.select([connection.fileno()], [], [], 0)
            except (OSError, ValueError):
                return False
            if not readable:
                return True
        return super().is_usable()
