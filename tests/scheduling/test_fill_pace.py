"""A fill's pace (docs/design.md §6.1, "Room"): the room grows by what pulls took from the
queue since the previous fill, at most POP_FILL_PACE_SECONDS of it at their rate.

The other tests fill without a pace (tests/conftest.py); these set it, and give each fill its
own `now`, so the time between two fills is exact."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import fill as fill_service
from scheduling.fill import PACE_MAX_ROWS, fill_pace
from scheduling.models import InsightScheduleInfo, QueuedAgenda

pytestmark = pytest.mark.django_db


@pytest.fixture
def paced(settings):
    settings.POP_FILL_PACE_SECONDS = 0.1


@pytest.fixture
def short_queue(insight, submitter, submit_agenda):
    """An insight with queue_size 4, 20 agendas ready, and a first fill of 4 at `start`."""
    insight.queue_size = 4
    insight.save()
    for _ in range(20):
        submit_agenda(submitter)
    start = timezone.now()
    assert fill_service.insight_fill(insight_id=insight.pk, now=start).moved == 4
    return start


def _fill_after(insight, start, seconds: float) -> int:
    return fill_service.insight_fill(
        insight_id=insight.pk, now=start + timedelta(seconds=seconds)
    ).moved


def test_a_fill_moves_what_pulls_took_since_the_last_fill_on_top_of_the_queue_size(
    paced, insight, short_queue, pull
):
    assert len(pull(insight, count=3)) == 3  # 1 of 4 left

    assert _fill_after(insight, short_queue, 0.05) == 6  # the queue's 3 and the 3 taken

    assert QueuedAgenda.objects.filter(insight=insight).count() == 7
    info = InsightScheduleInfo.objects.get(insight=insight)
    assert (info.last_fill_count, info.last_fill_queue_after) == (6, 7)


def test_what_pulls_took_over_a_longer_time_counts_for_the_pace_at_their_rate(
    paced, insight, short_queue, pull
):
    assert len(pull(insight, count=4)) == 4

    # 4 taken in 0.4 s: a tenth of a second of that is 1.
    assert _fill_after(insight, short_queue, 0.4) == 4 + 1


def test_a_slow_insights_queue_is_filled_to_its_queue_size_only(paced, insight, short_queue, pull):
    assert len(pull(insight, count=4)) == 4

    assert _fill_after(insight, short_queue, 60) == 4

    assert QueuedAgenda.objects.filter(insight=insight).count() == 4


def test_a_queue_nobody_pulled_from_gets_nothing_more(paced, insight, short_queue):
    assert _fill_after(insight, short_queue, 0.01) == 0

    assert QueuedAgenda.objects.filter(insight=insight).count() == 4


def test_the_pace_at_zero_fills_to_the_queue_size(settings, insight, short_queue, pull):
    settings.POP_FILL_PACE_SECONDS = 0
    assert len(pull(insight, count=4)) == 4

    assert _fill_after(insight, short_queue, 0.01) == 4


def test_the_pace_adds_at_most_its_bound_whatever_the_rate():
    assert fill_pace(taken=50_000, seconds=0.001, pace_seconds=0.1) == PACE_MAX_ROWS
    assert fill_pace(taken=0, seconds=0.001, pace_seconds=0.1) == 0  # nothing taken
    assert fill_pace(taken=3, seconds=0.0, pace_seconds=0.1) == 3
