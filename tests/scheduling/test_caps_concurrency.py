"""Real PostgreSQL, real threads: a customer's `max_executing` and its rate limit hold when
fills of several insights admit its work at the same moment (each counts what the others
admitted)."""

import pytest
from django.db import connection
from django.db.models import Q

from agendas.models import Execution
from agendas.services import agendas_submit_many
from scheduling import fill as fill_service
from scheduling.models import QueuedAgenda
from tests.factories import CustomerFactory, InsightFactory
from tests.threads import all_at_once

TRIALS = 50
CAP = 5
TYPES = ["cap-a", "cap-b", "cap-c"]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="concurrency is proven on PostgreSQL"
    ),
]


def _trials_over_the_limit(pool, make_principal, limit: dict) -> list:
    """TRIALS times: a new customer with `limit` and CAP ready agendas on each of three
    insights, three fills at once behind a barrier; the trials that queued or ran more than
    CAP of its agendas."""
    insights = [
        InsightFactory(
            resource_pool=pool, name=kind, queue_size=1000, mappers={"operation_type": [kind]}
        )
        for kind in TYPES
    ]
    over = []
    for trial in range(TRIALS):
        customer = CustomerFactory(slug=f"limited-{trial}", resource_pool=pool, **limit)
        principal = make_principal(customer)
        agendas_submit_many(
            principal=principal.user,
            items=[
                {"customer": customer, "operations": [{"name": "op", "type": kind, "payload": {}}]}
                for kind in TYPES
                for _ in range(CAP)
            ],
        )
        fillers = iter(insights)

        def fill_one(fillers=fillers):
            return fill_service.insight_fill(insight_id=next(fillers).pk)

        results = all_at_once(len(insights), fill_one)
        admitted = QueuedAgenda.objects.filter(customer=customer).count()
        admitted += Execution.objects.filter(Q(customer=customer), outcome__isnull=True).count()
        if admitted > CAP:
            over.append((trial, admitted, [result.moved for result in results]))
        assert admitted >= 1, "the fills admitted nothing at all"
    return over


def test_three_fills_at_once_never_admit_more_than_max_executing(pool, make_principal):
    assert _trials_over_the_limit(pool, make_principal, {"max_executing": CAP}) == []


def test_three_fills_at_once_never_start_more_than_a_customers_rate_limit(pool, make_principal):
    limit = {"rate_limit": CAP, "rate_period_seconds": 3600}

    assert _trials_over_the_limit(pool, make_principal, limit) == []
