"""End to end over HTTP: gunicorn (2 workers) + a django-q2 cluster started here, popclient
pullers.

Server side: `gunicorn popsite.wsgi` with 2 workers × 8 threads (gthread: a long-polling pull
holds a thread, not a worker), and one `manage.py qcluster` (2 workers) for the fill nudges
and the periodic fill (POP_FILL_NUDGE at its default, `notify`: the ticker listens for the
nudges), both on this phase's database.
Client side, all through `popclient.PopClient`: 2 submitter processes (`agendas/bulk/`, 100
per request, 5 customers in turn, half the agendas each) and 8 puller processes (pull 10 with
wait_seconds=1, then one batch report per pull with every operation and the agenda succeeded).

Four kinds of run on the same servers:
1. idle submit → pullable: a puller long-polls; one agenda is submitted; time until the pull
   returns it (client clock);
2. throughput: agendas/s from database timestamps (terminal agendas only), submit→pull and
   submit→complete p50/p99, client-side p50/p99 of each request kind, requests per agenda;
   and where the machine's CPU went: CPU ms per terminal agenda of gunicorn, PostgreSQL (its
   processes and its exited backends, from /proc), the qcluster and the client processes,
   the connections opened, the WAL written and the shared buffers touched (pg_stat_database;
   beside the sketch's in bench.setbased_cycle), and the rate the cores would allow at that
   cost; then, the first run's agendas deleted (`forget_agendas`), the same run with the
   insight at the default queue_size 10 (a pull that drains a short queue fills it inline),
   its rate as a ratio of the run at 100, and its CPU per agenda (all processes, each kind in
   the note) as a ratio of that run's;
3. the report endpoint alone: 2 processes send heartbeat reports (`executions/{id}/report/`,
   empty body: one locked read + one UPDATE) for a few seconds — req/s;
4. pull latency with `http_waiting` ready agendas behind the queue (built with set-based SQL),
   2 pullers as in 2 but with wait_seconds=0 — client-side p50/p99 of the pulls that returned
   work (pulls that found the queue empty, waiting on a fill, are counted apart).
"""

from __future__ import annotations

import multiprocessing
import time

import psycopg

from bench import servers
from bench.autovacuum import autovacuum_stand_in
from bench.common import (
    NOOP_OPERATIONS,
    PhaseResult,
    World,
    bench_database,
    bulk_insert_ready,
    close_django_connections,
    cpu_seconds,
    django_setup,
    dsn,
    make_world,
    percentile,
    phase_main,
    say,
    sizes_for,
    vacuum_analyze,
)
from bench.e2e import record
from bench.http_costs import record_costs, record_short_queue_cost
from bench.outcomes import (
    STATS_FLUSH_SECONDS,
    buffers_touched,
    pulled_twice,
    sessions_opened,
    state_counts,
    timings,
    wal_written,
)

CUSTOMERS = 5
PULLERS = 2  # the pull latency run
# The throughput run: with 2 pullers each waiting on its own pull and report in turn, a third
# of the cores stayed idle (2026-11-25); with 4, a fifth still did on a faster machine
# (2026-11-27: 78–82% busy, 824–866 agendas/s): 8 make the server, not the client loop, the
# limit (86–90% busy, 940–1,074/s on the same servers).
THROUGHPUT_PULLERS = 8
# …and 2 submitters: one, waiting on each bulk request in turn (100–200 ms under that load),
# capped the run at about 960 agendas/s while the pullers kept the queue drained (2026-11-27).
THROUGHPUT_SUBMITTERS = 2
QUEUE_SIZE = 100
DEFAULT_QUEUE_SIZE = 10  # resourcepools.Insight.queue_size's default: the second throughput run
SUCCEEDED = [{"name": "noop", "state": "succeeded", "result": {"ok": True}}]


def client(url: str, token: str):
    from popclient.client import PopClient

    return PopClient(url, token, timeout=60, retries=0)


