"""Shared plumbing for the benchmark phases: databases, Django set-up, the POP world, maths.

Every phase runs in its own PostgreSQL database whose name starts with `pop_bench`, created
here and dropped when the phase ends. Nothing in this package is imported by POP itself.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
PG_HOST = os.environ.get("POP_BENCH_PGHOST", "127.0.0.1")
PG_PORT = int(os.environ.get("POP_BENCH_PGPORT", "5432"))
PG_USER = os.environ.get("POP_BENCH_PGUSER", "postgres")
ADMIN_DB = "postgres"
DB_PREFIX = "pop_bench"
TEMPLATE_DB = f"{DB_PREFIX}_template"
SECRET_KEY = "pop-bench-secret-key-not-for-production"
# The tables that churn a row in and out per agenda (and those a phase grows in bulk):
# vacuumed and analysed before every phase.
HOT_TABLES = (
    "scheduling_readyagenda",
    "scheduling_queuedagenda",
    "scheduling_insightscheduleinfo",
    "scheduling_customerlane",
    "resourcepools_customer",
    "agendas_agendaprogress",
    "agendas_operationprogress",
    "agendas_execution",
    "agendas_agenda",
    "django_q_ormq",
)
NOOP_OPERATIONS = [{"name": "noop", "type": "noop", "payload": {}}]


# --- databases ------------------------------------------------------------------------------


def dsn(dbname: str) -> str:
    return f"host={PG_HOST} port={PG_PORT} user={PG_USER} dbname={dbname}"


def db_url(dbname: str) -> str:
    return f"postgres://{PG_USER}@{PG_HOST}:{PG_PORT}/{dbname}"


def admin_connect() -> psycopg.Connection:
    return psycopg.connect(dsn(ADMIN_DB), autocommit=True)


def drop_database(name: str) -> None:
    assert name.startswith(DB_PREFIX), name
    with admin_connect() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def create_database(name: str, *, template: str | None = None) -> None:
    """(Re)create `name`, empty or as a copy of `template` (which must have no connections).
    The migrated template is made first when a phase runs on its own."""
    assert name.startswith(DB_PREFIX), name
    if template == TEMPLATE_DB and not database_exists(TEMPLATE_DB):
        migrate_template()
    drop_database(name)
    with admin_connect() as conn:
        if template:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                [template],
            )
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        else:
            conn.execute(f'CREATE DATABASE "{name}"')


def database_exists(name: str) -> bool:
    with admin_connect() as conn:
        return (
            conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            is not None
        )


def migrate_template(name: str = TEMPLATE_DB) -> float:
    """Create `name` and run POP's migrations into it; return the seconds it took."""
    started = time.perf_counter()
    create_database(name)
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=pop_env(name),
        check=True,
    )
    return time.perf_counter() - started


def vacuum_analyze(dbname: str, tables: Iterable[str] = HOT_TABLES) -> None:
    """VACUUM (ANALYZE) the hot tables: autovacuum is off here and dead tuples slow claims."""
    with psycopg.connect(dsn(dbname), autocommit=True) as conn:
        present = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        }
        for table in tables:
            if table in present:
                conn.execute(f'VACUUM (ANALYZE) "{table}"')


@contextmanager
def bench_database(name: str, *, template: str | None = TEMPLATE_DB, keep: bool = False):
    """A database for one phase: created (from the migrated template) and dropped afterwards."""
    create_database(name, template=template)
    try:
        yield name
    finally:
        if not keep:
            drop_database(name)


# --- Django ---------------------------------------------------------------------------------


def pop_env(dbname: str, **extra: str) -> dict[str, str]:
    """The environment a POP process (web, cluster, in-process bench) runs with."""
    env = {
        **os.environ,
        "DATABASE_URL": db_url(dbname),
        "SECRET_KEY": SECRET_KEY,
        "DEBUG": "false",
        "DJANGO_SETTINGS_MODULE": "popsite.settings",
        "LOG_LEVEL": "WARNING",
        "POP_Q_LOG_LEVEL": "ERROR",
        "POP_THROTTLE_USER": "100000000/minute",
        "POP_THROTTLE_ANON": "100000000/minute",
        "PYTHONPATH": str(ROOT),
    }
    env.update(extra)
    return env


def django_setup(dbname: str, **extra: str) -> None:
    """Configure this process for POP on `dbname` (call before importing POP modules)."""
    os.environ.update(pop_env(dbname, **extra))
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def close_django_connections() -> None:
    """Before forking: children must open their own connections."""
    from django.db import connections

    connections.close_all()


