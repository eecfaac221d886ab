"""The API throttles count per key and fixed window in one statement (core/throttling.py):
the limit holds, the window's end is the Retry-After, a new window starts from zero, keys are
apart, and the counters of ended windows are pruned with the reap."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.throttling import (
    THROTTLE_TABLE,
    UserRateThrottle,
    throttle_counters_prune,
    window_hit,
)
from scheduling import tasks

pytestmark = pytest.mark.django_db


def counters() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, window_number, hits FROM {THROTTLE_TABLE} ORDER BY key")
        return cursor.fetchall()


def test_a_hit_is_one_statement_and_counts_within_its_window():
    with CaptureQueriesContext(connection) as queries:
        assert window_hit("k", window=7, expires_at=1e12) == 1
    assert len(queries.captured_queries) == 1

    assert window_hit("k", window=7, expires_at=1e12) == 2
    assert window_hit("other", window=7, expires_at=1e12) == 1
    assert window_hit("k", window=8, expires_at=1e12) == 1  # a new window starts from zero

    assert counters() == [("k", 8, 1), ("other", 7, 1)]


def test_the_third_request_of_a_2_per_minute_user_is_429_until_the_window_ends(client, monkeypatch):
    monkeypatch.setattr(UserRateThrottle, "THROTTLE_RATES", {"user": "2/minute"})
    monkeypatch.setattr(UserRateThrottle, "timer", staticmethod(lambda: 60 * 1000 + 15.0))

    assert [client.get("/api/v1/agendas/").status_code for _ in range(3)] == [200, 200, 429]
    refused = client.get("/api/v1/agendas/")
    assert refused.status_code == 429
    assert refused["Retry-After"] == "45"

    monkeypatch.setattr(UserRateThrottle, "timer", staticmethod(lambda: 60 * 1001 + 1.0))
    assert client.get("/api/v1/agendas/").status_code == 200


def test_a_request_costs_one_throttle_statement_whatever_the_requests_before_it(client):
    for _ in range(50):
        client.get("/api/v1/queues/")
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/api/v1/queues/").status_code == 200

    throttle = [q for q in queries.captured_queries if THROTTLE_TABLE in q["sql"]]
    assert len(throttle) == 1
    assert not [q for q in queries.captured_queries if "pop_cache" in q["sql"]]


def test_the_reap_prunes_the_counters_of_ended_windows_only():
    window_hit("ended", window=1, expires_at=100.0)
    window_hit("open", window=1, expires_at=1e12)

    assert throttle_counters_prune(now=200.0) == 1
    assert [key for key, *_ in counters()] == ["open"]

    window_hit("ended", window=1, expires_at=100.0)
    tasks.reap()
    assert [key for key, *_ in counters()] == ["open"]


def test_a_key_longer_than_the_column_is_counted_by_its_hash():
    key = "throttle_anon_" + "9" * 400

    assert window_hit(key, window=1, expires_at=1e12) == 1
    assert window_hit(key, window=1, expires_at=1e12) == 2
    assert window_hit(key[:-1], window=1, expires_at=1e12) == 1
    assert all(len(stored) <= 255 for stored, *_ in counters())
