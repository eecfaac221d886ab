"""`timestamptz` values come back from PostgreSQL parsed in C (core/timestamp_loader.py) and
exactly as Django's own loader gives them: aware datetimes in UTC, to the microsecond."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import DataError, connection
from psycopg.pq import Format

from core.timestamp_loader import UtcTimestamptzLoader

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL adapter"),
]


def _select(sql: str, params=()):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def test_every_new_connection_reads_timestamps_with_the_utc_loader():
    connection.ensure_connection()
    oid = connection.connection.adapters.types["timestamptz"].oid

    assert connection.connection.adapters.get_loader(oid, Format.TEXT) is UtcTimestamptzLoader


def test_a_timestamp_comes_back_aware_in_utc_to_the_microsecond():
    written = datetime(2026, 11, 26, 16, 43, 32, 123456, tzinfo=timezone(timedelta(hours=5)))

    read = _select("SELECT %s::timestamptz", [written])

    assert read == written
    assert read.tzinfo is UTC
    assert read == datetime(2026, 11, 26, 11, 43, 32, 123456, tzinfo=UTC)


@pytest.mark.parametrize("zone", ["Asia/Kolkata", "America/St_Johns", "Europe/Amsterdam"])
def test_a_session_in_another_time_zone_still_reads_utc(zone):
    with connection.cursor() as cursor:
        cursor.execute(f"SET TIME ZONE '{zone}'")
    try:
        read = _select("SELECT '1900-01-01 12:00:00.5+00'::timestamptz")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")

    assert read == datetime(1900, 1, 1, 12, 0, 0, 500000, tzinfo=UTC)
    assert read.tzinfo is UTC


def test_the_extremes_of_the_range_read_back():
    assert _select("SELECT '0001-01-01 00:00:00+00'::timestamptz") == datetime(1, 1, 1, tzinfo=UTC)
    assert _select("SELECT '9999-12-31 23:59:59.999999+00'::timestamptz") == datetime(
        9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC
    )


@pytest.mark.parametrize("value", ["infinity", "-infinity", "0044-03-15 12:00:00+00 BC"])
def test_a_timestamp_python_cannot_hold_is_a_data_error_as_before(value):
    with pytest.raises(DataError):
        _select(f"SELECT '{value}'::timestamptz")
