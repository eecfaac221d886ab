"""End to end, in-process: a bulk submitter + fill on its schedule and on demand + 2 pullers.

Processes (forked, each with its own connection): one submitter (`agendas_submit_many`,
batches of 100, 5 customers in turn), one filler in the cluster's place (`insights_fill` every
POP_FILL_INTERVAL = 2 s, and in between the fills of the insights nudged over LISTEN/NOTIFY, as
the ticker does them: POP_FILL_NUDGE=notify, the default), two pullers (`insight_pull` count
10 + one `execution_report_batch` per pull; a pull that comes up short fills inline). The
insight's queue_size is 100. Figures come from database timestamps over agendas that reached
a terminal state; the whole machine's CPU per terminal agenda is read from /proc/stat over the
run.
"""

from __future__ import annotations

import multiprocessing
import time

from bench import workers
from bench.autovacuum import autovacuum_stand_in
from bench.common import (
    PhaseResult,
    World,
    bench_database,
    close_django_connections,
    django_setup,
    machine_cpu_seconds,
    make_world,
    phase_main,
    say,
    sizes_for,
    vacuum_analyze,
)
from bench.outcomes import pulled_twice, state_counts, timings

CUSTOMERS = 5
PULLERS = 2
QUEUE_SIZE = 100
FILL_PERIOD = 2.0


def run_pipeline(
    dbname: str, world: World, total: int, submit_seconds: float, drain_seconds: float
) -> dict:
    """Run submitter + filler + pullers on an already set-up database; return the figures."""
    context = multiprocessing.get_context("fork")
    stop, out, submitted_out = context.Event(), context.Queue(), context.Queue()
    close_django_connections()
    cpu_started = machine_cpu_seconds()
    processes = [
        context.Process(target=workers.filler, args=(world, FILL_PERIOD, stop), name="filler"),
        *(
            context.Process(target=workers.puller, args=(world, 10, stop, out), name=f"puller{n}")
            for n in range(PULLERS)
        ),
    ]
    for process in processes:
        process.start()
    submitter = context.Process(
        target=workers.submitter,
        args=(world, world.customers, total, submit_seconds, submitted_out),
        name="submitter",
    )
    submitter.start()
    submitter.join()
    submitted = submitted_out.get(timeout=60)[1]
    deadline = time.monotonic() + drain_seconds
    while time.monotonic() < deadline:
        counts = state_counts(dbname)
        if counts.get("succeeded", 0) + counts.get("failed", 0) >= submitted:
            break
        time.sleep(0.25)
    cpu_used = machine_cpu_seconds() - cpu_started
    stop.set()
    pulled = failures = 0
    for _ in range(PULLERS):
        _, n, bad = out.get(timeout=60)
        pulled, failures = pulled + n, failures + bad
    for process in processes:
        process.join(timeout=30)
    figures = timings(dbname)
    figures.update(
        submitted=submitted,
        pulled=pulled,
        report_failures=failures,
        twice=pulled_twice(dbname),
        states=state_counts(dbname),
    )
    figures["cpu_ms_per_agenda"] = cpu_used / max(figures.get("terminal", 0), 1) * 1000
    return figures


def run(*, quick: bool) -> PhaseResult:
    sizes = sizes_for(quick)
    total = sizes["e2e_agendas"]
    submit_seconds = sizes["e2e_seconds"]
    result = PhaseResult(
        phase="e2e",
        sizes={
            "agendas": total,
            "customers": CUSTOMERS,
            "pullers": PULLERS,
            "queue_size": QUEUE_SIZE,
            "submitting stops after (s)": submit_seconds,
        },
    )
    started = time.perf_counter()
    with bench_database("pop_bench_e2e") as dbname:
        django_setup(dbname, POP_FILL_NUDGE="notify", POP_FILL_INTERVAL=str(FILL_PERIOD))
        world = make_world(customers=CUSTOMERS, queue_size=QUEUE_SIZE)
        close_django_connections()
        vacuum_analyze(dbname)
        with autovacuum_stand_in(dbname):
            figures = run_pipeline(dbname, world, total, submit_seconds, drain_seconds=20.0)
        record(result, figures, label="in-process")
        result.add(
            "in-process end to end, CPU per agenda (whole machine)",
            figures["cpu_ms_per_agenda"],
            "ms",
        )
        say(f"  in-process CPU per agenda (whole machine): {figures['cpu_ms_per_agenda']:.2f} ms")
    result.seconds = time.perf_counter() - started
    return result


def record(result: PhaseResult, figures: dict, *, label: str) -> None:
    if figures["twice"]:
        result.rejected = f"{figures['twice']} agenda(s) pulled twice in one attempt"
    lost = figures["submitted"] - figures.get("terminal", 0)
    if lost:
        result.notes.append(
            f"{lost} of {figures['submitted']} submitted agendas were not terminal when the run "
            f"stopped (states {figures['states']}); only terminal agendas count"
        )
    if figures.get("report_failures"):
        result.notes.append(f"{figures['report_failures']} report item(s) were refused")
    say(
        f"  {label}: {figures.get('terminal', 0)} of {figures['submitted']} agendas terminal, "
        f"{figures.get('rate', 0):.0f} agendas/s; submit→pull p50 {figures.get('pull_p50', 0):.0f}"
        f" ms p99 {figures.get('pull_p99', 0):.0f} ms; submit→complete p50 "
        f"{figures.get('complete_p50', 0):.0f} ms p99 {figures.get('complete_p99', 0):.0f} ms"
    )
    result.add(f"{label} end to end", figures.get("rate"), "agendas/s")
    result.add(f"{label} submit→pull p50", figures.get("pull_p50"), "ms")
    result.add(f"{label} submit→pull p99", figures.get("pull_p99"), "ms")
    result.add(f"{label} submit→complete p50", figures.get("complete_p50"), "ms")
    result.add(f"{label} submit→complete p99", figures.get("complete_p99"), "ms")


if __name__ == "__main__":
    phase_main(run, __doc__)
