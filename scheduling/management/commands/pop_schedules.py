"""Register POP's timed processes (scheduling/recurring.py) as django-q2 schedules, idempotently."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django_q.models import Schedule as QSchedule
from django_q.tasks import async_task

from scheduling.recurring import (
    RECURRING,
    TICKER_FUNC,
    TICKER_NAME,
    TICKER_PERIOD_SECONDS,
    ticked,
)

PREFIX = "pop-"


class Command(BaseCommand):
    help = (
        "Create or update the django-q2 schedules of POP's timed processes (keyed by name; "
        "safe to run again), remove stale pop-* ones, and start the sub-minute ticker."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--no-start-ticker",
            action="store_true",
            help="Do not enqueue a ticker now (the scheduler starts one within a minute).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        wanted: dict[str, tuple[str, int]] = {
            TICKER_NAME: (TICKER_FUNC, TICKER_PERIOD_SECONDS // 60)
        }
        for entry in RECURRING:
            if entry.native_minutes is not None:
                wanted[entry.name] = (entry.func, entry.native_minutes)
        with transaction.atomic():
            for name, (func, minutes) in wanted.items():
                _, created = QSchedule.objects.update_or_create(
                    name=name,
                    defaults={
                        "func": func,
                        "schedule_type": QSchedule.MINUTES,
                        "minutes": minutes,
                        "repeats": -1,
                    },
                )
                verb = "created" if created else "updated"
                self.stdout.write(f"{verb} {name}: {func} every {minutes} min")
            stale = QSchedule.objects.filter(name__startswith=PREFIX).exclude(name__in=wanted)
            for name in stale.values_list("name", flat=True):
                self.stdout.write(f"removed stale schedule {name}")
            stale.delete()
        for entry in ticked():
            self.stdout.write(f"ticker runs {entry.name}: {entry.func} every {entry.period:g} s")
        if not options["no_start_ticker"]:
            # The cluster's scheduler first looks for due schedules ~30 s after it starts;
            # a ticker queued now starts the sub-minute processes as soon as a worker is up.
            async_task(TICKER_FUNC, group=TICKER_NAME)
            self.stdout.write("queued a ticker")
