"""The history phase's world (bench/history.py): customers, users, templates, schedules and a
year of history of one size, built in its own database with set-based SQL.

2,000 customers (data TTL 365 days), 3 big ones owning 60% of the agendas; each agenda with its
progress, 3 operations and 1 execution (1 in 10 retried: 2), created over the past year and
terminal (85% succeeded, 12% failed, 3% aborted); a tenth more, as old as 366–396 days, waits
for the reap. One agenda in 10 has a label, one in 20 a (global) template, one in 10 an audit
event, one in 10 a callback delivery; every agenda has an external id and a link id shared by
100 agendas. A small ready backlog (the 3 big and 100 small customers) feeds the pools and the
overview. The big customer measured owns a fifth of the history at each size; the small one
owns SMALL_OWN agendas at both, so its figures compare the same pages over 100 times more
history of others.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import psycopg

from bench.common import (
    bulk_insert_ready,
    close_django_connections,
    dsn,
    make_world,
    say,
    vacuum_analyze,
)

CUSTOMERS = 2_000
BIG = 3  # owning 60% of the agendas
EXPIRED_SHARE = 0.1  # on top of the year: agendas 366-396 days old, reaped at the end
# The small customer measured owns this many agendas at every size, one in each block of the
# history at a position that varies (so its states, labels and callbacks vary as others'): its
# pages show the same rows at 10k and at 1M, so a figure that grows measures the history of
# others, which it must not touch.
SMALL_OWN = 220
CHUNK = 100_000
BUILDERS = 2  # connections building the history at once
# The tables build_history writes, whose indexes and keys are built after the rows.
BUILT_TABLES = (
    "agendas_agenda",
    "agendas_agendaprogress",
    "agendas_operationprogress",
    "agendas_execution",
    "audit_auditevent",
    "scheduling_callbackdelivery",
)
TABLES = (
    *BUILT_TABLES,
    "scheduling_readyagenda",
    "scheduling_customerlane",
    "resourcepools_customer",
)


def build_history(
    dbname: str, *, total: int, insight_id: str, template_id: str, big, small, measured: str
):
    """`total` terminal agendas over the past year plus EXPIRED_SHARE more beyond it, with
    every row under them (see the module docstring); set-based, CHUNK agendas a transaction.
    The `measured` small customer gets SMALL_OWN of them whatever the size."""
    expired = int(total * EXPIRED_SHARE)
    everything = total + expired
    every = everything // SMALL_OWN
    shape = {
        "big": big,
        "small": small,
        "n_small": len(small),
        "measured": measured,
        "every": every,
        "expired": max(expired, 1),
        "everything": everything,
        "total": total,
        "insight_id": insight_id,
        "template_id": template_id,
    }
    with psycopg.connect(dsn(dbname)) as conn:
        rebuild = drop_indexes(conn, BUILT_TABLES)
    # Chunks are independent and PostgreSQL does the work: BUILDERS connections, each its
    # own chunks (one backend per core), then the indexes shared out the same way.
    chunks = [(first, min(first + CHUNK, everything) - 1) for first in range(0, everything, CHUNK)]
    with ThreadPoolExecutor(BUILDERS) as pool:
        list(pool.map(lambda n: _build_chunks(dbname, chunks[n::BUILDERS], shape), range(BUILDERS)))
    rebuild_indexes(dbname, rebuild)
    return everything


def rebuild_indexes(dbname: str, statements: list[str]) -> None:
    """Run `drop_indexes`'s statements, shared out over BUILDERS connections."""
    with ThreadPoolExecutor(BUILDERS) as pool:
        list(pool.map(lambda n: _run_each(dbname, statements[n::BUILDERS]), range(BUILDERS)))


def _session(dbname: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn(dbname))
    # The rows are consistent by construction: no foreign-key trigger checks them one by one
    # (the bench runs as the superuser), and the indexes and keys are built once at the end
    # rather than kept up row by row — together a third of the build's time.
    conn.execute("SET session_replication_role = replica")
    conn.execute("SET maintenance_work_mem = '256MB'")
    return conn


def _run_each(dbname: str, statements: list[str]) -> None:
    # Each committed alone: adding a key locks its table whole, so a connection must not keep
    # one table's lock while it waits for another's.
    with _session(dbname) as conn:
        for statement in statements:
            conn.execute(statement)
            conn.commit()


def _build_chunks(dbname: str, chunks: list[tuple[int, int]], shape: dict) -> None:
    with _session(dbname) as conn:
        for first, last in chunks:
            _build_chunk(conn, first, last, shape)


