"""Prepared statements for the hot path only (docs/decisions.md, "Prepared statements").

PostgreSQL binds every statement's parameters on the server (`server_side_binding`), but
psycopg prepares none by default (`prepare_threshold=None`). Inside `hot_path_statements()`
it prepares a statement the sixth time the connection runs it, so the pull's, the reports'
and the fills' statements — the same few texts run per agenda, by primary key or by the
queue's own index — are parsed and planned once per connection. Lists and pages never run
inside it: a prepared statement may be planned generically after five runs, and a generic plan
is what loses on a filtered list over a long, skewed history.

`DATABASE_PREPARED_STATEMENTS` (settings.POP_PREPARED_STATEMENTS) chooses: `hot` (this), `all`
(every statement, psycopg's own threshold) or `off` (client-side binding, nothing prepared).
"""

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection

#: psycopg's default: the sixth run of a statement on a connection prepares it.
HOT_PATH_THRESHOLD = 5


@contextmanager
def hot_path_statements() -> Iterator[None]:
    """Prepare the statements run inside (on this thread's connection) from their sixth run."""
    if settings.POP_PREPARED_STATEMENTS != "hot" or connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    raw = connection.connection
    previous = raw.prepare_threshold
    raw.prepare_threshold = HOT_PATH_THRESHOLD
    try:
        yield
    finally:
        raw.prepare_threshold = previous