@dataclass
class World:
    """Ids of the reference rows a phase works with (plain data: survives a fork or JSON)."""

    insight_id: str
    owner_id: str
    worker_user_id: int
    worker_token: str
    staff_user_id: int = 0
    customers: list[str] = field(default_factory=list)  # customer ids
    submitters: dict[str, int] = field(default_factory=dict)  # customer id -> user id
    tokens: dict[str, str] = field(default_factory=dict)  # customer id -> API token

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> World:
        return cls(**json.loads(text))


def make_world(
    *,
    customers: int = 1,
    queue_size: int = 10,
    algorithm: str = "round_robin",
    weights: Sequence[int] | None = None,
    lease_seconds: int = 600,
    slug_prefix: str = "bench",
    operation_types: Sequence[str] = ("noop",),
) -> World:
    """A pool owner with a worker, one insight for `noop` operations, and `customers`
    submitting customers (each with a submitter user and an API token)."""
    from django.contrib.auth import get_user_model

    from accounts.services import token_issue
    from core.principals import SYSTEM
    from resourcepools.models import Customer, Insight, Membership, ResourcePool

    User = get_user_model()
    owner = Customer.objects.create(name="Bench farm", slug=f"{slug_prefix}-farm")
    pool = ResourcePool.objects.create(name=f"{slug_prefix}-pool", owner=owner)
    owner.resource_pool = pool
    owner.save(update_fields=["resource_pool"])
    insight = Insight.objects.create(
        resource_pool=pool,
        name=f"{slug_prefix}-noop",
        queue_size=queue_size,
        scheduling_algorithm=algorithm,
        mappers={"operation_type": list(operation_types)},
        is_global=True,
        lease_seconds=lease_seconds,
    )
    worker = User.objects.create_user(username=f"{slug_prefix}-worker", password="bench-password")
    Membership.objects.create(user=worker, customer=owner, role=Membership.Role.WORKER)
    staff = User.objects.create_user(
        username=f"{slug_prefix}-staff", password="bench-password", is_staff=True
    )
    world = World(
        insight_id=str(insight.pk),
        owner_id=str(owner.pk),
        worker_user_id=worker.pk,
        worker_token=token_issue(principal=SYSTEM, user=worker, name="bench-worker").key,
        staff_user_id=staff.pk,
    )
    for number in range(customers):
        weight = weights[number] if weights else 1
        customer = Customer.objects.create(
            name=f"Bench customer {number}",
            slug=f"{slug_prefix}-c{number}",
            resource_pool=pool,
            weight=weight,
        )
        user = User.objects.create_user(username=f"{slug_prefix}-c{number}", password="x" * 12)
        Membership.objects.create(user=user, customer=customer, role=Membership.Role.SUBMITTER)
        world.customers.append(str(customer.pk))
        world.submitters[str(customer.pk)] = user.pk
        world.tokens[str(customer.pk)] = token_issue(principal=SYSTEM, user=user, name="bench").key
    return world


def user(user_id: int):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(pk=user_id)


def submit_bulk(world: World, customer_id: str, count: int, *, batch: int = 100) -> float:
    """Submit `count` agendas for one customer through agendas_submit_many; return seconds."""
    from agendas.services import agendas_submit_many
    from resourcepools.models import Customer

    principal = user(world.submitters[customer_id])
    customer = Customer.objects.get(pk=customer_id)
    started = time.perf_counter()
    left = count
    while left > 0:
        size = min(batch, left)
        results = agendas_submit_many(
            principal=principal,
            items=[{"operations": NOOP_OPERATIONS, "customer": customer} for _ in range(size)],
        )
        bad = [result for result in results if isinstance(result, dict)]
        if bad:
            raise RuntimeError(f"bulk submit refused items: {bad[:3]}")
        left -= size
    return time.perf_counter() - started