def submitter(url: str, world: World, total: int, seconds: float, out) -> None:
    latencies, requests, done, turn = [], 0, 0, 0
    clients = [client(url, world.tokens[c]) for c in world.customers]
    deadline = time.perf_counter() + seconds
    while done < total and time.perf_counter() < deadline:
        size = min(100, total - done)
        started = time.perf_counter()
        results = clients[turn % len(clients)].submit_agendas_bulk(
            [{"operations": NOOP_OPERATIONS} for _ in range(size)]
        )
        latencies.append((time.perf_counter() - started) * 1000)
        requests += 1
        bad = [r for r in results if "errors" in r]
        if bad:
            raise RuntimeError(f"bulk submit refused: {bad[:2]}")
        done += size
        turn += 1
    out.put(
        {
            "submitted": done,
            "submit_ms": latencies,
            "requests": requests,
            "cpu": time.process_time(),
        }
    )


def puller(
    url: str, world: World, stop, out, limit: int | None = None, wait_seconds: float = 1
) -> None:
    """Pull 10 + one batch report, until `stop` or `limit` pulls. Pull times are kept for the
    pulls that returned work (an empty long-poll measures the wait, not the pull)."""
    api = client(url, world.worker_token)
    pull_ms, report_ms, pulled, pulls, reports, refused, empty = [], [], 0, 0, 0, 0, 0
    name = multiprocessing.current_process().name
    while not stop.is_set() and (limit is None or pulls < limit):
        started = time.perf_counter()
        items = api.pull(world.insight_id, count=10, worker=name, wait_seconds=wait_seconds)
        elapsed = (time.perf_counter() - started) * 1000
        pulls += 1
        if not items:
            empty += 1
            if not wait_seconds:
                time.sleep(0.01)
            continue
        pull_ms.append(elapsed)
        started = time.perf_counter()
        results = api.report_batch(
            [
                {
                    "execution": item["execution"]["id"],
                    "lease_token": item["execution"]["lease_token"],
                    "operations": SUCCEEDED,
                    "state": "succeeded",
                }
                for item in items
            ]
        )
        report_ms.append((time.perf_counter() - started) * 1000)
        reports += 1
        refused += sum(1 for r in results if not r.get("ok"))
        pulled += len(items)
    out.put(
        {
            "pull_ms": pull_ms,
            "report_ms": report_ms,
            "pulled": pulled,
            "pulls": pulls,
            "reports": reports,
            "refused": refused,
            "empty": empty,
            "cpu": time.process_time(),
        }
    )


def heartbeater(
    url: str, token: str, executions: list[tuple[str, str]], seconds: float, start, out
) -> None:
    api = client(url, token)
    sent = 0
    start.wait()
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        execution_id, lease = executions[sent % len(executions)]
        api.report(execution_id, lease)
        sent += 1
    out.put((sent, time.perf_counter() - began))


def idle_probes(url: str, world: World, probes: int) -> list[float]:
    """Seconds from submitting one agenda on an idle system to a long-polling pull getting it."""
    submit_api = client(url, world.tokens[world.customers[0]])
    context = multiprocessing.get_context("fork")
    latencies = []
    for _ in range(probes):
        got = context.Queue()
        waiter = context.Process(target=_wait_one, args=(url, world, got))
        waiter.start()
        time.sleep(0.5)  # the pull is waiting
        started = time.time()
        submit_api.submit_agenda({"operations": NOOP_OPERATIONS})
        received_at = got.get(timeout=30)
        waiter.join()
        latencies.append(received_at - started)
        time.sleep(0.3)
    return latencies


def _wait_one(url: str, world: World, got) -> None:
    api = client(url, world.worker_token)
    while True:
        items = api.pull(world.insight_id, count=1, worker="idle-probe", wait_seconds=10)
        if items:
            got.put(time.time())
            item = items[0]
            api.report(
                item["execution"]["id"],
                item["execution"]["lease_token"],
                operations=SUCCEEDED,
                state="succeeded",
            )
            return


