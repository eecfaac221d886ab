"""The connection health check (core/postgresql_backend/base.py): an idle connection whose
socket has nothing to read is usable without a statement; one the server closed is not, and
the next request's first statement runs on a new connection."""

import time

import pytest
from django.db import connection, connections

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's backend"),
]


def _last_statement_of(pid: int) -> str:
    """What the backend `pid` last ran, read from another connection."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
            return cursor.fetchone()[0]
    finally:
        other.close()


def test_the_settings_use_the_backend_with_the_socket_check():
    assert type(connections["default"]).__module__ == "core.postgresql_backend.base"
    assert connection.settings_dict["CONN_HEALTH_CHECKS"] is True


def test_an_idle_open_connection_is_usable_without_a_statement_sent():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid() AS health_check_marker")
        pid = cursor.fetchone()[0]

    assert connection.is_usable()

    assert _last_statement_of(pid) == "SELECT pg_backend_pid() AS health_check_marker"


def test_a_connection_the_server_closed_is_unusable_and_the_next_request_reconnects():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()
    deadline = time.monotonic() + 5
    while connection.is_usable() and time.monotonic() < deadline:
        time.sleep(0.05)

    assert not connection.is_usable()

    # What Django does between requests and before the first statement of the next one.
    connection.close_if_unusable_or_obsolete()
    connection.close_if_health_check_failed()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid
