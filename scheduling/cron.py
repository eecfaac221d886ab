"""Cron arithmetic for `Schedule` (docs/design.md §3, §8): pure functions, no ORM.

A schedule's cron expression is read in its IANA time zone, on the wall clock, and every
result is an aware UTC datetime. Daylight-saving changes follow the traditional cron rules:

- a wall time skipped by a spring-forward change fires once, at the moment of the change,
  unless the expression runs every hour (hour field `*`): that one just has no run in the
  hour that does not exist;
- a wall time repeated by a fall-back change fires once, at its first occurrence, unless the
  expression runs every hour: that one fires in both occurrences, so it runs every real hour.
"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Offsets change by at most a few hours (2 h at most in tzdata history); look this far back
# for a repeated wall time that may still lie ahead in real time.
TRANSITION_MARGIN = timedelta(hours=3)
MAX_WALL_TIMES = 100_000


class CronError(ValueError):
    """An expression or zone that cannot produce run times."""


def expand_cron(expression: str) -> str:
    """The five-field form of `expression` (macros such as `@daily` expanded)."""
    text = " ".join(expression.split())
    return MACROS.get(text.lower(), text)


def cron_errors(expression: object) -> list[str]:
    """Problems with a cron expression, as messages for the `cron` field (empty when valid)."""
    if not isinstance(expression, str) or not expression.strip():
        return ["Enter a cron expression such as '*/5 * * * *'."]
    text = expand_cron(expression)
    if len(text.split(" ")) != 5:
        return [
            f"{expression!r} is not a cron expression: expected 5 fields "
            "(minute hour day-of-month month day-of-week) or a macro such as @daily."
        ]
    if not croniter.is_valid(text):
        return [f"{expression!r} is not a valid cron expression."]
    try:
        croniter(text, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        return [f"{expression!r} never fires (no such date)."]
    except CroniterError as error:
        return [f"{expression!r} is not a valid cron expression: {error}"]
    return []


def timezone_errors(name: object) -> list[str]:
    """Problems with an IANA zone name, as messages for the `timezone` field (empty when valid)."""
    if not isinstance(name, str) or not name.strip():
        return ["Enter an IANA time zone such as 'Europe/Berlin' or 'UTC'."]
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return [f"Unknown time zone {name!r}."]
    return []


def zone_of(name: str) -> ZoneInfo:
    """The ZoneInfo for `name`; raises CronError when unknown."""
    errors = timezone_errors(name)
    if errors:
        raise CronError(errors[0])
    return ZoneInfo(name)


def next_run(
    expression: str, zone_name: str, after: datetime, *, not_before: datetime | None = None
) -> datetime:
    """The first time strictly after `after` that the expression fires in the zone (UTC).

    With `not_before` (a schedule's `start_at`), also not earlier than that moment, which is
    itself a run time when the expression fires then: the start is inclusive.
    """
    if not_before is not None and not_before > after:
        after = not_before - timedelta.resolution
    return next(runs_after(expression, zone_name, after))


def runs_after(expression: str, zone_name: str, after: datetime) -> Iterator[datetime]:
    """Every fire time strictly after `after` in order, as aware UTC datetimes.

    Raises CronError (on the first `next()`) for an invalid expression or zone, or one that
    never fires; also when the next run would lie past the end of year 9999, where Python's
    datetimes end (croniter and the zone arithmetic raise OverflowError or ValueError there).
    """
    errors = cron_errors(expression)
    if errors:
        raise CronError(errors[0])
    if after.tzinfo is None:
        raise ValueError("`after` must be an aware datetime")
    try:
        yield from _runs_after(expression, zone_name, after)
    except CronError:
        raise
    except (OverflowError, ValueError) as error:
        raise CronError(
            f"{expression!r} has no run time after {after.isoformat()} before the year 10000."
        ) from error


def _runs_after(expression: str, zone_name: str, after: datetime) -> Iterator[datetime]:
    zone = zone_of(zone_name)
    text = expand_cron(expression)
    every_hour = text.split(" ")[1] == "*"
    after = after.astimezone(UTC)
    start = after
    if _offset(after - TRANSITION_MARGIN, zone) != _offset(after + TRANSITION_MARGIN, zone):
        start = after - TRANSITION_MARGIN
    # Candidates come from wall times in order; their instants are in order too, except the
    # second occurrence of a repeated wall time, which is held back until it is the earliest.
    walls = croniter(text, start.astimezone(zone).replace(tzinfo=None))
    held: list[datetime] = []
    last: datetime | None = None
    for _ in range(MAX_WALL_TIMES):
        try:
            wall = walls.get_next(datetime)
        except CroniterBadDateError as error:
            raise CronError(f"{expression!r} never fires after {after.isoformat()}") from error
        first, second = _instants(wall, zone, every_hour=every_hour)
        if first is None:
            continue
        while held and held[0] <= first:
            candidate = held.pop(0)
            if candidate > after and (last is None or candidate > last):
                last = candidate
                yield candidate
        if second is not None:
            held.append(second)
            held.sort()
        if first > after and (last is None or first > last):
            last = first
            yield first
    raise CronError(f"{expression!r} yields no run time within {MAX_WALL_TIMES} steps")


def _offset(moment: datetime, zone: ZoneInfo) -> timedelta | None:
    return moment.astimezone(zone).utcoffset()


def _instants(
    wall: datetime, zone: ZoneInfo, *, every_hour: bool
) -> tuple[datetime | None, datetime | None]:
    """(first instant, second instant or None) at which the naive wall time fires."""
    early = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    late = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if early == late:
        return early, None
    if early < late:  # repeated (fall back): fold=0 is the first occurrence
        return early, (late if every_hour else None)
    # Skipped (spring forward): fold=0 reads the wall time with the old offset, landing after
    # the change; fold=1 with the new one, landing before it. The change lies in (late, early].
    if every_hour:
        return None, None
    return _transition(late, early, zone), None


def _transition(low: datetime, high: datetime, zone: ZoneInfo) -> datetime:
    """The first instant in (low, high] with `high`'s UTC offset (bisection to the second)."""
    target = _offset(high, zone)
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        middle = middle.replace(microsecond=0)
        if middle <= low:
            break
        if _offset(middle, zone) == target:
            high = middle
        else:
            low = middle
    return high