def bulk_insert_ready(
    dbname: str,
    *,
    insight_id: str,
    customer_ids: Sequence[str],
    per_customer: int,
    state: str = "ready",
    added_at_sql: str = "now() - interval '1 hour' + (g * interval '1 microsecond')",
    ready_only: bool = False,
) -> float:
    """Set-based: `per_customer` ready agendas for each customer (Agenda, AgendaProgress,
    OperationProgress, ReadyAgenda rows exactly as a submit writes them); return seconds.

    Only a benchmark does this: it builds big backlogs in seconds instead of minutes. With
    `ready_only`, only the ReadyAgenda rows are written, with foreign-key checks off (their
    agendas do not exist): enough for a fill that never picks them, and ~20× faster."""
    started = time.perf_counter()
    ops = json.dumps(NOOP_OPERATIONS)
    with psycopg.connect(dsn(dbname)) as conn:
        if ready_only:
            conn.execute("SET session_replication_role = replica")
            conn.execute(
                f"""
                INSERT INTO scheduling_readyagenda (agenda_id, insight_id, customer_id, priority,
                    added_at)
                SELECT gen_random_uuid(), %s, c.id, 5, {added_at_sql}
                FROM unnest(%s::uuid[]) AS c(id), generate_series(1, %s) g
                """,
                [insight_id, list(customer_ids), per_customer],
            )
            _lanes_for(conn, insight_id, customer_ids)
            conn.commit()
            return time.perf_counter() - started
        for first in range(0, len(customer_ids), 2000):
            chunk = list(customer_ids[first : first + 2000])
            conn.execute(
                "CREATE TEMP TABLE IF NOT EXISTS bench_new (id uuid, customer_id uuid, g int) "
                "ON COMMIT DROP"
            )
            conn.execute(
                "INSERT INTO bench_new SELECT gen_random_uuid(), c.id, g "
                "FROM unnest(%s::uuid[]) AS c(id), generate_series(1, %s) g",
                [chunk, per_customer],
            )
            conn.execute(
                """
                INSERT INTO agendas_agenda (id, link_id, cid, created_at, updated_at, customer_id,
                    insight_id, operations, params, priority, max_attempts, retry_delay_seconds,
                    callback_url, external_id, idempotency_key, labels)
                SELECT id, '', 'bench', now(), now(), customer_id, %s, %s::jsonb, '{}'::jsonb,
                    5, 3, 0, '', '', '', '{}'::jsonb
                FROM bench_new
                """,
                [insight_id, ops],
            )
            conn.execute(
                """
                INSERT INTO agendas_agendaprogress (id, link_id, cid, created_at, updated_at,
                    agenda_id, customer_id, state, message, percent_complete, attempts_completed,
                    attempts_started, do_not_run, abort_requested, pause_requested, pause_now,
                    diagnostics)
                SELECT gen_random_uuid(), '', 'bench', now(), now(), id, customer_id, %s, '', 0,
                    0, 0, false, false, false, false, '[]'::jsonb
                FROM bench_new
                """,
                [state],
            )
            conn.execute(
                """
                INSERT INTO agendas_operationprogress (id, agenda_progress_id, customer_id,
                    link_id, cid, position, name, type, state, message, percent_complete,
                    attempt_count, result, params, diagnostics, is_generated, created_at,
                    updated_at)
                SELECT gen_random_uuid(), p.id, n.customer_id, '', 'bench', 0, 'noop', 'noop',
                    'waiting', '', 0, 0, NULL, '{}'::jsonb, '[]'::jsonb, false, now(), now()
                FROM bench_new n JOIN agendas_agendaprogress p ON p.agenda_id = n.id
                """
            )
            if state == "ready":
                conn.execute(
                    f"""
                    INSERT INTO scheduling_readyagenda (agenda_id, insight_id, customer_id,
                        priority, added_at)
                    SELECT id, %s, customer_id, 5, {added_at_sql} FROM bench_new
                    """,
                    [insight_id],
                )
                _lanes_for(conn, insight_id, chunk)
            conn.commit()
    return time.perf_counter() - started


def _lanes_for(conn, insight_id: str, customer_ids: Sequence[str]) -> None:
    """The active lanes a submit would have woken for these customers' ready rows."""
    conn.execute(
        """
        INSERT INTO scheduling_customerlane (insight_id, customer_id, active, served)
        SELECT %s, c.id, true, 0 FROM unnest(%s::uuid[]) AS c(id)
        ON CONFLICT (insight_id, customer_id) DO UPDATE SET active = true
        """,
        [insight_id, list(customer_ids)],
    )


# --- maths and output -----------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when every value is equal, 1/n when one takes everything."""
    values = [float(v) for v in values]
    if not values or not any(values):
        return math.nan
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


