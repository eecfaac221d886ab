"""Scale-out run (`make cluster-demo`): POP on several "machines" of one host, with failures.

Two gunicorn web nodes on two ports behind a small round-robin TCP load balancer (started
here, skipping a node that refuses connections), two `manage.py qcluster` scheduler nodes, four
`pop worker` pullers, and one PostgreSQL database of their own (`pop_bench_cluster`, created
and dropped). 2,000 agendas of 5 customers (two operations each: `first`, then `second`
depending on it, 0.5 s) are submitted in bulk through the load balancer. When about a third have
succeeded, one web node, one cluster and one worker are killed with SIGKILL.

At the end it checks, and exits non-zero unless all hold:
- every agenda succeeded; no ReadyAgenda/QueuedAgenda row and no open execution is left;
- no agenda was pulled twice in one attempt (execution numbers are unique per agenda);
- each operation ran exactly once per attempt: every run a worker's handler records (agenda,
  operation, worker, time) belongs to one execution of that agenda, no execution ran an
  operation twice, and every operation ran in the succeeded execution or an earlier one.
  (An operation whose run in a killed attempt was never reported runs again in the next
  attempt; the summary counts those.)

This module is also the workers' handler module (`pop worker --handlers cluster_demo`): the
`demo` operation type appends a line when a run starts and one when it ends to the file named by
POP_DEMO_RUNLOG (the fault-injection suite, tests/faults/, uses it too).
"""

from __future__ import annotations

import json
import os
import sys
import time

RUNLOG_ENV = "POP_DEMO_RUNLOG"


def demo_handler(payload, ctx):
    """Record the run's start, wait `seconds` (cut short when the run is cancelled: its lease
    was lost, the agenda aborted), record its end, then succeed. Each record is one O_APPEND
    write, atomic for a short line; `verify` and tests/faults/invariants.py read them."""
    _record(ctx, event="start")
    delay = float((payload or {}).get("seconds", 0))
    cancelled = ctx.sleep(delay) if delay else ctx.cancelled.is_set()
    _record(ctx, event="end", cancelled=cancelled)
    return {"ok": True, "operation": ctx.operation_name}


