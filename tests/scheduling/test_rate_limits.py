"""Rate limits: "at most N agendas started per period" per customer (over all insights) and per
insight, as token buckets drawn from in the fill; the waiting reason names them."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agendas.models import AgendaProgress
from agendas.queue_models import StartBucket
from agendas.waiting import waiting_reason
from scheduling import fill as fill_service
from scheduling.models import QueuedAgenda

pytestmark = pytest.mark.django_db


def _fill(insight, now):
    return fill_service.insight_fill(insight_id=insight.pk, now=now).moved


def test_bucket_level_refills_at_the_limits_rate_and_never_above_it():
    start = timezone.now()
    bucket = StartBucket(tokens=0.0, refilled_at=start)

    assert bucket.level(start + timedelta(seconds=20), limit=3, period_seconds=60) == 1.0
    assert bucket.level(start + timedelta(hours=1), limit=3, period_seconds=60) == 3.0
    assert bucket.next_token_at(start, limit=3, period_seconds=60) == start + timedelta(seconds=20)
    bucket.take(1, start + timedelta(seconds=30), limit=3, period_seconds=60)
    assert bucket.tokens == pytest.approx(0.5)


def test_a_customers_limit_holds_back_its_agendas_and_refills_with_time(
    customer, submitter, submit_agenda, insight
):
    customer.rate_limit, customer.rate_period_seconds = 3, 60
    customer.save()
    for _ in range(10):
        submit_agenda(submitter)
    now = timezone.now()

    assert _fill(insight, now) == 3
    assert _fill(insight, now + timedelta(seconds=1)) == 0
    assert _fill(insight, now + timedelta(seconds=21)) == 1
    assert _fill(insight, now + timedelta(seconds=81)) == 3
    assert QueuedAgenda.objects.count() == 7


def test_other_customers_are_served_while_one_is_rate_limited(
    customer, submitter, other_submitter, submit_agenda, insight
):
    customer.rate_limit = 1
    customer.save()
    mine = [submit_agenda(submitter) for _ in range(3)]
    theirs = [submit_agenda(other_submitter) for _ in range(3)]

    _fill(insight, timezone.now())

    queued = set(QueuedAgenda.objects.values_list("agenda_id", flat=True))
    assert len(queued & {agenda.pk for agenda in mine}) == 1
    assert {agenda.pk for agenda in theirs} <= queued


def test_an_insights_limit_bounds_its_room(submitter, other_submitter, submit_agenda, insight):
    insight.rate_limit, insight.rate_period_seconds = 2, 10
    insight.save()
    for _ in range(3):
        submit_agenda(submitter)
        submit_agenda(other_submitter)
    now = timezone.now()

    assert _fill(insight, now) == 2
    assert _fill(insight, now + timedelta(seconds=2)) == 0
    assert _fill(insight, now + timedelta(seconds=5)) == 1


def test_a_rate_limited_agenda_says_until_when(customer, submitter, submit_agenda, insight):
    customer.rate_limit, customer.rate_period_seconds = 1, 60
    customer.save()
    submit_agenda(submitter)
    waiting = submit_agenda(submitter)
    _fill(insight, timezone.now())

    progress = AgendaProgress.objects.select_related("agenda__customer", "agenda__insight").get(
        agenda=waiting
    )
    reason = waiting_reason(progress)

    assert reason["code"] == "rate_limited"
    assert reason["detail"]["scope"] == "customer"
    assert reason["detail"]["rate_limit"] == 1


def test_the_queue_view_shows_the_insights_tokens(
    submitter, submit_agenda, insight, api_client_for, staff_user
):
    insight.rate_limit, insight.rate_period_seconds = 5, 60
    insight.save()
    for _ in range(2):
        submit_agenda(submitter)
    _fill(insight, timezone.now())

    (row,) = [
        row
        for row in api_client_for(staff_user).get("/api/v1/queues/").json()["results"]
        if row["insight"] == str(insight.pk)
    ]

    assert row["rate_limit"] == 5
    assert 3 <= row["rate_tokens"] < 3.1


def test_only_staff_set_a_customers_rate_limit_and_zero_is_refused(
    customer, admin_member, api_client_for, staff_user
):
    url = f"/api/v1/customers/{customer.pk}/"

    refused = api_client_for(admin_member).patch(url, {"rate_limit": 10}, format="json")
    zero = api_client_for(staff_user).patch(url, {"rate_limit": 0}, format="json")
    accepted = api_client_for(staff_user).patch(url, {"rate_limit": 10}, format="json")

    assert refused.status_code == 403
    assert zero.status_code == 400 and "rate_limit" in zero.json()
    assert accepted.status_code == 200
    customer.refresh_from_db()
    assert customer.rate_limit == 10