def _build_chunk(conn: psycopg.Connection, first: int, last: int, shape: dict) -> None:
    """Agendas `first`..`last` (of the build's numbering) and their rows, in one transaction."""
    insight_id, template_id = shape["insight_id"], shape["template_id"]
    conn.execute(
        """
        CREATE TEMP TABLE bench_new ON COMMIT DROP AS
        SELECT *, created + (g %% 300 + 1) * interval '1 second' AS done FROM (
        SELECT g, gen_random_uuid() AS id, gen_random_uuid() AS progress_id,
            gen_random_uuid() AS execution_id, gen_random_uuid() AS first_execution_id,
            CASE WHEN g %% %(every)s = (g / %(every)s) %% %(every)s THEN %(measured)s::uuid
                 WHEN g %% 10 < 6 THEN (%(big)s::uuid[])[1 + g %% 3]
                 ELSE (%(small)s::uuid[])[1 + g %% %(n_small)s] END AS customer_id,
            now() - CASE
                WHEN g < %(expired)s
                THEN interval '366 days' + (%(expired)s - g) * interval '30 days'
                     / %(expired)s
                ELSE (%(everything)s - 1 - g) * interval '365 days' / %(total)s
            END AS created,
            CASE WHEN g %% 100 < 85 THEN 'succeeded' WHEN g %% 100 < 97 THEN 'failed'
                 ELSE 'aborted' END AS state,
            (g / 10) %% 10 = 3 AS retried
        FROM generate_series(%(first)s::int, %(last)s::int) g
        ) rows
        """,
        shape | {"first": first, "last": last},
    )
    conn.execute(
        """
        INSERT INTO agendas_agenda (id, link_id, cid, created_at, updated_at, customer_id,
            insight_id, template_id, operations, params, priority, max_attempts,
            retry_delay_seconds, callback_url, external_id, idempotency_key, labels)
        SELECT id, 'link-' || (g / 100), 'bench', created, done, customer_id, %s,
            CASE WHEN g %% 20 = 0 THEN %s::uuid END,
            '[{"name": "a", "type": "noop"}, {"name": "b", "type": "noop"},
              {"name": "c", "type": "noop"}]'::jsonb,
            '{}'::jsonb, 5, 3, 0, '', 'ext-' || g, '',
            CASE WHEN g %% 10 = 0 THEN jsonb_build_object('batch', (g / 1000)::text)
                 ELSE '{}'::jsonb END
        FROM bench_new
        """,
        [insight_id, template_id],
    )
    conn.execute(
        """
        INSERT INTO agendas_execution (id, agenda_id, customer_id, link_id, cid, number,
            insight_id, worker, pull_request, lease_token, lease_expires_at, started_at,
            last_report_at, ended_at, outcome, diagnostics, created_at, updated_at)
        SELECT first_execution_id, id, customer_id, 'link-' || (g / 100), 'bench', 1,
            %s::uuid, 'w1', '', gen_random_uuid(), created, created, created, created,
            'failed', '[]'::jsonb, created, created
        FROM bench_new WHERE retried
        UNION ALL
        SELECT execution_id, id, customer_id, 'link-' || (g / 100), 'bench',
            CASE WHEN retried THEN 2 ELSE 1 END, %s::uuid, 'w1', '', gen_random_uuid(),
            done, created, done, done, state, '[]'::jsonb, created, done
        FROM bench_new
        """,
        [insight_id, insight_id],
    )
    conn.execute(
        """
        INSERT INTO agendas_agendaprogress (id, link_id, cid, created_at, updated_at,
            agenda_id, customer_id, state, message, percent_complete, attempts_completed,
            attempts_started, do_not_run, abort_requested, pause_requested, pause_now,
            diagnostics, started_at, completed_at, current_execution_id)
        SELECT progress_id, 'link-' || (g / 100), 'bench', created, done, id,
            customer_id, state, '', 100, CASE WHEN retried THEN 2 ELSE 1 END,
            CASE WHEN retried THEN 2 ELSE 1 END, false, false, false, false,
            '[]'::jsonb, created, done, execution_id
        FROM bench_new
        """
    )
    conn.execute(
        """
        INSERT INTO agendas_operationprogress (id, agenda_progress_id, customer_id,
            link_id, cid, position, name, type, state, message, percent_complete,
            attempt_count, result, params, diagnostics, is_generated, started_at,
            completed_at, created_at, updated_at)
        SELECT gen_random_uuid(), progress_id, customer_id, 'link-' || (g / 100),
            'bench', o.position, o.name, 'noop',
            CASE WHEN state = 'succeeded' OR o.position = 0 THEN 'succeeded'
                 WHEN o.position = 1 THEN state ELSE 'waiting' END,
            '', 100, 1, '1'::jsonb, '{}'::jsonb, '[]'::jsonb, false, created, done,
            created, done
        FROM bench_new, (VALUES (0, 'a'), (1, 'b'), (2, 'c')) AS o(position, name)
        """
    )
    conn.execute(
        """
        INSERT INTO audit_auditevent (id, created_at, customer_id, user_id, username,
            token_name, action, target_type, target_id, detail, cid)
        SELECT gen_random_uuid(), done, customer_id, NULL, 'bench', '', 'agenda.rerun',
            'agendas.agenda', id::text, '{}'::jsonb, 'bench'
        FROM bench_new WHERE g % 10 = 5
        """
    )
    conn.execute(
        """
        INSERT INTO scheduling_callbackdelivery (agenda_id, customer_id, link_id, cid,
            url, event, body, attempts, next_attempt_at, status, last_status_code,
            last_error, delivered_at, created_at, updated_at)
        SELECT id, customer_id, 'link-' || (g / 100), 'bench',
            'https://callbacks.example/pop', state, '{}'::jsonb, 1, done, 'delivered',
            200, '', done, done, done
        FROM bench_new WHERE g % 10 = 1
        """
    )
    conn.commit()


