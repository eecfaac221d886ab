"""POP's benchmarks: `python -m bench.compare [--quick] [--phases ...]` (`make bench`).

Prints the environment, runs each phase in its own process and its own PostgreSQL database
(created from a freshly migrated template and dropped afterwards), then prints one table with
the ratios and the bench/RESULTS.md targets and writes it, dated, into bench/RESULTS.md between the
`bench:begin`/`bench:end` markers (the analysis around them is kept).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import env
from bench.common import (
    PYTHON,
    ROOT,
    TEMPLATE_DB,
    Figure,
    PhaseResult,
    drop_database,
    migrate_template,
    say,
    sizes_for,
)

PHASES = {
    "limit": "bench.limit",
    "engine": "bench.engine",
    "setbased": "bench.setbased",
    "e2e": "bench.e2e",
    "http": "bench.over_http",
    "cycle": "bench.setbased_cycle",
    "peers": "bench.peers",
    "fill": "bench.fill_cost",
    "fill_tenants": "bench.fill_tenants",
    "fair_share": "bench.fair_share",
    "fairness": "bench.fairness",
    "rate": "bench.rate_limit",
    "reap": "bench.reap",
    "partitions": "bench.partitions",
    "alerts": "bench.alerts",
    "history": "bench.history",
}
NEEDS_TEMPLATE = {
    "engine",
    "setbased",
    "e2e",
    "http",
    "cycle",
    "fill",
    "fill_tenants",
    "fair_share",
    "fairness",
    "rate",
    "reap",
    "partitions",
    "alerts",
    "history",
}
RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def run_phase(name: str, quick: bool, workdir: Path, results: dict[str, PhaseResult]) -> None:
    out = workdir / f"{name}.json"
    argv = [PYTHON, "-m", PHASES[name], "--out", str(out)]
    if quick:
        argv.append("--quick")
    if name in ("engine", "setbased") and "limit" in results:
        limit = workdir / "limit.json"
        argv += ["--limit", str(limit)]
    say(f"phase {name} …")
    started = time.perf_counter()
    process = subprocess.run(argv, cwd=ROOT, timeout=900)
    if process.returncode != 0 or not out.exists():
        result = PhaseResult(phase=name, rejected=f"the phase failed (exit {process.returncode})")
    else:
        result = PhaseResult.from_dict(json.loads(out.read_text()))
    result.seconds = time.perf_counter() - started
    results[name] = result
    say(
        f"phase {name} done in {result.seconds:.0f} s"
        + (f" — {result.rejected}" if result.rejected else "")
    )


def cross_figures(results: dict[str, PhaseResult]) -> None:
    """Ratios that need two phases: POP end to end against the best peer."""
    peers = results.get("peers")
    e2e = results.get("e2e")
    if not peers or not e2e:
        return
    best = max(
        (f for f in peers.figures if f.metric.endswith("end to end") and _finite(f.value)),
        key=lambda f: f.value,
        default=None,
    )
    if best is None:
        return
    for figure in e2e.figures:
        if figure.metric == "in-process end to end" and _finite(figure.value):
            figure.ratio = figure.value / best.value
            figure.reference = f"best peer ({best.metric.removesuffix(' end to end')})"
            figure.target = "≥ 1.5 × best peer"
            figure.ok = figure.ratio >= 1.5
    best_cpu = _figure(peers, f"{best.metric}, CPU per job (whole machine)")
    for figure in e2e.figures:
        if figure.metric.endswith("CPU per agenda (whole machine)") and best_cpu is not None:
            figure.ratio = figure.value / best_cpu.value
            figure.reference = f"CPU per job of {best.metric.removesuffix(' end to end')}"
    _against_celery(e2e, peers)
    http = results.get("http")
    if http:
        for figure in http.figures:
            if figure.metric == "over HTTP end to end" and _finite(figure.value):
                figure.ratio = figure.value / best.value
                figure.reference = f"best peer ({best.metric.removesuffix(' end to end')})"


def _figure(result: PhaseResult, metric: str) -> Figure | None:
    """`result`'s figure named `metric`, when it has a value."""
    return next((f for f in result.figures if f.metric == metric and _finite(f.value)), None)


def _against_celery(e2e: PhaseResult, peers: PhaseResult) -> None:
    """Issue 22's in-process targets, from this run's peers: POP's CPU per agenda at or under
    Celery + Redis's per no-op job, and a rate above every peer but PgQueuer."""
    celery_cpu = _figure(peers, "Celery + Redis end to end, CPU per job (whole machine)")
    pop_cpu = _figure(e2e, "in-process end to end, CPU per agenda (whole machine)")
    pop_rate = _figure(e2e, "in-process end to end")
    if pop_cpu is not None and celery_cpu is not None:
        figure = e2e.add(
            "in-process end to end, CPU per agenda against Celery + Redis",
            pop_cpu.value,
            "ms",
            target="≤ 1 × Celery's",
            ok=pop_cpu.value <= celery_cpu.value,
        )
        figure.ratio = pop_cpu.value / celery_cpu.value
        figure.reference = "Celery + Redis's CPU per no-op job"
    others = [
        f
        for f in peers.figures
        if f.metric.endswith(" end to end") and "PgQueuer" not in f.metric and _finite(f.value)
    ]
    if pop_rate is not None and others:
        fastest = max(others, key=lambda f: f.value)
        figure = e2e.add(
            "in-process end to end against the peers but PgQueuer",
            pop_rate.value,
            "agendas/s",
            target="> 1 × the fastest",
            ok=pop_rate.value > fastest.value,
        )
        figure.ratio = pop_rate.value / fastest.value
        figure.reference = f"{fastest.metric.removesuffix(' end to end')} (the fastest)"


