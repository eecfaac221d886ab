"""Django's PostgreSQL backend, with a connection health check that asks the socket first.

`CONN_HEALTH_CHECKS` (on in popsite/settings.py) makes Django check a kept connection before
the first statement of every request, so the first request after a database restart opens a
new connection instead of failing on the dead one. Django checks with a `SELECT 1`: a round
trip and a statement on the server per request (2.2% of the web's CPU over HTTP,
bench/RESULTS.md). Here an idle connection whose socket has nothing to read is usable without
one: a server that closed it (a restart, `pg_terminate_backend`, a crash) has sent its goodbye
or the kernel its end of stream, and either makes the socket readable; then, or when the
connection is not idle, Django's `SELECT 1` decides as before (docs/decisions.md).
"""

import select

import psycopg
from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self):
        conn = self.connection
        if conn is None or conn.closed or conn.broken:
            return False
        if conn.pgconn.transaction_status == pq.TransactionStatus.IDLE:
            try:
                readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
            except (OSError, ValueError, psycopg.Error):  # no socket any more
                return False
            if not readable:
                return True
        return super().is_usable()
