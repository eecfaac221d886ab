"""DATABASE_PREPARED_STATEMENTS=hot (core/prepared_statements.py): a pull's and a report's
statements are prepared on the connection from their sixth run; a list's and a fill's never
are, however often they run (a generic plan is what loses where the best plan depends on the
values).

The connection is opened as `hot` configures it (server-side binding, nothing prepared outside
the hot path); read from PostgreSQL's own `pg_prepared_statements` of that connection.
"""

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from core.prepared_statements import generic_plan, hot_path_statements
from scheduling.fill import insight_fill
from scheduling.models import ReadyAgenda
from tests.scheduling.conftest import clone_ready_agendas

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's statements"),
]


@pytest.fixture(autouse=True)
def _hot_path_only(settings, monkeypatch):
    settings.POP_PREPARED_STATEMENTS = "hot"
    settings.POP_FILL_NUDGE = "off"
    wrapper = connections[DEFAULT_DB_ALIAS]
    wrapper.close()
    hot = {**wrapper.settings_dict}
    hot["OPTIONS"] = {**hot.get("OPTIONS", {}), "server_side_binding": True}
    hot["OPTIONS"]["prepare_threshold"] = None
    monkeypatch.setattr(wrapper, "settings_dict", hot)
    yield
    wrapper.close()  # the next test connects as configured again


def _prepared() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return {row[0] for row in cursor.fetchall()}


def _queue(insight, submitter, submit_agenda, *, agendas: int, queue_size: int) -> None:
    """Submit `agendas` and fill the insight's queue, of `queue_size`, with them."""
    insight.queue_size = queue_size
    insight.save(update_fields=["queue_size"])
    for _ in range(agendas):
        submit_agenda(submitter)
    insight_fill(insight_id=insight.pk)


def _pull_one(client, insight) -> list[dict]:
    pulled = client.post(
        f"/api/v1/insights/{insight.pk}/pull/",
        {"count": 1, "worker": "w1", "wait_seconds": 0},
        format="json",
    ).json()["agendas"]
    assert len(pulled) == 1
    return pulled


def _threshold():
    connection.ensure_connection()
    return connection.connection.prepare_threshold


def test_pulls_and_reports_prepare_their_statements_from_the_sixth_run(
    insight, worker, submitter, submit_agenda, api_client_for
):
    _queue(insight, submitter, submit_agenda, agendas=8, queue_size=20)
    client = api_client_for(worker)
    before = _prepared()

    for _ in range(7):
        pulled = _pull_one(client, insight)
        execution = pulled[0]["execution"]
        answer = client.post(
            "/api/v1/executions/report/",
            {
                "reports": [
                    {
                        "execution": execution["id"],
                        "lease_token": execution["lease_token"],
                        "state": "succeeded",
                    }
                ]
            },
            format="json",
        )
        assert answer.json()["results"][0]["ok"] is True

    new = _prepared() - before
    assert any("SKIP LOCKED" in statement for statement in new), new  # the claim
    assert any('UPDATE "agendas_agendaprogress"' in statement for statement in new), new  # report
    assert _threshold() is None  # and nothing after the request is prepared


def test_a_list_prepares_nothing_however_often_it_runs(submitter, submit_agenda, api_client_for):
    submit_agenda(submitter)
    client = api_client_for(submitter)
    before = _prepared()

    for _ in range(10):
        response = client.get("/api/v1/agendas/?state=ready")
        assert response.status_code == 200

    assert _prepared() == before


def test_the_hot_path_restores_the_connection_when_it_fails():
    assert _threshold() is None

    with pytest.raises(RuntimeError), hot_path_statements():
        assert _threshold() == 5
        raise RuntimeError

    assert _threshold() is None


def test_off_prepares_nothing_even_on_the_hot_path(settings):
    settings.POP_PREPARED_STATEMENTS = "off"

    with hot_path_statements():
        assert _threshold() is None


