"""History (issue 18, "A year of history"): every page, API list, admin changelist and
`/metrics`, one reap and one alert evaluation, over 10,000 and 1,000,000 agendas (--quick:
100,000) — ms and statements per request, as staff, a big customer and a small one.

Each size gets its own database, built by bench.history_world (what it holds: its docstring).

Requests run in-process with Django's test client against the bench database: one warm-up,
then the better of two runs (a request slower than 2 s is timed once), statements counted with
CaptureQueriesContext. Deep pages sit halfway down what the principal sees (500,000 rows deep
for staff at 1M): a cursor built as DRF builds it (`p=<created_at of that row>`), and the same
depth by offset, which is refused (400) past 10,000 by design.
Then 400 alert rules (bench.alerts.make_rules) are evaluated, a worker's loop runs over the
long history (pull 10 + one batch report, 60 times: ms and statements an agenda), and one reap
deletes the 10% expired agendas (bench.reap.counted_reap).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from bench.common import (
    PYTHON,
    ROOT,
    PhaseResult,
    World,
    bench_database,
    bulk_insert_ready,
    close_django_connections,
    django_setup,
    say,
    user,
)
from bench.history_report import HOT_PULL, TARGET_MS, report
from bench.history_world import BIG, CUSTOMERS, build_world

METRICS_TOKEN = "bench-metrics-token"
SLOW_S = 2.0


# --- measuring ---------------------------------------------------------------------------


def cursor_at(model, customer_id: str | None, depth: int) -> str:
    """The `?cursor=` DRF gives out for the page starting `depth` rows down the list ordered
    by -created_at (as `CursorPagination.encode_cursor`: base64 of `p=<position>`)."""
    rows = model.objects.order_by("-created_at")
    if customer_id:
        rows = rows.filter(customer_id=customer_id)
    position = rows.values_list("created_at", flat=True)[depth]
    query = urlencode({"p": str(position)}, doseq=True)
    return base64.b64encode(query.encode("ascii")).decode("ascii")


def requests_for(info: dict, who: str) -> list[tuple[str, str]]:
    """(what, url) of every request measured for `who`."""
    from agendas.models import Agenda, AgendaProgress, OperationProgress

    own = None if who == "staff" else info[who]
    customer = info["big"] if who == "staff" else own
    agenda = info["detail"][who]
    link = Agenda.objects.filter(pk=agenda).values_list("link_id", flat=True)[0]
    external = Agenda.objects.filter(pk=agenda).values_list("external_id", flat=True)[0]
    batch = (int(external.removeprefix("ext-")) // 1000) if external else 0
    half = {}
    for name, model in (
        ("agendas", Agenda),
        ("agenda-progress", AgendaProgress),
        ("operation-progress", OperationProgress),
    ):
        rows = model.objects.all() if own is None else model.objects.filter(customer_id=own)
        depth = rows.count() // 2
        half[name] = (depth, cursor_at(model, own, depth))
    since = "2026-01-01T00:00:00Z"
    urls = [
        ("page /", "/"),
        ("page / partial", "/?partial=1"),
        ("page /agendas/", "/agendas/"),
        ("page /agendas/ partial", "/agendas/?partial=1"),
        ("page /agendas/ state=failed", "/agendas/?state=failed"),
        ("page /agendas/<id>/", f"/agendas/{agenda}/"),
        ("page /agendas/<id>/ partial", f"/agendas/{agenda}/?partial=1"),
        ("page /templates/", "/templates/"),
        ("page /pools/", "/pools/"),
        ("page /pools/ partial", "/pools/?partial=1"),
        ("page /schedules/", "/schedules/"),
        ("page /progress/?link_id=", f"/progress/?link_id={link}"),
    ]
    api = "/api/v1"
    urls += [
        ("api agendas/", f"{api}/agendas/"),
        ("api agendas/ state=failed", f"{api}/agendas/?state=failed"),
        ("api agendas/ state=aborted&state=failed", f"{api}/agendas/?state=aborted&state=failed"),
        ("api agendas/ link_id", f"{api}/agendas/?link_id={link}"),
        ("api agendas/ label", f"{api}/agendas/?label=batch:{batch}"),
        ("api agendas/ customer", f"{api}/agendas/?customer={customer}"),
        ("api agendas/ insight", f"{api}/agendas/?insight={info['insight']}"),
        ("api agendas/ template", f"{api}/agendas/?template={info['template']}"),
        ("api agendas/ external_id", f"{api}/agendas/?external_id={external}"),
        ("api agendas/ id_prefix", f"{api}/agendas/?id_prefix={agenda[:6]}"),
        ("api agendas/ created_after", f"{api}/agendas/?created_after={since}"),
        ("api agendas/ ordering=created_at", f"{api}/agendas/?ordering=created_at"),
        ("api agendas/ ordering=-updated_at", f"{api}/agendas/?ordering=-updated_at"),
        ("api agendas/ ordering=priority", f"{api}/agendas/?ordering=priority"),
        ("api agendas/ cursor first page", f"{api}/agendas/?cursor="),
        ("api agendas/ offset 10,000 (the cap)", f"{api}/agendas/?offset=10000"),
        ("api agenda-progress/", f"{api}/agenda-progress/"),
        ("api agenda-progress/ state=failed", f"{api}/agenda-progress/?state=failed"),
        ("api agenda-progress/ customer", f"{api}/agenda-progress/?customer={customer}"),
        ("api agenda-progress/ external_id", f"{api}/agenda-progress/?external_id={external}"),
        ("api agenda-progress/ link_id", f"{api}/agenda-progress/?link_id={link}"),
        (
            "api agenda-progress/ ordering=percent_complete",
            f"{api}/agenda-progress/?ordering=percent_complete",
        ),
        ("api operation-progress/", f"{api}/operation-progress/"),
        ("api operation-progress/ state=failed", f"{api}/operation-progress/?state=failed"),
        ("api operation-progress/ agenda", f"{api}/operation-progress/?agenda={agenda}"),
        ("api operation-progress/ name=b", f"{api}/operation-progress/?name=b"),
        (
            "api operation-progress/ ordering=position",
            f"{api}/operation-progress/?ordering=position",
        ),
        ("api callback-deliveries/", f"{api}/callback-deliveries/"),
        ("api callback-deliveries/ status", f"{api}/callback-deliveries/?status=delivered"),
        ("api callback-deliveries/ agenda", f"{api}/callback-deliveries/?agenda={agenda}"),
        ("api audit-events/", f"{api}/audit-events/"),
        ("api audit-events/ action", f"{api}/audit-events/?action=agenda.rerun"),
        ("api audit-events/ customer", f"{api}/audit-events/?customer={customer}"),
        ("api schedules/", f"{api}/schedules/"),
        ("api agenda-templates/", f"{api}/agenda-templates/"),
        ("api queues/", f"{api}/queues/"),
        ("api alerts/", f"{api}/alerts/"),
        ("api progress-summary/?link_id=", f"{api}/progress-summary/?link_id={link}"),
    ]
    for name, (depth, cursor) in half.items():
        query = urlencode({"cursor": cursor})
        urls.append((f"api {name}/ cursor halfway ({depth:,} deep)", f"{api}/{name}/?{query}"))
    depth = half["agendas"][0]
    urls.append(
        (
            f"api agendas/ offset halfway ({depth:,})",
            f"{api}/agendas/?offset={depth}",
        )
    )
    if who == "staff":
        urls += [
            ("page /audit/", "/audit/"),
            ("admin agenda ?q=<external id>", f"/admin/agendas/agenda/?q={external}"),
            ("admin agendaprogress", "/admin/agendas/agendaprogress/"),
            ("admin operationprogress", "/admin/agendas/operationprogress/"),
            ("admin execution", "/admin/agendas/execution/"),
            ("admin auditevent", "/admin/audit/auditevent/"),
        ]
    return urls


def timed(client, url: str, **headers) -> tuple[float, int, int, int | None]:
    """One warm-up, then the better of two runs (one when it is slow): (ms, statements, status,
    rows in the answer's `results` — None for a page). On a shared machine the slower of two
    warm runs is the noise; the median of 3 it replaced cost a third more of the phase for the
    same figure. Without the warm-up (tried: the better of two runs, the first cold) a few
    requests of a few ms went over 2 × their 10k figure on a noisy run."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def once() -> tuple[float, int, int, int | None]:
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url, headers=headers)
            seconds = time.perf_counter() - started
        shown = None
        if response.get("Content-Type", "").startswith("application/json"):
            results = response.json().get("results") if response.status_code == 200 else None
            shown = len(results) if isinstance(results, list) else None
        return seconds * 1000, len(queries.captured_queries), response.status_code, shown

    warm = once()
    runs = [once()] if warm[0] > SLOW_S * 1000 else [once() for _ in range(2)]
    return min(r[0] for r in runs), runs[0][1], runs[0][2], runs[0][3]


