"""PostgreSQL `timestamptz` values read in C instead of Python (issue 22).

Django loads every `timestamptz` column through its own subclass of psycopg's pure-Python
loader (to attach the connection's time zone), so psycopg's C loader is never used: 2.9 µs a
value, about a ninth of a pull-and-report's CPU, as a pulled agenda carries some forty
timestamps there and back. This loader parses with `datetime.fromisoformat` (C, 0.45 µs) and
answers what Django's answers: an aware datetime in UTC, the time zone of POP's sessions
(settings.TIME_ZONE and USE_TZ). It is registered on each new PostgreSQL connection by
`use_on_new_connections`, and declares `timezone = UTC` so Django's cursor sees a loader in
the connection's time zone and keeps it.
"""

from datetime import UTC, datetime
from typing import Any

import psycopg
from django.db.backends.signals import connection_created
from psycopg.adapt import Loader


class UtcTimestamptzLoader(Loader):
    """`timestamptz` text → aware `datetime` in UTC (any other offset converted to UTC)."""

    timezone = UTC

    def load(self, data: Any) -> datetime:
        text = bytes(data).decode()
        try:
            value = datetime.fromisoformat(text)
        except ValueError as error:  # infinity, BC dates: what psycopg refuses too
            raise psycopg.DataError(f"can't parse timestamptz {text!r}") from error
        return value if value.tzinfo is UTC else value.astimezone(UTC)


def _register(sender: Any, connection: Any, **kwargs: Any) -> None:
    if connection.vendor == "postgresql" and connection.timezone is UTC:
        connection.connection.adapters.register_loader("timestamptz", UtcTimestamptzLoader)


def use_on_new_connections() -> None:
    """Register the loader on every PostgreSQL connection Django opens from now on."""
    connection_created.connect(_register, dispatch_uid="pop-utc-timestamptz-loader")
