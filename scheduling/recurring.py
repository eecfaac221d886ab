"""RECURRING: every timed process of docs/design.md §8, declared once.

`manage.py pop_schedules` turns this list into django-q2 `Schedule` rows.

Why a ticker. django-q2 1.11's scheduler cannot run anything more often than once a minute:
its schedule types are ONCE, MINUTES (whole minutes, at least 1), HOURLY … YEARLY and CRON
(minute resolution), and the cluster's guard loop only looks for due schedules every 30
seconds (`counter >= 30` in `Sentinel.guard`, whatever `guard_cycle` is). Our fill and
promote must run every 2 s, reclaim every 15 s. So:

- a process whose period is a whole number of minutes gets its own native MINUTES schedule
  (time-out, reap);
- every shorter process runs inside `scheduling.tasks.ticker`, itself a native schedule
  that fires once a minute. A ticker runs the sub-minute processes back to back at their
  own periods, sleeping in between, and keeps going until the scheduler has spawned the next
  ticker (it watches its schedule row's `next_run` move), so ticks continue across the
  hand-over even though the scheduler itself only wakes every 30 s. It stops after at most
  `TICKER_MAX_SECONDS` in any case, well inside Q_CLUSTER["timeout"].

Each process is safe to run twice at once (try-locks, SKIP LOCKED, conditional writes), so
the brief overlap at a hand-over, or two clusters, cost a few redundant queries only.

`run` says how the ticker runs an entry: "inline" calls it in the ticker's own loop (it must
be quick), "enqueue" hands it to the cluster as a separate task each period (for work that
may block, such as HTTP callbacks).
"""

from dataclasses import dataclass

from django.conf import settings

TICKER_NAME = "pop-ticker"
TICKER_FUNC = "scheduling.tasks.ticker"
TICKER_PERIOD_SECONDS = 60
TICKER_MAX_SECONDS = 150


@dataclass(frozen=True)
class Recurring:
    name: str  # the django-q2 Schedule name (unique), also used in logs
    func: str  # dotted path of a scheduling/tasks.py function taking no arguments
    period_setting: str  # the POP_* setting holding the period in seconds
    default_period: float
    run: str = "inline"  # "inline" | "enqueue" (only for sub-minute periods)

    @property
    def period(self) -> float:
        return float(getattr(settings, self.period_setting, self.default_period))

    @property
    def native_minutes(self) -> int | None:
        """Whole minutes when django-q2 can schedule this itself, else None (ticker)."""
        period = self.period
        if period >= 60 and period % 60 == 0:
            return int(period // 60)
        return None


RECURRING: tuple[Recurring, ...] = (
    Recurring("pop-fill", "scheduling.tasks.fill", "POP_FILL_INTERVAL", 2.0),
    Recurring("pop-promote", "scheduling.tasks.promote", "POP_PROMOTE_INTERVAL", 2.0),
    Recurring("pop-reclaim", "scheduling.tasks.reclaim", "POP_RECLAIM_INTERVAL", 15.0),
    Recurring("pop-time-out", "scheduling.tasks.time_out", "POP_TIMEOUT_INTERVAL", 60.0),
    Recurring("pop-reap", "scheduling.tasks.reap", "POP_REAP_INTERVAL", 3600.0),
    # HTTP and mail may be slow: those run as their own tasks, never in the ticker's loop.
    Recurring(
        "pop-callbacks", "scheduling.tasks.callbacks", "POP_CALLBACK_INTERVAL", 2.0, "enqueue"
    ),
    Recurring("pop-cron", "scheduling.tasks.cron", "POP_CRON_INTERVAL", 10.0),
    Recurring("pop-alerts", "scheduling.tasks.alerts", "POP_ALERT_INTERVAL", 30.0, "enqueue"),
    # Jobs of actions on a set whose runner died (each job is also run at once when recorded).
    Recurring(
        "pop-actions", "scheduling.tasks.agenda_actions", "POP_ACTIONS_INTERVAL", 30.0, "enqueue"
    ),
)


def ticked() -> list[Recurring]:
    """The processes the ticker runs (periods the django-q2 scheduler cannot express)."""
    return [entry for entry in RECURRING if entry.native_minutes is None]
