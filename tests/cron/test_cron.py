"""Cron arithmetic in a time zone, across daylight-saving changes (no database)."""

from datetime import UTC, datetime
from itertools import islice

import pytest

from scheduling.cron import CronError, cron_errors, next_run, runs_after, timezone_errors


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def runs(expression: str, zone: str, after: datetime, count: int) -> list[datetime]:
    return list(islice(runs_after(expression, zone, after), count))


def test_a_daily_run_keeps_its_wall_time_across_the_spring_forward_change():
    # New York: 2026-03-08 02:00 EST → 03:00 EDT; 09:00 local moves from 14:00 to 13:00 UTC.
    assert runs("0 9 * * *", "America/New_York", utc(2026, 3, 6, 15), 3) == [
        utc(2026, 3, 7, 14),
        utc(2026, 3, 8, 13),
        utc(2026, 3, 9, 13),
    ]


def test_a_daily_run_keeps_its_wall_time_across_the_fall_back_change():
    # Berlin: 2026-10-25 03:00 CEST → 02:00 CET; 08:30 local moves from 06:30 to 07:30 UTC.
    assert runs("30 8 * * *", "Europe/Berlin", utc(2026, 10, 24, 7), 2) == [
        utc(2026, 10, 25, 7, 30),
        utc(2026, 10, 26, 7, 30),
    ]


def test_a_wall_time_skipped_by_spring_forward_fires_once_at_the_change():
    # Berlin 2026-03-29: 02:00–02:59 do not exist; 02:30 fires at 03:00 CEST (01:00 UTC).
    assert runs("30 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), 3) == [
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 30, 0, 30),
        utc(2026, 3, 31, 0, 30),
    ]
    # Every quarter hour inside the missing hour collapses into that one run.
    assert runs("*/15 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), 2) == [
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 30, 0, 0),
    ]


def test_a_wall_time_repeated_by_fall_back_fires_once_at_its_first_occurrence():
    # Berlin 2026-10-25: 02:30 happens at 00:30 UTC (CEST) and again at 01:30 UTC (CET).
    assert runs("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), 2) == [
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    ]


def test_an_hourly_run_fires_every_real_hour_across_both_changes():
    assert runs("0 * * * *", "Europe/Berlin", utc(2026, 3, 28, 23, 30), 4) == [
        utc(2026, 3, 29, 0),  # 01:00 CET
        utc(2026, 3, 29, 1),  # 03:00 CEST (02:00 never happened)
        utc(2026, 3, 29, 2),
        utc(2026, 3, 29, 3),
    ]
    assert runs("0 * * * *", "Europe/Berlin", utc(2026, 10, 24, 22, 30), 5) == [
        utc(2026, 10, 24, 23),  # 01:00 CEST
        utc(2026, 10, 25, 0),  # 02:00 CEST
        utc(2026, 10, 25, 1),  # 02:00 CET, the repeated hour
        utc(2026, 10, 25, 2),  # 03:00 CET
        utc(2026, 10, 25, 3),
    ]


def test_next_run_from_inside_the_repeated_hour_is_the_repeated_occurrence():
    # 00:30 UTC is 02:30 CEST, the first pass through 02:xx; the next full hour is 02:00 CET.
    assert next_run("0 * * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 25, 1)


def test_next_run_is_strictly_after_the_given_time_and_macros_work():
    assert next_run("@hourly", "UTC", utc(2026, 1, 1, 10)) == utc(2026, 1, 1, 11)
    assert next_run("@daily", "Asia/Tokyo", utc(2026, 1, 1, 10)) == utc(2026, 1, 1, 15)
    assert next_run("*/5 * * * *", "UTC", utc(2026, 1, 1, 10, 2, 30)) == utc(2026, 1, 1, 10, 5)


def test_not_before_is_inclusive_and_only_counts_when_later_than_after():
    hourly, start = "0 * * * *", utc(2026, 1, 1, 12)
    assert next_run(hourly, "UTC", utc(2026, 1, 1, 9, 30), not_before=start) == start
    assert next_run(hourly, "UTC", utc(2026, 1, 1, 9), not_before=utc(2026, 1, 1, 12, 1)) == utc(
        2026, 1, 1, 13
    )
    # A start in the past changes nothing: still strictly after `after`.
    assert next_run(hourly, "UTC", start, not_before=start) == utc(2026, 1, 1, 13)
    assert next_run(hourly, "UTC", start, not_before=utc(2025, 1, 1)) == utc(2026, 1, 1, 13)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "Enter a cron expression"),
        ("61 * * * *", "is not a valid cron expression"),
        ("* * * *", "expected 5 fields"),
        ("0 * * * * *", "expected 5 fields"),
        ("@reboot", "expected 5 fields"),
        ("0 0 30 2 *", "never fires"),
        ("every day", "expected 5 fields"),
    ],
)
def test_cron_errors_name_the_problem(expression, message):
    [error] = cron_errors(expression)
    assert message in error
    with pytest.raises(CronError):
        next_run(expression, "UTC", utc(2026, 1, 1))


@pytest.mark.parametrize("expression", ["*/5 * * * *", "0 9 * * 1-5", "@weekly", "0  3 * * *"])
def test_valid_expressions_have_no_errors(expression):
    assert cron_errors(expression) == []


def test_timezone_errors_accept_iana_names_and_refuse_others():
    assert timezone_errors("Europe/Berlin") == []
    assert timezone_errors("UTC") == []
    assert timezone_errors("Mars/Olympus_Mons") == ["Unknown time zone 'Mars/Olympus_Mons'."]
    assert timezone_errors("../etc/passwd") == ["Unknown time zone '../etc/passwd'."]
    assert timezone_errors("") == ["Enter an IANA time zone such as 'Europe/Berlin' or 'UTC'."]
    with pytest.raises(CronError, match="Unknown time zone"):
        next_run("0 * * * *", "Nowhere/Land", utc(2026, 1, 1))


def test_a_naive_time_is_refused():
    with pytest.raises(ValueError, match="aware"):
        next_run("0 * * * *", "UTC", datetime(2026, 1, 1))