def throughput(
    url: str, dbname: str, world: World, total: int, seconds: float, servers_: dict[str, int]
) -> dict:
    """The throughput run; `servers_` names the server process groups whose CPU is counted."""
    context = multiprocessing.get_context("fork")
    stop, out, submitted_out = context.Event(), context.Queue(), context.Queue()
    before = state_counts(dbname).get("succeeded", 0)
    time.sleep(STATS_FLUSH_SECONDS)  # the counters of the work before this run are all in
    buffers_before = buffers_touched(dbname)
    cpu_before, wall_before = cpu_seconds(servers_), time.perf_counter()
    sessions_before, wal_before = sessions_opened(dbname), wal_written()
    began = time.time()
    pullers = [
        context.Process(target=puller, args=(url, world, stop, out), name=f"http-puller{n}")
        for n in range(THROUGHPUT_PULLERS)
    ]
    for process in pullers:
        process.start()
    subs = [
        context.Process(
            target=submitter, args=(url, world, share, seconds, submitted_out), name=f"sub{n}"
        )
        for n, share in enumerate(_shares(total, THROUGHPUT_SUBMITTERS))
    ]
    for sub in subs:
        sub.start()
    parts = [submitted_out.get(timeout=seconds + 120) for _ in subs]
    for sub in subs:
        sub.join()
    submitted = {
        "submitted": sum(p["submitted"] for p in parts),
        "submit_ms": [ms for p in parts for ms in p["submit_ms"]],
        "requests": sum(p["requests"] for p in parts),
        "cpu": sum(p["cpu"] for p in parts),
    }
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        counts = state_counts(dbname)
        if counts.get("succeeded", 0) - before >= submitted["submitted"]:
            break
        time.sleep(0.25)
    stop.set()
    pulls = [out.get(timeout=60) for _ in pullers]
    for process in pullers:
        process.join(timeout=30)
    cpu = {
        name: used - cpu_before[name]
        for name, used in cpu_seconds(servers_).items()
        if name in cpu_before
    }
    cpu["clients (popclient)"] = submitted["cpu"] + sum(p["cpu"] for p in pulls)
    sessions = sessions_opened(dbname) - sessions_before
    wal = wal_written() - wal_before
    cpu_wall = time.perf_counter() - wall_before
    time.sleep(STATS_FLUSH_SECONDS)
    buffers = buffers_touched(dbname) - buffers_before
    figures = timings(dbname, created_after=began)
    figures.update(
        submitted=submitted["submitted"],
        twice=pulled_twice(dbname),
        states=state_counts(dbname),
        report_failures=sum(p["refused"] for p in pulls),
        submit_ms=submitted["submit_ms"],
        pull_ms=[ms for p in pulls for ms in p["pull_ms"]],
        report_ms=[ms for p in pulls for ms in p["report_ms"]],
        requests=submitted["requests"] + sum(p["pulls"] + p["reports"] for p in pulls),
        cpu=cpu,
        cpu_wall=cpu_wall,
        sessions=sessions,
        wal=wal,
        buffers=buffers,
    )
    return figures


def _shares(total: int, parts: int) -> list[int]:
    """`total` split into `parts` whole shares, the first ones a unit larger."""
    return [total // parts + (n < total % parts) for n in range(parts)]


def short_queue_throughput(
    url: str, dbname: str, world: World, total: int, seconds: float, web: int, cluster: int
) -> dict:
    """The throughput run again with the insight at the default queue_size: a pull that drains
    a short queue fills it inline (scheduling/pull.py), so the rate should not drop."""
    from resourcepools.models import Insight

    Insight.objects.filter(pk=world.insight_id).update(queue_size=DEFAULT_QUEUE_SIZE)
    close_django_connections()
    forget_agendas(dbname)
    try:
        with autovacuum_stand_in(dbname):
            return throughput(
                url, dbname, world, total, seconds, {"gunicorn": web, "qcluster": cluster}
            )
    finally:
        Insight.objects.filter(pk=world.insight_id).update(queue_size=QUEUE_SIZE)
        close_django_connections()


def forget_agendas(dbname: str) -> None:
    """Delete every agenda and the rows under it, as the reap does once they expire, so that
    the run at the default queue_size starts from the history the run at 100 started from.
    Run after it on the first run's 12,000 agendas, it paid for them: on the same servers,
    successive runs cost more CPU an agenda with each run's agendas left behind (PostgreSQL
    0.77 → 0.89 → 1.08 ms over three runs, 2026-11-28), and nothing when they were deleted in
    between — the small tables' indexes gaining a level, and the autovacuum stand-in's
    ANALYZE reading more rows until it samples."""
    with psycopg.connect(dsn(dbname), autocommit=True) as conn:
        conn.execute(
            "TRUNCATE agendas_agenda, agendas_agendaprogress, agendas_operationprogress, "
            "agendas_execution CASCADE"
        )
    vacuum_analyze(dbname)


def report_rate(url: str, world: World, seconds: float) -> tuple[float, int]:
    """Heartbeat reports/s on executing agendas, 2 client processes."""
    client(url, world.tokens[world.customers[0]]).submit_agendas_bulk(
        [{"operations": NOOP_OPERATIONS} for _ in range(40)]
    )
    api = client(url, world.worker_token)
    executions: list[tuple[str, str]] = []
    for _ in range(10):
        for item in api.pull(world.insight_id, count=10, worker="heartbeat", wait_seconds=2):
            executions.append((item["execution"]["id"], item["execution"]["lease_token"]))
        if len(executions) >= 40:
            break
    if not executions:
        return float("nan"), 0
    context = multiprocessing.get_context("fork")
    start, out = context.Barrier(2), context.Queue()
    halves = [executions[0::2], executions[1::2]]
    processes = [
        context.Process(
            target=heartbeater, args=(url, world.worker_token, half, seconds, start, out)
        )
        for half in halves
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=seconds + 60) for _ in processes]
    for process in processes:
        process.join()
    sent = sum(r[0] for r in results)
    return sent / max(r[1] for r in results), len(executions)