def explain(url: str, client) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the slowest statement of one request."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    slowest = max(queries.captured_queries, key=lambda q: float(q["time"]))
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {slowest['sql']}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
    except Exception as error:  # a statement EXPLAIN cannot take: say so, keep measuring
        plan = f"(no plan: {error})"
    return f"{slowest['time']} s: {slowest['sql'][:600]}\n{plan}"


def measure(total: int) -> dict:
    """Build one size in its own database and measure it; returns plain data."""
    name = f"pop_bench_history_{total}"
    with bench_database(name) as dbname:
        django_setup(dbname, POP_FILL_NUDGE="off", POP_METRICS_TOKEN=METRICS_TOKEN)
        logging.getLogger("django.request").setLevel(logging.ERROR)  # the expected 400s
        from django.test import Client

        from bench.alerts import make_rules, one_pass
        from bench.reap import counted_reap

        info = build_world(dbname, total)
        rows = []
        for who in ("staff", "big", "small"):
            client = Client()
            client.force_login(user(info["users"][who]))
            for what, url in requests_for(info, who):
                ms, statements, status, shown = timed(client, url)
                rows.append(
                    {
                        "what": what,
                        "who": who,
                        "ms": ms,
                        "q": statements,
                        "status": status,
                        "shown": shown,
                    }
                )
                if ms > TARGET_MS and status != 400:
                    rows[-1]["explain"] = explain(url, client)
                say(f"  {who:5} {what:58} {ms:8.1f} ms {statements:3} q  {status}")
        ms, statements, status, _ = timed(
            Client(), "/metrics", Authorization=f"Bearer {METRICS_TOKEN}"
        )
        rows.append(
            {"what": "/metrics", "who": "token", "ms": ms, "q": statements, "status": status}
        )
        say(f"  token /metrics {ms:.1f} ms {statements} q {status}")

        make_rules(info["customer_ids"], [info["insight"]], json.loads(info["world"])["owner_id"])
        first_s, first_q, _ = one_pass()
        later = [one_pass() for _ in range(3)]
        alerts = {"first_s": first_s, "first_q": first_q}
        alerts["next_s"] = statistics.median(p[0] for p in later)
        alerts["next_q"] = later[0][1]
        say(f"  alerts: first pass {first_s:.3f} s ({first_q} q), then {alerts['next_s']:.3f} s")
        hot = hot_path(dbname, info)
        say(f"  hot path: {hot['ms']:.2f} ms and {hot['q']:.2f} statements an agenda")
        reaped, seconds, statements = counted_reap()
        reap = {"reaped": reaped, "seconds": seconds, "q": statements}
        say(f"  reap: {reaped:,} in {seconds:.2f} s = {reaped / seconds:,.0f}/s")
        close_django_connections()
    return {
        "rows": rows,
        "alerts": alerts,
        "hot": hot,
        "reap": reap,
        "build_s": info["build_s"],
    }