def test_a_fill_prepares_nothing_even_inside_the_hot_path(insight, submitter, submit_agenda):
    """A fill's best plan depends on which customers have ready work: planned every time."""
    for _ in range(8):
        submit_agenda(submitter)
    before = _prepared()

    with hot_path_statements():
        for _ in range(8):
            insight_fill(insight_id=insight.pk)
        assert _threshold() == 5  # the hot path goes on after the fill

    assert _prepared() == before


def _claim_plans() -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%SKIP LOCKED%%'"
        )
        [plans] = cursor.fetchall()
        return plans


def _plan_cache_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('plan_cache_mode')")
        return cursor.fetchone()[0]


def test_the_claim_is_never_planned_with_its_values_once_prepared(
    insight, worker, submitter, submit_agenda, api_client_for
):
    """Left to choose, PostgreSQL planned the claim with its values at about half of its runs
    over HTTP (1.1 ms of planning each): prepared, it keeps one generic plan."""
    _queue(insight, submitter, submit_agenda, agendas=12, queue_size=20)
    client = api_client_for(worker)

    for _ in range(12):
        _pull_one(client, insight)

    generic, custom = _claim_plans()
    assert custom == 0  # PostgreSQL's own choice plans the first five runs with their values
    assert generic == 12 - 5  # every run once psycopg prepared it (the sixth on)
    assert _plan_cache_mode() == "auto"  # the setting ended with the claim's transaction


def _ready_rows_scanned() -> int:
    """Rows read from the ready table by sequential scans, this server's count so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # flushed as the session idles
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = %s",
            [ReadyAgenda._meta.db_table],
        )
        return cursor.fetchone()[0]


def test_the_claims_generic_plan_reads_no_other_insights_backlog(
    insight, transcode_insight, worker, submitter, submit_agenda, api_client_for
):
    """The claim asks whether its insight has ready work by the ready set's index, in its
    generic plan (planned once for every insight) as in a custom one. Asked as `EXISTS`,
    PostgreSQL read the whole ready set when another insight held nearly all of it and this
    one none: 20,001 rows at every one of these pulls."""
    backlog = submit_agenda(submitter, operations=[{"name": "t", "type": "transcode"}])
    assert backlog.insight_id == transcode_insight.pk
    clone_ready_agendas(backlog, 20_000)
    _queue(insight, submitter, submit_agenda, agendas=12, queue_size=12)  # no ready work left
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {ReadyAgenda._meta.db_table}")
    client = api_client_for(worker)
    pulls = []
    for _ in range(12):
        before = _ready_rows_scanned()
        _pull_one(client, insight)
        pulls.append(_ready_rows_scanned() - before)

    assert _claim_plans() == (12 - 5, 0)  # the last seven ran the generic plan
    assert pulls == [0] * 12, pulls


def test_the_generic_plan_setting_covers_its_block_only():
    with hot_path_statements(), transaction.atomic():
        with generic_plan():
            assert _plan_cache_mode() == "force_generic_plan"
        assert _plan_cache_mode() == "auto"  # a statement after it is planned as before

        with generic_plan(transaction_ends_after=True):
            assert _plan_cache_mode() == "force_generic_plan"
        assert _plan_cache_mode() == "force_generic_plan"  # until the transaction ends…
    assert _plan_cache_mode() == "auto"  # …and no longer


def test_the_generic_plan_setting_is_not_made_where_nothing_is_prepared(settings):
    with transaction.atomic(), generic_plan():  # outside the hot path: planned with values
        assert _plan_cache_mode() == "auto"

    settings.POP_PREPARED_STATEMENTS = "off"
    with hot_path_statements(), transaction.atomic(), generic_plan():
        assert _plan_cache_mode() == "auto"


def test_the_generic_plan_setting_ends_with_a_failed_block():
    with pytest.raises(RuntimeError), hot_path_statements(), transaction.atomic():
        with generic_plan():
            raise RuntimeError

    assert _plan_cache_mode() == "auto"