# --- CPU accounting (Linux /proc) ----------------------------------------------------------
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stats() -> list[tuple[int, str, str, int, float, float]]:
    """(pid, command, state, process group, own CPU s, reaped children's CPU s) of every
    process."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                text = handle.read()
        except OSError:
            continue  # gone meanwhile
        command = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        # fields[0] is field 3 of proc(5): state; pgrp is field 5, utime..cstime 14..17.
        found.append(
            (
                int(entry),
                command,
                fields[0],
                int(fields[2]),
                (int(fields[11]) + int(fields[12])) / _TICKS,
                (int(fields[13]) + int(fields[14])) / _TICKS,
            )
        )
    return found


def live_processes_in_group(group: int) -> int:
    """Processes of process group `group` (a server started by bench.servers leads its own)
    that are not zombies."""
    return sum(1 for _, _, state, pgrp, _, _ in _proc_stats() if pgrp == group and state != "Z")


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has been busy (every core; idle, I/O wait and steal left
    out), from /proc/stat: divided by the jobs a run completed, what one job cost in all."""
    with open("/proc/stat") as handle:
        fields = [int(value) for value in handle.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / _TICKS


def cpu_seconds(groups: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each named process group (a server started by
    bench.servers leads its own group) and by PostgreSQL: its live processes plus what its
    exited backends used (the postmaster's reaped children)."""
    totals = dict.fromkeys([*groups, "postgresql"], 0.0)
    by_group = {pgid: name for name, pgid in groups.items()}
    for _, command, _, pgrp, own, reaped in _proc_stats():
        if command == "postgres":
            totals["postgresql"] += own + reaped
        elif pgrp in by_group:
            totals[by_group[pgrp]] += own + reaped
    return totals


_STARTED = time.monotonic()


def say(*parts: Any) -> None:
    """Print a progress line, stamped with the seconds since this process started."""
    print(f"[{time.monotonic() - _STARTED:5.0f}s]", *parts, flush=True)


@dataclass
class Figure:
    """One line of the final table."""

    phase: str
    metric: str
    value: float | None
    unit: str
    note: str = ""
    ratio: float | None = None  # value / reference, when there is one
    reference: str = ""  # what the ratio divides by
    target: str = ""
    ok: bool | None = None  # target met?


@dataclass
class PhaseResult:
    phase: str
    sizes: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    rejected: str = ""  # why the run is not valid (e.g. an agenda pulled twice in one attempt)

    def add(self, metric: str, value: float | None, unit: str, **kwargs: Any) -> Figure:
        figure = Figure(phase=self.phase, metric=metric, value=value, unit=unit, **kwargs)
        self.figures.append(figure)
        return figure

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseResult:
        figures = [Figure(**figure) for figure in data.pop("figures", [])]
        return cls(**data, figures=figures)


def phase_main(run: Any, description: str | None) -> None:
    """The command line of a phase: `--quick`, and `--out FILE` for its PhaseResult as JSON."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    result = run(quick=args.quick)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result.to_dict(), handle)


def new_id() -> str:
    return str(uuid.uuid4())


# --- sizes ----------------------------------------------------------------------------------
# Scaled so that `make bench` fits in 10 minutes on a 2-core machine; --quick in about one.
FULL_SIZES: dict[str, Any] = {
    "queue_rows": 4000,  # limit and engine: queued rows per shape (same table size)
    "shape_seconds": 5.0,  # limit and engine: a shape stops after this long
    "submit_sample": 300,  # engine: agendas submitted one by one, and in bulk, for the rates
    "e2e_seconds": 15.0,  # end to end in-process: the submitter stops after this long
    "e2e_agendas": 20_000,  # … or after this many
    "http_seconds": 15.0,  # end to end over HTTP (each queue size): the submitter stops then
    "http_agendas": 12_000,  # … or after this many (what the pullers then drain is timed too)
    "http_waiting": 100_000,  # ready agendas behind the queue for the pull-latency run
    "http_latency_pulls": 1000,  # pulls timed with that backlog (p99: the 10th slowest of them)
    "idle_probes": 8,  # idle submit -> pullable probes
    "heartbeat_seconds": 5.0,  # the report endpoint alone
    "peer_jobs": 4000,  # peers: jobs per run (end to end, then drain-only)
    "peer_seconds": 12,  # peers: a run stops after this long and counts what finished
    "fill_sizes": [1000, 100_000, 1_000_000],
    "fill_customers": 10,
    "fill_repeats": 5,
    "flood": 100_000,  # fairness: the flooding customer's backlog
    "small_customers": 10,
    "small_each": 10,
    "contention_seconds": 25.0,  # fairness: a flood run stops after this long
    "weighted_pulls": 5000,
    "weighted_seconds": 90.0,
}
QUICK_SIZES: dict[str, Any] = {
    "queue_rows": 1000,
    "shape_seconds": 1.5,
    "submit_sample": 40,
    "e2e_seconds": 6.0,
    "e2e_agendas": 2000,
    "http_seconds": 6.0,
    "http_agendas": 2000,
    "http_waiting": 20_000,
    "http_latency_pulls": 40,
    "idle_probes": 2,
    "heartbeat_seconds": 2.0,
    "peer_jobs": 300,
    "peer_seconds": 2.5,
    "fill_sizes": [1000, 20_000],
    "fill_customers": 10,
    "fill_repeats": 3,
    "flood": 5000,
    "small_customers": 10,
    "small_each": 10,
    "contention_seconds": 10.0,
    "weighted_pulls": 400,
    "weighted_seconds": 15.0,
}


def sizes_for(quick: bool) -> dict[str, Any]:
    return dict(QUICK_SIZES if quick else FULL_SIZES)