def floor_figures(results: dict[str, PhaseResult]) -> None:
    """POP's CPU, WAL and shared buffers per agenda over HTTP against the set-based sketch of
    the same cycle (the database's own minimum for the contract's rows,
    bench/setbased_cycle.py)."""
    http, cycle = results.get("http"), results.get("cycle")
    if not http or not cycle:
        return
    floor = {f.metric.rsplit(": ", 1)[-1]: f.value for f in cycle.figures if "CPU" in f.metric}
    work = {
        f.metric.rsplit(", ", 1)[-1]: f.value
        for f in cycle.figures
        if f.metric.endswith(" per agenda") and "CPU" not in f.metric
    }
    for figure in http.figures:
        sketch = work.get(figure.metric)
        if _finite(figure.value) and _finite(sketch) and sketch:
            # Pages touched and WAL written: the work itself, which CPU contention does not
            # inflate (both runs with the autovacuum stand-in).
            figure.ratio = figure.value / sketch
            figure.reference = "the sketch's (cycle)"
    if not all(_finite(floor.get(part)) for part in ("postgresql", "client")):
        return
    whole = floor["postgresql"] + floor["client"]
    for figure in http.figures:
        if not _finite(figure.value):
            continue
        if figure.metric == "CPU per agenda: postgresql":
            figure.ratio = figure.value / floor["postgresql"]
            figure.reference = "the sketch's PostgreSQL CPU (cycle)"
        elif figure.metric == "CPU per agenda: all processes":
            figure.ratio = figure.value / whole
            figure.reference = "the sketch's PostgreSQL + client CPU (cycle)"


def _finite(value) -> bool:
    return isinstance(value, int | float) and not math.isnan(value)


def fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)


def table(results: dict[str, PhaseResult]) -> list[str]:
    lines = [
        "| phase | metric | value | unit | ratio | target | met |",
        "|---|---|---:|---|---:|---|---|",
    ]
    for result in results.values():
        if result.rejected:
            lines.append(f"| {result.phase} | **run rejected** | — | | | | {result.rejected} |")
        for f in result.figures:
            ratio = f"{fmt(f.ratio)} × {f.reference}" if f.ratio is not None else ""
            met = {True: "yes", False: "**no**", None: ""}[f.ok]
            lines.append(
                f"| {f.phase} | {f.metric} | {fmt(f.value)} | {f.unit} | {ratio} | {f.target} "
                f"| {met} |"
            )
    return lines


def report(
    results: dict[str, PhaseResult], environment: dict[str, str], quick: bool, seconds: float
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"### Run of {now} ({'--quick' if quick else 'full'}, {seconds:.0f} s)",
        "",
        "Environment: "
        + "; ".join(
            f"{key} {value}"
            for key, value in environment.items()
            if not key.startswith("package ") or key.endswith(("Django", "django-q2", "psycopg"))
        ),
        "",
        "Packages: "
        + ", ".join(
            f"{key.removeprefix('package ')} {value}"
            for key, value in environment.items()
            if key.startswith("package ")
        ),
        "",
        *table(results),
        "",
        "Sizes:",
        "",
    ]
    for result in results.values():
        sizes = ", ".join(f"{k} {v}" for k, v in result.sizes.items())
        lines.append(f"- {result.phase} ({result.seconds:.0f} s): {sizes}")
    notes = [(r.phase, note) for r in results.values() for note in r.notes]
    peers = results.get("peers")
    if peers:
        for figure in peers.figures:
            if figure.note:
                notes.append(
                    ("peers", f"{figure.metric.removesuffix(' end to end')}: {figure.note}")
                )
    # Why a row reads "no", where its phase said (e.g. which requests of the history missed).
    for result in results.values():
        if result.phase == "peers":
            continue
        for figure in result.figures:
            if figure.note and figure.ok is False:
                notes.append((result.phase, f"{figure.metric} (no): {figure.note}"))
    if notes:
        lines += ["", "Notes:", ""]
        lines += [f"- {phase}: {note}" for phase, note in notes]
    return "\n".join(lines) + "\n"


def write_results(text: str) -> None:
    body = RESULTS.read_text() if RESULTS.exists() else f"# Benchmark results\n\n{BEGIN}\n{END}\n"
    if BEGIN not in body or END not in body:
        body += f"\n{BEGIN}\n{END}\n"
    head, rest = body.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    RESULTS.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: about a minute")
    parser.add_argument("--phases", nargs="*", choices=list(PHASES), default=list(PHASES))
    parser.add_argument(
        "--no-write", action="store_true", help="print the table, leave RESULTS.md alone"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    environment = env.collect()
    say("environment:")
    for key, value in environment.items():
        print(f"    {key:32} {value}", flush=True)
    say(f"sizes ({'quick' if args.quick else 'full'}): {sizes_for(args.quick)}")
    results: dict[str, PhaseResult] = {}
    phases = [name for name in PHASES if name in args.phases]
    try:
        if NEEDS_TEMPLATE & set(phases):
            say(f"migrated template database in {migrate_template():.0f} s")
        with tempfile.TemporaryDirectory(prefix="pop-bench-") as workdir:
            for name in phases:
                run_phase(name, args.quick, Path(workdir), results)
    finally:
        drop_database(TEMPLATE_DB)
    cross_figures(results)
    floor_figures(results)
    seconds = time.perf_counter() - started
    text = report(results, environment, args.quick, seconds)
    print()
    print(text)
    if not args.no_write:
        write_results(text)
        say(f"written to {RESULTS.relative_to(ROOT)}")
    say(f"total {seconds:.0f} s")
    if any(result.rejected for result in results.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