def waiting_latency(url: str, dbname: str, world: World, waiting: int, pulls: int) -> dict:
    # Real agendas first (the ones the timed pulls can reach: every pull takes at most 10,
    # plus the queue), then ReadyAgenda-only rows behind them up to `waiting`.
    per_customer = waiting // CUSTOMERS
    real = min(per_customer, (pulls * 10 + 2 * QUEUE_SIZE) // CUSTOMERS + 50)
    built = bulk_insert_ready(
        dbname, insight_id=world.insight_id, customer_ids=world.customers, per_customer=real
    )
    built += bulk_insert_ready(
        dbname,
        insight_id=world.insight_id,
        customer_ids=world.customers,
        per_customer=per_customer - real,
        added_at_sql="now() - interval '30 minutes' + (g * interval '1 microsecond')",
        ready_only=True,
    )
    vacuum_analyze(dbname)
    context = multiprocessing.get_context("fork")
    stop, out = context.Event(), context.Queue()
    processes = [
        context.Process(target=puller, args=(url, world, stop, out, pulls // PULLERS, 0))
        for _ in range(PULLERS)
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=300) for _ in processes]
    for process in processes:
        process.join()
    pull_ms = [ms for r in results for ms in r["pull_ms"]]
    return {
        "built_seconds": built,
        "pulls": len(pull_ms),
        "pulled": sum(r["pulled"] for r in results),
        "pull_p50": percentile(pull_ms, 50),
        "pull_p99": percentile(pull_ms, 99),
        "empty": sum(r["empty"] for r in results),
    }


def run(*, quick: bool) -> PhaseResult:
    sizes = sizes_for(quick)
    total = sizes["http_agendas"]
    submit_seconds = sizes["http_seconds"]
    result = PhaseResult(
        phase="http",
        sizes={
            "agendas": total,
            "submitting stops after (s)": submit_seconds,
            "customers": CUSTOMERS,
            "pullers": f"{THROUGHPUT_PULLERS} (throughput), {PULLERS} (pull latency)",
            "submitters": THROUGHPUT_SUBMITTERS,
            "queue_size": f"{QUEUE_SIZE}, then {DEFAULT_QUEUE_SIZE} (the default)",
            "gunicorn": f"2 workers × {servers.GUNICORN_THREADS} threads (gthread)",
            "qcluster workers": 2,
            "waiting for the latency run": sizes["http_waiting"],
        },
    )
    started = time.perf_counter()
    logs = servers.log_dir()
    with bench_database("pop_bench_http") as dbname:
        django_setup(dbname)
        world = make_world(customers=CUSTOMERS, queue_size=QUEUE_SIZE)
        close_django_connections()
        env = {"POP_Q_WORKERS": "2", "DATABASE_CONN_MAX_AGE": "600"}
        servers.manage(dbname, "pop_schedules", **env)
        port = servers.free_port()
        url = f"http://127.0.0.1:{port}"
        web = servers.gunicorn(dbname, port, logs, **env)
        cluster = servers.qcluster(dbname, logs, **env)
        try:
            servers.wait_http(f"{url}/healthz", web)
            vacuum_analyze(dbname)
            idle = idle_probes(url, world, sizes["idle_probes"])
            say(
                f"  http idle submit→pullable: p50 {percentile(idle, 50) * 1000:.0f} ms, max "
                f"{max(idle) * 1000:.0f} ms over {len(idle)} probes"
            )
            vacuum_analyze(dbname)
            with autovacuum_stand_in(dbname):
                figures = throughput(
                    url,
                    dbname,
                    world,
                    total,
                    submit_seconds,
                    {"gunicorn": web.pid, "qcluster": cluster.pid},
                )
            record(result, figures, label="over HTTP")
            terminal = max(figures.get("terminal", 0), 1)
            per_agenda = figures["requests"] / terminal
            rate = figures.get("rate") or 0
            result.figures[0].target = "≥ 1,000 agendas/s"
            result.figures[0].ok = rate >= 1000
            for kind in ("submit", "pull", "report"):
                values = figures[f"{kind}_ms"]
                result.add(f"HTTP {kind} request p50", percentile(values, 50), "ms")
                result.add(f"HTTP {kind} request p99", percentile(values, 99), "ms")
            result.add("requests per agenda", per_agenda, "req")
            deep_cost = record_costs(result, figures)
            say(
                "  http request ms p50/p99: "
                + ", ".join(
                    f"{k} {percentile(figures[f'{k}_ms'], 50):.0f}/"
                    f"{percentile(figures[f'{k}_ms'], 99):.0f}"
                    for k in ("submit", "pull", "report")
                )
                + f"; {per_agenda:.2f} requests per agenda"
            )
            short = short_queue_throughput(
                url, dbname, world, total, submit_seconds, web.pid, cluster.pid
            )
            short_rate = short.get("rate") or 0
            say(
                f"  over HTTP at the default queue_size {DEFAULT_QUEUE_SIZE}: {short_rate:.0f} "
                f"agendas/s ({short_rate / max(rate, 1):.2f}× the run at {QUEUE_SIZE})"
            )
            result.add(
                f"over HTTP end to end, queue_size {DEFAULT_QUEUE_SIZE} (the default)",
                short_rate,
                "agendas/s",
                target="≥ 1,000 agendas/s",
                ok=short_rate >= 1000,
                note=f"{short_rate / max(rate, 1):.2f}× the run at queue_size {QUEUE_SIZE}",
            )
            record_short_queue_cost(result, short, deep_cost, DEFAULT_QUEUE_SIZE, QUEUE_SIZE)
            if short["twice"]:
                result.rejected = f"{short['twice']} agenda(s) pulled twice in one attempt"
            hb_rate, hb_n = report_rate(url, world, sizes["heartbeat_seconds"])
            say(f"  http report endpoint alone (heartbeats, 2 clients): {hb_rate:.0f} req/s")
            result.add("report endpoint alone (heartbeat)", hb_rate, "req/s")
            result.add(
                "idle submit → pullable p50",
                percentile(idle, 50) * 1000,
                "ms",
                target="< 1,000 ms",
            )
            result.add(
                "idle submit → pullable max",
                max(idle) * 1000,
                "ms",
                target="< 1,000 ms",
                ok=max(idle) < 1.0,
            )
            wait = waiting_latency(
                url, dbname, world, sizes["http_waiting"], sizes["http_latency_pulls"]
            )
            say(
                f"  http pull with {sizes['http_waiting']} waiting (built in "
                f"{wait['built_seconds']:.0f} s): {wait['pulls']} pulls with work, p50 "
                f"{wait['pull_p50']:.0f} ms, p99 {wait['pull_p99']:.0f} ms; {wait['empty']} "
                "found the queue empty (waiting on a fill)"
            )
            result.add(
                f"pull p50, {sizes['http_waiting']} waiting",
                wait["pull_p50"],
                "ms",
                note=f"{wait['empty']} empty pulls (queue waiting on a fill) not counted",
            )
            result.add(
                f"pull p99, {sizes['http_waiting']} waiting",
                wait["pull_p99"],
                "ms",
                target="< 25 ms",
                ok=wait["pull_p99"] < 25,
            )
            if not web.alive() or not cluster.alive():
                result.notes.append("a server process died during the phase")
        finally:
            # The database is dropped next: no need to wait for graceful shutdowns.
            web.stop(timeout=3)
            cluster.stop(timeout=3)
    result.seconds = time.perf_counter() - started
    return result


if __name__ == "__main__":
    phase_main(run, __doc__)