def _record(ctx, **fields) -> None:
    line = json.dumps(
        {
            "agenda": ctx.agenda_id,
            "operation": ctx.operation_name,
            "worker": os.environ.get("POP_DEMO_WORKER", ""),
            "at": time.time(),
            **fields,
        }
    )
    fd = os.open(os.environ[RUNLOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


HANDLERS = {"demo": demo_handler}


# --- the run (imports below stay out of the workers' handler import) -------------------


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agendas", type=int, default=2000)
    parser.add_argument("--customers", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=420.0, help="seconds for the whole run")
    parser.add_argument("--db", default="pop_bench_cluster")
    parser.add_argument("--keep", action="store_true", help="keep the database and the logs")
    parser.add_argument("--json", help="write the summary here as JSON")
    args = parser.parse_args(argv)
    import signal

    # SIGTERM and SIGINT end the run through its `finally`: every process it started stops.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    summary = run(
        agendas=args.agendas,
        customers=args.customers,
        timeout=args.timeout,
        dbname=args.db,
        keep=args.keep,
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(summary, handle, indent=2)
    print(json.dumps({k: v for k, v in summary.items() if k != "problems"}, indent=2))
    for problem in summary["problems"]:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    print("cluster demo " + ("PASSED" if summary["ok"] else "FAILED"))
    return 0 if summary["ok"] else 1


def run(*, agendas: int, customers: int, timeout: float, dbname: str, keep: bool) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, root)
    from bench import servers
    from bench.common import (
        close_django_connections,
        django_setup,
        drop_database,
        make_world,
        migrate_template,
        say,
    )
    from bench.outcomes import pulled_twice, state_counts

    started = time.monotonic()
    logs = servers.log_dir()
    runlog = logs / "runs.jsonl"
    say(f"cluster demo: {agendas} agendas of {customers} customers; logs in {logs}")
    migrate_template(dbname)
    env = {
        "POP_FILL_INTERVAL": "1",
        "POP_PROMOTE_INTERVAL": "1",
        "POP_RECLAIM_INTERVAL": "2",
        "POP_TICKER_LINK_SECONDS": "5",
        "POP_Q_WORKERS": "2",
        "DATABASE_CONN_MAX_AGE": "60",
    }
    django_setup(dbname, **env)
    world = make_world(
        customers=customers,
        queue_size=40,
        lease_seconds=8,
        slug_prefix="demo",
        operation_types=["demo"],
    )
    close_django_connections()
    servers.manage(dbname, "pop_schedules", **env)

    processes: dict[str, servers.Process] = {}
    balancer = None
    try:
        ports = [servers.free_port(), servers.free_port()]
        for number, port in enumerate(ports, 1):
            processes[f"web{number}"] = servers.gunicorn(
                dbname, port, logs, name=f"web{number}", **env
            )
        for number in (1, 2):
            processes[f"cluster{number}"] = servers.qcluster(
                dbname, logs, name=f"cluster{number}", **env
            )
        for number, port in enumerate(ports, 1):
            servers.wait_http(f"http://127.0.0.1:{port}/healthz", processes[f"web{number}"])
        balancer = Balancer([("127.0.0.1", port) for port in ports])
        url = f"http://127.0.0.1:{balancer.port}"
        say(f"web nodes on {ports}, load balancer on {balancer.port}")
        worker_env = {
            RUNLOG_ENV: str(runlog),
            "PYTHONPATH": os.pathsep.join([root, os.path.join(root, "scripts")]),
        }
        for number in range(1, 5):
            name = f"worker{number}"
            processes[name] = spawn_worker(servers, url, world, logs, name, worker_env)

        import threading

        failures: list[BaseException] = []
        peak = ConnectionPeak(dbname)
        peak.start()

        def submit_all() -> None:
            try:
                submit(url, world, agendas)
            except BaseException as error:  # reported as a problem below
                failures.append(error)

        submitter = threading.Thread(target=submit_all, daemon=True)
        submitter.start()
        killed = False
        deadline = started + timeout
        succeeded = 0
        while time.monotonic() < deadline:
            counts = state_counts(dbname)
            succeeded = counts.get("succeeded", 0)
            if not killed and succeeded >= agendas // 3:
                # The worker holding the most leases: its agendas must be reclaimed and rerun
                # (wait a little for one to hold some: workers idle while submits trickle in).
                victim, waited = busiest_worker(dbname), time.monotonic()
                while victim is None and time.monotonic() - waited < 10:
                    time.sleep(0.05)
                    victim = busiest_worker(dbname)
                victim = victim or "worker1"
                killed = ["web1", "cluster1", victim]
                for name in killed:
                    processes[name].kill()
                balancer.forget(0)  # the load balancer's health check notices web1 is gone
                say(f"killed {', '.join(killed)} (SIGKILL) at {succeeded} succeeded")
            if succeeded >= agendas or failures:
                break
            time.sleep(0.5)
        submitter.join(timeout=5)
        say(f"{succeeded} of {agendas} succeeded after {time.monotonic() - started:.0f} s")
        for name in ("worker1", "worker2", "worker3", "worker4"):
            processes[name].stop(timeout=10)
        peak.stop()
        summary = verify(dbname, runlog, agendas, killed, pulled_twice, state_counts)
        # docs/deploy.md's connection budget for this topology, against what was seen.
        budget = connection_budget(
            web_nodes=len(ports),
            gunicorn_workers=2,
            threads=servers.GUNICORN_THREADS,
            clusters=2,
            q_workers=int(env["POP_Q_WORKERS"]),
        )
        summary["connections"] = {"peak": peak.value, "budget": budget}
        if peak.value > budget:
            summary["problems"].append(
                f"{peak.value} connections at the peak, over the documented budget of {budget}"
            )
            summary["ok"] = False
        if failures:
            summary["problems"].append(f"submitting failed: {failures[0]!r}")
            summary["ok"] = False
        summary["seconds"] = round(time.monotonic() - started, 1)
        summary["survivors alive"] = {
            name: processes[name].alive() for name in ("web2", "cluster2")
        }
        if not all(summary["survivors alive"].values()):
            summary["problems"].append("a surviving web node or cluster died")
            summary["ok"] = False
        return summary
    finally:
        for process in processes.values():
            process.stop(timeout=10)
        if balancer is not None:
            balancer.close()
        close_django_connections()
        if not keep:
            drop_database(dbname)


def spawn_worker(servers, url, world, logs, name, extra_env):
    return servers.pop_worker(
        url,
        world.worker_token,
        world.insight_id,
        logs,
        name=name,
        concurrency=8,
        extra=["--batch", "8", "--handlers", "cluster_demo", "--wait-seconds", "2"],
        env={**extra_env, "POP_DEMO_WORKER": name},
    )


def submit(url: str, world, total: int) -> None:
    from popclient.client import PopClient

    operations = [
        {"name": "first", "type": "demo", "payload": {}},
        {"name": "second", "type": "demo", "payload": {"seconds": 0.5}, "depends_on": ["first"]},
    ]
    from popclient.errors import ServerError, TransportError

    clients = [PopClient(url, world.tokens[c], timeout=120, retries=5) for c in world.customers]
    sent, turn = 0, 0
    while sent < total:
        size = min(100, total - sent)
        # Each item carries an idempotency key, so a batch whose answer was lost (its web node
        # died mid-request) is simply sent again: the agendas it created come back, no twins.
        batch = [
            {
                "operations": operations,
                "retry_delay_seconds": 0,
                "link_id": f"demo-{turn}",
                "idempotency_key": f"demo-{turn}-{n}",
            }
            for n in range(size)
        ]
        for attempt in range(5):
            try:
                results = clients[turn % len(clients)].submit_agendas_bulk(batch)
                break
            except (TransportError, ServerError):
                if attempt == 4:
                    raise
                time.sleep(0.5)
        bad = [r for r in results if "errors" in r]
        if bad:
            raise RuntimeError(f"bulk submit refused: {bad[:2]}")
        sent += size
        turn += 1
    print(f"submitted {sent} agendas through the load balancer", flush=True)


def busiest_worker(dbname: str) -> str | None:
    import psycopg

    from bench.common import dsn

    with psycopg.connect(dsn(dbname)) as conn:
        row = conn.execute(
            "SELECT worker FROM agendas_execution WHERE outcome IS NULL GROUP BY worker "
            "ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()
    return row[0] if row else None


def connection_budget(
    *, web_nodes: int, gunicorn_workers: int, threads: int, clusters: int, q_workers: int
) -> int:
    """docs/deploy.md, "Connection budget": each gunicorn worker process holds at most one
    connection per thread plus one for its fill-nudge thread; each cluster one per task worker
    process plus one for that worker's fill-nudge thread, and three for its sentinel, pusher
    and monitor."""
    return web_nodes * gunicorn_workers * (threads + 1) + clusters * (2 * q_workers + 3)


class ConnectionPeak:
    """The most connections to `dbname` seen at once (pg_stat_activity, every 0.2 s)."""

    def __init__(self, dbname: str) -> None:
        import threading

        self.dbname, self.value = dbname, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        import psycopg

        from bench.common import ADMIN_DB, dsn

        with psycopg.connect(dsn(ADMIN_DB), autocommit=True) as conn:
            while not self._stop.wait(0.2):
                (count,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [self.dbname]
                ).fetchone()
                self.value = max(self.value, count)


def verify(dbname, runlog, agendas, killed, pulled_twice, state_counts) -> dict:
    import psycopg

    from bench.common import dsn

    problems: list[str] = []
    counts = state_counts(dbname)
    if counts != {"succeeded": agendas}:
        problems.append(f"agenda states {counts}, expected all {agendas} succeeded")
    with psycopg.connect(dsn(dbname)) as conn:
        left = conn.execute(
            "SELECT (SELECT count(*) FROM scheduling_readyagenda),"
            " (SELECT count(*) FROM scheduling_queuedagenda),"
            " (SELECT count(*) FROM agendas_execution WHERE outcome IS NULL)"
        ).fetchone()
        executions = conn.execute(
            "SELECT e.id, e.agenda_id, e.number, e.worker, extract(epoch FROM e.started_at),"
            " extract(epoch FROM e.ended_at), e.outcome FROM agendas_execution e"
        ).fetchall()
        outcomes = dict(
            conn.execute("SELECT outcome, count(*) FROM agendas_execution GROUP BY outcome")
        )
        workers = dict(
            conn.execute(
                "SELECT worker, count(*) FROM agendas_execution GROUP BY worker ORDER BY worker"
            )
        )
    if any(left):
        problems.append(f"left behind: {left[0]} ready, {left[1]} queued, {left[2]} executing")
    twice = pulled_twice(dbname)
    if twice:
        problems.append(f"{twice} agenda(s) pulled twice in one attempt")
    by_agenda: dict[str, list[tuple]] = {}
    for execution_id, agenda_id, number, worker, started, ended, outcome in executions:
        by_agenda.setdefault(str(agenda_id), []).append(
            (str(execution_id), number, worker, float(started), float(ended or 1e18), outcome)
        )
    runs: dict[tuple[str, str], list[str]] = {}  # (execution, operation) -> run times
    unattributed = 0
    lines = runlog.read_text().splitlines() if runlog.exists() else []
    lines = [line for line in lines if json.loads(line).get("event") != "end"]
    for line in lines:
        run = json.loads(line)
        candidates = [
            e
            for e in by_agenda.get(run["agenda"], [])
            if e[2] == run["worker"] and e[3] - 1 <= run["at"] <= e[4] + 1
        ]
        if len(candidates) != 1:
            unattributed += 1
            continue
        runs.setdefault((candidates[0][0], run["operation"]), []).append(run["at"])
    if unattributed:
        problems.append(f"{unattributed} operation run(s) match no single execution")
    repeated = sum(1 for times in runs.values() if len(times) > 1)
    if repeated:
        problems.append(f"{repeated} operation(s) ran twice within one execution")
    # Every operation ran in the succeeded attempt or in an earlier one (a retry resumes at
    # the point of failure: what an earlier attempt finished is not run again).
    missing = rerun = 0
    for attempts in by_agenda.values():
        done: set[str] = set()
        for execution_id, _, _, _, _, outcome in sorted(attempts, key=lambda e: e[1]):
            ran = {op for op in ("first", "second") if (execution_id, op) in runs}
            rerun += len(ran & done)
            if outcome == "succeeded" and ran | done != {"first", "second"}:
                missing += 1
            done |= ran
    if missing:
        problems.append(f"{missing} succeeded execution(s) without a run of every operation")
    retried = sum(1 for attempts in by_agenda.values() if len(attempts) > 1)
    return {
        "ok": not problems,
        "agendas": agendas,
        "states": counts,
        "executions by outcome": {str(k): v for k, v in outcomes.items()},
        "agendas retried": retried,
        "operations run again in a later attempt": rerun,
        "operation runs recorded": len(lines),
        "killed midway": killed or [],
        "executions by worker": workers,
        "problems": problems,
    }


class Balancer:
    """A round-robin TCP proxy on a free port, in a thread: the 'load balancer' of the demo.

    A backend that refuses a connection is skipped for that connection (the next one is
    tried), as a real balancer's health check would; `forget` drops one for good."""

    def __init__(self, backends: list[tuple[str, int]]) -> None:
        import asyncio
        import socket
        import threading

        self.backends = list(backends)
        self.alive = [True] * len(backends)
        self.turn = 0
        self.loop = asyncio.new_event_loop()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def forget(self, index: int) -> None:
        self.alive[index] = False

    def _serve(self, ready) -> None:
        import asyncio

        asyncio.set_event_loop(self.loop)

        async def start():
            self.server = await asyncio.start_server(self._client, sock=self._sock)
            ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    async def _client(self, reader, writer) -> None:
        import asyncio

        upstream = None
        for _ in range(len(self.backends)):
            index = self.turn % len(self.backends)
            self.turn += 1
            if not self.alive[index]:
                continue
            try:
                upstream = await asyncio.open_connection(*self.backends[index])
                break
            except OSError:
                continue
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream

        async def pipe(source, sink) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                try:
                    sink.close()
                except OSError:
                    pass

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def close(self) -> None:
        def shutdown() -> None:
            self.server.close()
            self.loop.stop()

        self.loop.call_soon_threadsafe(shutdown)
        self.thread.join(timeout=5)


if __name__ == "__main__":
    sys.exit(main())
