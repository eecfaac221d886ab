"""Fairness end to end (docs/design.md §6.1, bench/RESULTS.md): a flood must not starve small
customers.

One customer floods 5,000 agendas, then five others submit 5 each. Fills then pulls and
reports through the puller API: under round_robin every small agenda is among the first 40
pulled (two queues' worth); under fifo (oldest first) none is. A pull of 100 from a queue of 20
gets 100: it fills inline, in the same fair order, when its claim comes up short. The flood
is one agenda submitted through the services and copied 4,999 times in SQL (conftest's
clone_ready_agendas).
"""

import pytest
from django.db import connection

from resourcepools.models import Insight
from scheduling import fill
from tests.factories import CustomerFactory
from tests.scheduling.conftest import clone_ready_agendas

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the flood is copied in SQL"),
]


def _fill_pull_and_finish(insight, client) -> list[str]:
    fill.insight_fill(insight_id=insight.pk)
    response = client.post(
        f"/api/v1/insights/{insight.pk}/pull/", {"count": 100, "worker": "e2e"}, format="json"
    )
    assert response.status_code == 200
    items = response.json()["agendas"]
    reports = [
        {
            "execution": item["execution"]["id"],
            "lease_token": item["execution"]["lease_token"],
            "state": "succeeded",
        }
        for item in items
    ]
    results = client.post("/api/v1/executions/report/", {"reports": reports}, format="json")
    assert [result["status"] for result in results.json()["results"]] == [200] * len(items)
    return [item["agenda"]["customer_slug"] for item in items]


@pytest.mark.parametrize(
    ("algorithm", "small_pulled"),
    [(Insight.Algorithm.ROUND_ROBIN, 25), (Insight.Algorithm.FIFO, 0)],
)
def test_small_customers_get_through_a_flood_under_round_robin_not_fifo(
    algorithm,
    small_pulled,
    pool,
    insight,
    submitter,
    submit_agenda,
    make_principal,
    worker,
    api_client_for,
):
    insight.queue_size = 20
    insight.scheduling_algorithm = algorithm
    insight.save()
    clone_ready_agendas(submit_agenda(submitter), 4_999)
    for number in range(5):
        small = make_principal(CustomerFactory(slug=f"small-{number}", resource_pool=pool))
        for _ in range(5):
            submit_agenda(small)
    client = api_client_for(worker)

    pulled = _fill_pull_and_finish(insight, client) + _fill_pull_and_finish(insight, client)

    assert len(pulled) == 200
    pulled = pulled[:40]
    by_customer = {slug: pulled.count(slug) for slug in set(pulled)}
    assert sum(n for slug, n in by_customer.items() if slug.startswith("small-")) == small_pulled
    if small_pulled:
        assert all(by_customer[f"small-{number}"] == 5 for number in range(5))
        assert by_customer["acme"] == 15
    else:
        assert by_customer == {"acme": 40}