HOT_ROUNDS = 60


def hot_path(dbname: str, info: dict) -> dict:
    """The worker's loop over a long history: pull 10 (filling the default queue of 10 inline)
    and one batch report of their successes, `HOT_ROUNDS` times, in process, on agendas made
    ready for it (5 for each of 120 customers). Returns the median ms an agenda over the
    rounds and the statements an agenda."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from resourcepools.models import Insight
    from scheduling.pull import insight_pull
    from scheduling.report import execution_report_batch

    close_django_connections()
    bulk_insert_ready(
        dbname, insight_id=info["insight"], customer_ids=info["customer_ids"][:120], per_customer=5
    )
    insight = Insight.objects.get(pk=info["insight"])
    worker = get_user_model().objects.get(pk=World.from_json(info["world"]).worker_user_id)
    statements, per_agenda, moved = 0, [], 0

    def count(execute, sql, params, many, context):
        nonlocal statements
        statements += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        for _ in range(HOT_ROUNDS):
            started = time.perf_counter()
            pulled = insight_pull(principal=worker, insight=insight, worker="hot", count=HOT_PULL)
            execution_report_batch(
                reports=[
                    {
                        "execution": item.execution.pk,
                        "lease_token": item.execution.lease_token,
                        "state": "succeeded",
                    }
                    for item in pulled
                ]
            )
            if pulled:
                per_agenda.append((time.perf_counter() - started) * 1000 / len(pulled))
                moved += len(pulled)
    return {
        "ms": statistics.median(per_agenda),
        "q": statements / max(moved, 1),
        "agendas": moved,
    }


# --- the phase ---------------------------------------------------------------------------


def run(*, quick: bool) -> PhaseResult:
    small, large = 10_000, 100_000 if quick else 1_000_000
    result = PhaseResult(
        phase="history",
        sizes={
            "agendas of the year (plus 10% expired)": f"{small:,} and {large:,}",
            "customers (big: 60% of the agendas)": f"{CUSTOMERS:,} ({BIG})",
            "alert rules": 400,
        },
    )
    started = time.perf_counter()
    measured = {}
    with tempfile.TemporaryDirectory(prefix="pop-history-") as workdir:
        for total in (small, large):  # one process a size: Django is set up once per process
            out = Path(workdir) / f"{total}.json"
            say(f"  size {total:,} …")
            subprocess.run(
                [PYTHON, "-m", "bench.history", "--size", str(total), "--out", str(out)],
                cwd=ROOT,
                check=True,
            )
            measured[total] = json.loads(out.read_text())
    lines = report(measured[small], measured[large], small, large)
    result.notes.extend(lines["notes"])
    for figure in lines["figures"]:
        result.add(**figure)
    print("\n".join(lines["table"]), flush=True)
    result.seconds = time.perf_counter() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    parser.add_argument("--size", type=int, help="measure this one size (a child process)")
    args = parser.parse_args()
    if args.size:
        data = measure(args.size)
    else:
        data = run(quick=args.quick).to_dict()
    if args.out:
        Path(args.out).write_text(json.dumps(data))


if __name__ == "__main__":
    main()
