"""agendas_submit_many: checks each item like agenda_submit, writes the good ones in bulk
(docs/design.md §5.1)."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agendas import services
from agendas.models import Agenda, AgendaProgress, OperationProgress
from agendas.services import agenda_submit, agendas_submit_many
from agendas.states import machine
from scheduling.models import ReadyAgenda

pytestmark = pytest.mark.django_db

ONE_STEP = [{"name": "probe", "type": "mediainfo"}]


def _row_counts() -> tuple[int, int, int, int]:
    return (
        Agenda.objects.count(),
        AgendaProgress.objects.count(),
        OperationProgress.objects.count(),
        ReadyAgenda.objects.count(),
    )


def test_fifty_items_with_three_bad_ones_write_47_of_each_row_and_report_the_three(
    submitter, other_customer, insight
):
    items = [{"operations": ONE_STEP, "link_id": f"n{n}"} for n in range(50)]
    items[7] = {"operations": [{"name": "x", "type": "log", "depends_on": ["nope"]}]}
    items[21] = {"operations": [{"name": "x", "type": "render3d"}]}
    items[42] = {"operations": ONE_STEP, "customer": other_customer}

    results = agendas_submit_many(principal=submitter.user, items=items, cid="cid-b")

    assert _row_counts() == (47, 47, 47, 47)
    refused = {n: result for n, result in enumerate(results) if isinstance(result, dict)}
    assert sorted(refused) == [7, 21, 42]
    assert refused[7] == {"operations.0.depends_on": ["Unknown operation 'nope'."]}
    assert list(refused[21]) == ["operations.0.type"]
    assert "'render3d'" in refused[21]["operations.0.type"][0]
    assert list(refused[42]) == ["customer"]
    created = [result for result in results if isinstance(result, Agenda)]
    assert {agenda.pk for agenda in created} == set(Agenda.objects.values_list("pk", flat=True))
    assert [agenda.link_id for agenda in created] == [
        f"n{n}" for n in range(50) if n not in refused
    ]
    assert all(agenda.progress.state == "ready" for agenda in created)


def test_the_number_of_queries_does_not_grow_with_the_batch(
    submitter, insight, transcode_insight, submit_agenda
):
    submit_agenda(submitter, idempotency_key="seen")

    def batch(n: int, tag: str) -> list[dict]:
        return [
            {
                "operations": ONE_STEP if i % 3 else [{"name": "t", "type": "transcode"}],
                "idempotency_key": "seen" if i == 0 else f"{tag}-{i % (n // 2)}",
                "do_not_run": i % 5 == 0,
                "customer": submitter.customer if i % 2 else None,
            }
            for i in range(n)
        ]

    with CaptureQueriesContext(connection) as small:
        agendas_submit_many(principal=submitter.user, items=batch(10, "small"))
    with CaptureQueriesContext(connection) as large:
        results = agendas_submit_many(principal=submitter.user, items=batch(200, "large"))

    assert len(large) == len(small)
    # The caller's customer, the earlier keys, the insight candidates, 4 INSERTs, the lanes'
    # lock and upsert, the audit event and the savepoints of the call and of the keyed write
    # (the memberships are cached on the user).
    assert len(small) <= 14, [query["sql"][:70] for query in small.captured_queries]
    assert Agenda.objects.filter(idempotency_key__startswith="large-").count() == 100
    assert all(isinstance(result, Agenda) for result in results)


def test_each_item_is_written_as_agenda_submit_writes_it(submitter, insight, submit_agenda):
    later = timezone.now() + timedelta(minutes=5)
    earlier = timezone.now() - timedelta(minutes=5)
    options = [
        {"link_id": "plain", "priority": 8, "external_id": "e-1", "params": {"k": "v"}},
        {"link_id": "held", "do_not_run": True, "max_attempts": 7},
        {"link_id": "later", "run_after": later, "retry_delay_seconds": 3},
        {"link_id": "due", "run_after": earlier, "callback_url": "https://example.com/cb"},
    ]
    one_by_one = [submit_agenda(submitter, cid="cid-x", **option) for option in options]
    many = agendas_submit_many(
        principal=submitter.user,
        items=[{"operations": one_by_one[0].operations, **option} for option in options],
        cid="cid-x",
    )

    def written(agenda: Agenda) -> tuple:
        progress = AgendaProgress.objects.get(agenda=agenda)
        ready = ReadyAgenda.objects.filter(agenda=agenda).first()
        return (
            agenda.customer_id,
            agenda.insight_id,
            agenda.cid,
            agenda.link_id,
            agenda.priority,
            agenda.max_attempts,
            agenda.retry_delay_seconds,
            agenda.callback_url,
            agenda.external_id,
            agenda.params,
            (progress.state, progress.message, progress.run_after, progress.do_not_run),
            (progress.customer_id, progress.link_id, progress.cid),
            list(
                progress.operations.order_by("position").values_list(
                    "position", "name", "type", "state", "customer_id", "link_id", "cid"
                )
            ),
            ready and (ready.insight_id, ready.customer_id, ready.priority),
        )

    fresh = Agenda.objects.in_bulk([agenda.pk for agenda in many])
    assert [written(fresh[agenda.pk]) for agenda in many] == [
        written(agenda) for agenda in one_by_one
    ]
    assert [agenda.progress.state for agenda in many] == ["ready", "pending", "pending", "ready"]


def test_ready_rows_keep_the_batch_order_and_one_nudge_covers_every_insight(
    submitter, insight, transcode_insight, monkeypatch
):
    nudged = []
    monkeypatch.setattr(
        machine, "fill_nudge", lambda ids: nudged.append(sorted({str(pk) for pk in ids}))
    )
    items = [
        {"operations": ONE_STEP if n % 2 else [{"name": "t", "type": "transcode"}]}
        for n in range(6)
    ]

    results = agendas_submit_many(principal=submitter.user, items=items)

    added = dict(ReadyAgenda.objects.values_list("agenda_id", "added_at"))
    order = [added[agenda.pk] for agenda in results]
    assert order == sorted(order) and len(set(order)) == 6
    assert nudged == [sorted([str(insight.pk), str(transcode_insight.pk)])]


def test_an_earlier_idempotency_key_returns_that_agenda_even_if_the_item_is_bad(
    submitter, insight, submit_agenda
):
    earlier = submit_agenda(submitter, idempotency_key="k-1", do_not_run=True)

    results = agendas_submit_many(
        principal=submitter.user,
        items=[
            {"operations": ONE_STEP, "idempotency_key": "k-1"},
            {"operations": [], "idempotency_key": "k-1"},
            {"operations": ONE_STEP, "idempotency_key": "k-2"},
        ],
    )

    assert [result.pk for result in results[:2]] == [earlier.pk, earlier.pk]
    assert results[0].progress.state == "pending"
    assert Agenda.objects.count() == 2
    assert Agenda.objects.get(idempotency_key="k-2").pk == results[2].pk


def test_a_key_repeated_in_the_batch_gives_one_agenda_unless_the_first_was_refused(
    submitter, insight
):
    results = agendas_submit_many(
        principal=submitter.user,
        items=[
            {"operations": ONE_STEP, "idempotency_key": "dup", "link_id": "first"},
            {"operations": ONE_STEP, "idempotency_key": "dup", "link_id": "second"},
            {"operations": [], "idempotency_key": "late"},
            {"operations": ONE_STEP, "idempotency_key": "late", "link_id": "after-refusal"},
        ],
    )

    assert results[0] is results[1]
    assert list(results[2]) == ["operations"]
    assert Agenda.objects.get(idempotency_key="dup").link_id == "first"
    assert Agenda.objects.get(idempotency_key="late").link_id == "after-refusal"
    assert _row_counts() == (2, 2, 2, 2)


def test_the_same_key_for_two_customers_gives_two_agendas(
    staff_user, customer, other_customer, insight
):
    results = agendas_submit_many(
        principal=staff_user,
        items=[
            {"operations": ONE_STEP, "customer": customer, "idempotency_key": "same"},
            {"operations": ONE_STEP, "customer": other_customer, "idempotency_key": "same"},
            {"operations": ONE_STEP},
        ],
    )

    assert [results[0].customer_id, results[1].customer_id] == [customer.pk, other_customer.pk]
    assert list(results[2]) == ["customer"]  # staff must name the customer
    assert Agenda.objects.count() == 2


def test_a_key_taken_by_a_concurrent_submit_returns_that_agenda(
    submitter, insight, submit_agenda, monkeypatch
):
    racer = submit_agenda(submitter, idempotency_key="race")
    real = services._earlier_by_key
    calls = []

    def blind_first_time(keys):
        calls.append(keys)
        return {} if len(calls) == 1 else real(keys)

    monkeypatch.setattr(services, "_earlier_by_key", blind_first_time)

    results = agendas_submit_many(
        principal=submitter.user,
        items=[
            {"operations": ONE_STEP, "link_id": "free"},
            {"operations": ONE_STEP, "idempotency_key": "race"},
        ],
    )

    assert len(calls) == 2
    assert results[1].pk == racer.pk
    assert Agenda.objects.get(link_id="free").pk == results[0].pk
    assert _row_counts() == (2, 2, 3, 2)


def test_an_out_of_range_option_fails_its_item_only(submitter, insight):
    results = agendas_submit_many(
        principal=submitter.user,
        items=[{"operations": ONE_STEP}, {"operations": ONE_STEP, "priority": 99}],
    )

    assert isinstance(results[0], Agenda)
    assert results[1] == {"priority": ["Must be between 0 and 9."]}
    assert _row_counts() == (1, 1, 1, 1)


def test_a_viewer_may_not_submit_in_bulk(viewer, insight):
    with pytest.raises(PermissionDenied):
        agendas_submit_many(principal=viewer.user, items=[{"operations": ONE_STEP}])

    assert _row_counts() == (0, 0, 0, 0)


def test_an_unknown_item_key_is_a_type_error_like_a_call(submitter, insight):
    with pytest.raises(TypeError):
        agendas_submit_many(principal=submitter.user, items=[{"operations": ONE_STEP, "x": 1}])
    with pytest.raises(TypeError):
        agenda_submit(principal=submitter.user, operations=ONE_STEP, x=1)