def drop_indexes(conn, tables) -> list[str]:
    """Drop the indexes of `tables` — their primary keys and unique constraints too, unless a
    foreign key relies on one — and return the statements that build them again as the catalogue
    defines them (keys first). Rows inserted into a random-UUID primary key larger than
    shared_buffers cost a page read per row; built after the rows, the same index is a sort."""
    keys = conn.execute(
        """
        SELECT k.conname, c.relname, pg_get_constraintdef(k.oid) FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        WHERE c.relname = ANY(%s) AND k.contype IN ('p', 'u')
          AND NOT EXISTS (
            SELECT 1 FROM pg_constraint f WHERE f.contype = 'f' AND f.conindid = k.conindid)
        """,
        [list(tables)],
    ).fetchall()
    rows = conn.execute(
        """
        SELECT i.indexname, i.indexdef FROM pg_indexes i
        JOIN pg_class c ON c.relname = i.indexname AND c.relkind = 'i'
        WHERE i.schemaname = 'public' AND i.tablename = ANY(%s)
          AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = c.oid)
        """,
        [list(tables)],
    ).fetchall()
    for name, table, _ in keys:
        conn.execute(f'ALTER TABLE "{table}" DROP CONSTRAINT "{name}"')
    for name, _ in rows:
        conn.execute(f'DROP INDEX "{name}"')
    conn.commit()
    return [
        *(
            f'ALTER TABLE "{table}" ADD CONSTRAINT "{name}" {definition}'
            for name, table, definition in keys
        ),
        *(definition for _, definition in rows),
    ]


def build_world(dbname: str, total: int) -> dict:
    """The customers, users, templates, schedules and history of one size; returns the ids
    the measuring needs (plain data)."""
    from django.contrib.auth import get_user_model

    from agendas.models import Agenda, AgendaTemplate
    from bench.fill_tenants import add_customers
    from resourcepools.models import Customer, Insight, Membership
    from scheduling.models import Schedule

    world = make_world(customers=0)
    pool_id = Insight.objects.get(pk=world.insight_id).resource_pool_id
    customer_ids = add_customers(pool_id, 0, CUSTOMERS)
    Customer.objects.update(data_ttl_days=365)
    big, small = customer_ids[:BIG], customer_ids[BIG:]
    User = get_user_model()
    User.objects.filter(pk=world.staff_user_id).update(is_superuser=True)
    users = {"staff": world.staff_user_id}
    for who, customer_id in (("big", big[0]), ("small", small[5])):
        member = User.objects.create_user(username=f"history-{who}", password="x" * 12)
        Membership.objects.create(user=member, customer_id=customer_id, role="admin")
        users[who] = member.pk
    operations = {"operations": [{"name": "a", "type": "noop"}]}
    template = AgendaTemplate.objects.create(
        customer_id=world.owner_id, name="history-global", agenda=operations, is_global=True
    )
    templates = AgendaTemplate.objects.bulk_create(
        AgendaTemplate(customer_id=customer_id, name=f"history-{n}", agenda=operations)
        for n, customer_id in enumerate(big * 10 + small[:100])
    )
    Schedule.objects.bulk_create(
        Schedule(customer_id=t.customer_id, name=f"hourly-{n}", template=t, cron="0 * * * *")
        for n, t in enumerate(templates)
    )
    close_django_connections()
    started = time.perf_counter()
    built = build_history(
        dbname,
        total=total,
        insight_id=world.insight_id,
        template_id=str(template.pk),
        big=big,
        small=small[:5] + small[6:],
        measured=small[5],
    )
    bulk_insert_ready(
        dbname,
        insight_id=world.insight_id,
        customer_ids=big + small[:100],
        per_customer=max(1, total // 10_000),
    )
    vacuum_analyze(dbname, TABLES)
    with psycopg.connect(dsn(dbname), autocommit=True) as conn:
        # The build's gigabytes of dirty pages are written now, not by the checkpointer while
        # the requests are timed (a small customer's 10 ms page took 47–72 ms in one run).
        conn.execute("CHECKPOINT")
    seconds = time.perf_counter() - started
    say(f"  built {built:,} agendas and what hangs off them in {seconds:.0f} s")
    detail = {}
    for who, customer_id in (("staff", big[0]), ("big", big[0]), ("small", small[5])):
        recent = Agenda.objects.filter(customer_id=customer_id, external_id__startswith="ext-")
        detail[who] = str(list(recent.order_by("-created_at").values_list("pk", flat=True)[:8])[-1])
    return {
        "world": world.to_json(),
        "users": users,
        "big": big[0],
        "small": small[5],
        "template": str(template.pk),
        "insight": world.insight_id,
        "customer_ids": customer_ids,
        "detail": detail,
        "build_s": seconds,
        "agendas": built,
    }
