"""The reference puller (docs/design.md §6.3–§7). One :class:`Worker` long-polls one insight
(each pull with a new ``request_id``, so a lost answer is asked for again, not lost), runs up
to ``concurrency`` agendas at once (a :class:`~popclient.dag.DagRunner` each), and reports
through one reporter thread:

- a report for an execution at least every ``lease_seconds / 3``, at once on every
  operation state change, and progress-only changes within ``progress_interval`` seconds;
- the lease is timed on this machine's clock (popclient/lease.py): no operation starts on
  less than a third of it, and a lease that lapses unrenewed cancels the agenda's handlers;
- ``abort``/``pause`` flags in an answer abort or pause that agenda's runner;
- a 409 (or 404, or 403 for a refused lease) answer means the execution is no longer ours:
  the runner is cancelled and nothing more is reported for it;
- the final report carries ``state: succeeded|failed|aborted|paused``.

With ``batch > 1`` pulls ask for up to ``batch`` agendas and reports go through the batch
endpoint ``executions/report/``, all those due at the same moment in one call.

Shutdown (:meth:`Worker.stop`, SIGTERM in the CLI): stop pulling, let running agendas
finish for up to ``drain_seconds``, then hand back what still runs: its handlers are
cancelled and it is reported ``failed`` (message "worker W shut down; handed back for
retry"), so the server retries it at the point of failure (succeeded operations are kept);
not ``paused``, which waits for a person. In tests: ``Worker(client, insight).run()`` in a
thread returns an exit code; ``stop()`` from another thread ends it.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from popclient.client import PopClient
from popclient.dag import DagRunner
from popclient.errors import (
    Conflict,
    Forbidden,
    NotFound,
    PopError,
    Unauthorized,
    ValidationFailed,
)
from popclient.handlers import HandlerRegistry, default_registry
from popclient.lease import LeaseClock, seconds_until
from popclient.operation_state import FAILED, DagResult, diagnostic
from popclient.transport import error_from_batch_item, retry_delay

log = logging.getLogger(__name__)

_UUID = re.compile(r"^[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$")
MAX_BATCH_REPORTS = 100
DEFAULT_LEASE_SECONDS = 60.0
IDLE_PULL_PAUSE = 0.5  # least time between two empty pulls


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def default_worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class _Report:
    run: AgendaRun
    body: dict[str, Any]
    versions: dict[str, int]
    final: bool
    sent_at: float = 0.0


class AgendaRun:
    """One pulled agenda: its runner thread, lease and reporting bookkeeping."""

    def __init__(self, worker: Worker, item: Mapping[str, Any], *, sent_at: float) -> None:
        self.worker = worker
        self.agenda: dict[str, Any] = dict(item.get("agenda") or {})
        execution = item.get("execution") or {}
        self.execution_id = str(execution.get("id"))
        self.lease_token = str(execution.get("lease_token"))
        self.agenda_id = str(self.agenda.get("id") or "")
        self.cid = self.agenda.get("cid") or None
        # Timed from when the pull was sent (popclient/lease.py). A server that does not send
        # `lease_seconds` gives only the end: what is left of it now (none once it passed).
        lease = _number(execution.get("lease_seconds"))
        if lease is not None and lease > 0:
            self.lease = LeaseClock(lease, holds_until=sent_at + lease)
        else:
            left = seconds_until(execution.get("lease_expires_at"))
            if left is None and not execution.get("lease_expires_at"):
                left = worker.default_lease_seconds
            self.lease = LeaseClock(
                left or worker.default_lease_seconds,
                holds_until=time.monotonic() + max(0.0, left or 0.0),
            )
        self.lease_seconds = self.lease.seconds
        self.interval = worker.report_interval(self.lease_seconds)
        self.started = time.monotonic()
        self.last_report = 0.0  # monotonic time of the last report attempt (0: none yet)
        self.last_success = time.monotonic()
        self.retry_at = 0.0
        self.failures = 0
        self.urgent = True  # the first report says "executing" without waiting
        self.dirty = False
        self.sent_versions: dict[str, int] = {}
        self.result: DagResult | None = None
        self.done = False
        self.dropped = False
        self.in_flight = False
        progress = item.get("progress")
        self.runner = DagRunner(
            self.agenda,
            registry=worker.registry,
            prior_progress=progress if isinstance(progress, Mapping) else None,
            max_parallel=worker.parallel,
            on_change=self._changed,
            on_add_operations=self._add_operations,
            abort_grace_seconds=worker.abort_grace_seconds,
            lease=self,
        )
        self.thread = threading.Thread(
            target=self._run, name=f"pop-agenda-{self.agenda_id[:8]}", daemon=True
        )

    def _changed(self, urgent: bool) -> None:
        with self.worker._cond:
            if urgent:
                self.urgent = True
            else:
                self.dirty = True
            self.worker._cond.notify_all()

    # -- the lease (popclient.lease.LeaseGate) ----------------------------------------------

    def fresh(self) -> bool:
        return self.lease.fresh()

    def renew(self) -> None:
        """A heartbeat now, before starting an operation on a short lease."""
        if self.lease.lost or self.lease.left() <= 0:
            return
        sent_at = time.monotonic()
        try:
            answer = self.worker.client.report(self.execution_id, self.lease_token, cid=self.cid)
        except (Conflict, NotFound, Forbidden) as exc:
            self.worker.lose(self, f"renewal refused: {exc}")
            return
        except PopError as exc:
            log.warning("agenda %s: lease renewal failed (%s)", self.agenda_id, exc)
            return
        answer = answer if isinstance(answer, Mapping) else {}
        if answer.get("lease_expires_at"):
            self.lease.renewed(sent_at)
        if answer.get("abort"):
            self.runner.request_abort("aborted on request")
        elif answer.get("pause"):
            self.runner.request_pause(now=bool(answer.get("pause_now")))

    def _add_operations(self, operations: list[dict[str, Any]]) -> None:
        self.worker.client.add_operations(
            self.execution_id, self.lease_token, operations, cid=self.cid
        )

    def _run(self) -> None:
        try:
            result = self.runner.run()
        except Exception as exc:  # keep the worker alive; report the agenda failed
            log.exception("agenda %s: runner crashed", self.agenda_id)
            result = DagResult(
                state=FAILED,
                message=f"worker error: {exc}",
                retryable=True,
                percent_complete=self.runner.percent_complete(),
                diagnostics=[diagnostic(f"worker error: {exc}", code="worker_error")],
                operations=self.runner.operations(),
            )
        with self.worker._cond:
            self.result = result
            self.urgent = True
            self.worker._cond.notify_all()
        log.info("agenda %s finished: %s (%s)", self.agenda_id, result.state, result.message)

    # -- reporting (called by the reporter under worker._cond) --------------------------

    def due_at(self) -> float:
        """Monotonic time at which this run next needs a report."""
        if self.done or self.in_flight:
            return float("inf")
        if self.retry_at:
            return self.retry_at
        if self.urgent or self.result is not None:
            return 0.0
        due = self.last_report + self.interval if self.last_report else 0.0
        if self.dirty:
            due = min(due, self.last_report + self.worker.progress_interval)
        return due

    def build(self) -> _Report:
        items, versions = self.runner.changes_since(self.sent_versions)
        body: dict[str, Any] = {}
        if items:
            body["operations"] = items
        result = self.result
        if result is not None:
            body["state"] = result.state
            if result.state == "failed" and not result.retryable:
                body["retryable"] = False
            body["percent_complete"] = result.percent_complete
            body["message"] = result.message[:2000]
            if result.diagnostics:
                body["diagnostics"] = result.diagnostics
        else:
            body["percent_complete"] = self.runner.percent_complete()
        self.urgent = False
        self.dirty = False
        self.in_flight = True
        self.last_report = time.monotonic()
        return _Report(self, body, versions, result is not None, sent_at=self.last_report)


class Worker:
    """Pulls agendas from one insight and runs them. See the module docstring."""

    def __init__(
        self,
        client: PopClient,
        insight: str,
        *,
        registry: HandlerRegistry | None = None,
        name: str | None = None,
        concurrency: int = 1,
        batch: int = 1,
        parallel: int = 8,
        wait_seconds: float = 10.0,
        drain_seconds: float = 30.0,
        progress_interval: float = 5.0,
        abort_grace_seconds: float = 5.0,
        default_lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_report_interval: float = 20.0,
        max_agendas: int | None = None,
        idle_exit_seconds: float | None = None,
    ) -> None:
        self.client = client
        self.insight = insight
        self.insight_id: str | None = insight if _UUID.match(insight) else None
        self.registry = registry or default_registry()
        self.name = name or default_worker_name()
        self.concurrency = max(1, concurrency)
        self.batch = max(1, min(100, batch))
        self.parallel = max(1, parallel)
        self.wait_seconds = max(0.0, min(20.0, wait_seconds))
        self.drain_seconds = max(0.0, drain_seconds)
        self.progress_interval = progress_interval
        self.abort_grace_seconds = abort_grace_seconds
        self.default_lease_seconds = default_lease_seconds
        self.max_report_interval = max_report_interval
        self.max_agendas = max_agendas
        self.idle_exit_seconds = idle_exit_seconds
        self.pulled = 0
        self.outcomes: dict[str, str] = {}  # agenda id → final state reported (or "dropped")
        self._cond = threading.Condition()
        self._runs: dict[str, AgendaRun] = {}
        self._stopping = threading.Event()
        self._drain_deadline: float | None = None
        self._reporter: threading.Thread | None = None
        self._reporter_stop = False

    def report_interval(self, lease_seconds: float) -> float:
        """A third of the lease, capped so a server clock ahead of ours cannot stretch it."""
        return max(0.2, min(lease_seconds / 3, self.max_report_interval))

    # -- control ------------------------------------------------------------------------

    def stop(self, *, immediate: bool = False, finish: bool = False) -> None:
        """Stop pulling. Running agendas get ``drain_seconds`` to finish (none if
        ``immediate``, as long as they need if ``finish``), then are handed back."""
        with self._cond:
            if finish:
                deadline = float("inf")
            else:
                deadline = time.monotonic() + (0.0 if immediate else self.drain_seconds)
            if self._drain_deadline is None or deadline < self._drain_deadline:
                self._drain_deadline = deadline
            self._stopping.set()
            self._cond.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def active(self) -> int:
        with self._cond:
            return len(self._runs)

    # -- main loop ----------------------------------------------------------------------

    def resolve_insight(self) -> str:
        """The insight's id: ``--insight`` may be an id or a name."""
        if self.insight_id:
            return self.insight_id
        for insight in self.client.paginate("insights/"):
            if str(insight.get("name", "")).lower() == self.insight.lower():
                self.insight_id = str(insight["id"])
                return self.insight_id
        raise NotFound(f"no visible insight named {self.insight!r}")

    def run(self) -> int:
        """Pull and run until stopped (or ``max_agendas``/``idle_exit_seconds``); exit code."""
        insight_id = None
        failures = 0
        while insight_id is None:
            try:
                insight_id = self.resolve_insight()
            except (Unauthorized, Forbidden, NotFound, ValidationFailed) as exc:
                log.error("cannot resolve insight %s: %s", self.insight, exc)
                return 1
            except PopError as exc:  # the server is restarting, overloaded, unreachable
                failures += 1
                delay = retry_delay(failures)
                log.warning("cannot reach the server (%s); retrying in %.1fs", exc, delay)
                if self._stopping.wait(delay):
                    return 0
        log.info(
            "worker %s pulling insight %s (concurrency %d, batch %d, handlers: %s)",
            self.name,
            insight_id,
            self.concurrency,
            self.batch,
            ", ".join(self.registry.types()),
        )
        self._reporter = threading.Thread(
            target=self._report_loop, name="pop-reporter", daemon=True
        )
        self._reporter.start()
        exit_code = 0
        failures = 0
        idle_since = time.monotonic()
        try:
            while not self._stopping.is_set():
                if self.max_agendas is not None and self.pulled >= self.max_agendas:
                    self.stop(finish=True)
                    break
                free = self._wait_for_slot()
                if free <= 0:
                    continue
                count = min(self.batch, free)
                if self.max_agendas is not None:
                    count = min(count, self.max_agendas - self.pulled)
                pull_started = time.monotonic()
                try:
                    items = self.client.pull(
                        insight_id,
                        count=count,
                        worker=self.name,
                        wait_seconds=self.wait_seconds,
                        request_id=uuid.uuid4().hex,  # a lost answer can be asked again
                    )
                except (Unauthorized, Forbidden, NotFound, ValidationFailed) as exc:
                    log.error("pull refused, stopping: %s", exc)
                    exit_code = 1
                    self.stop()
                    break
                except PopError as exc:
                    failures += 1
                    delay = retry_delay(failures)
                    log.warning("pull failed (%s); retrying in %.1fs", exc, delay)
                    self._stopping.wait(delay)
                    continue
                failures = 0
                for item in items:
                    self._start(item, sent_at=pull_started)
                if items:
                    idle_since = time.monotonic()
                elif (
                    self.idle_exit_seconds is not None
                    and self.active() == 0
                    and time.monotonic() - idle_since >= self.idle_exit_seconds
                ):
                    self.stop(finish=True)
                else:
                    # An empty answer that came back at once (no long-poll): don't spin.
                    idle = IDLE_PULL_PAUSE - (time.monotonic() - pull_started)
                    if idle > 0:
                        self._stopping.wait(idle)
        finally:
            self._drain()
        return exit_code

    def _wait_for_slot(self) -> int:
        with self._cond:
            free = self.concurrency - len(self._runs)
            if free <= 0:
                self._cond.wait(timeout=1.0)
                free = self.concurrency - len(self._runs)
            return free

    def _start(self, item: Mapping[str, Any], *, sent_at: float) -> None:
        run = AgendaRun(self, item, sent_at=sent_at)
        with self._cond:
            self._runs[run.execution_id] = run
            self.pulled += 1
            self._cond.notify_all()
        log.info("agenda %s: execution %s", run.agenda_id, run.execution_id)
        run.thread.start()

    def _drain(self) -> None:
        if self._drain_deadline is None:
            self.stop()
        with self._cond:
            while self._runs and time.monotonic() < (self._drain_deadline or 0):
                self._cond.wait(timeout=0.5)
            remaining = [run for run in self._runs.values() if run.result is None]
        for run in remaining:
            log.warning("agenda %s: handing back (worker shutting down)", run.agenda_id)
            run.runner.cancel(
                outcome=FAILED,
                message=f"worker {self.name} shut down; handed back for retry",
            )
        hand_back_deadline = time.monotonic() + self.abort_grace_seconds + 10.0
        with self._cond:
            while self._runs and time.monotonic() < hand_back_deadline:
                self._cond.wait(timeout=0.5)
            if self._runs:
                log.error(
                    "giving up on %d agenda(s); the server will reclaim them when leases expire",
                    len(self._runs),
                )
            self._reporter_stop = True
            self._cond.notify_all()
        if self._reporter is not None:
            self._reporter.join(timeout=5.0)

    # -- reporting ----------------------------------------------------------------------

    def lose(self, run: AgendaRun, reason: str) -> None:
        """The execution is no longer ours (refused, or its lease lapsed): cancel its running
        handlers, start nothing more, report nothing more (the server reclaims it)."""
        log.warning("agenda %s: execution %s lost (%s)", run.agenda_id, run.execution_id, reason)
        run.lease.lost = True
        run.runner.cancel(outcome=FAILED, message=f"execution lost: {reason}")
        with self._cond:
            self._finish(run, "dropped")
            self._cond.notify_all()

    def _report_loop(self) -> None:
        while True:
            with self._cond:
                if self._reporter_stop:
                    return
                lapsed = [
                    run
                    for run in self._runs.values()
                    if run.result is None and not run.done and run.lease.left() <= 0
                ]
            for run in lapsed:  # outside the lock: cancelling takes the runner's lock
                self.lose(run, "its lease lapsed before a renewal was answered")
            with self._cond:
                if self._reporter_stop:
                    return
                now = time.monotonic()
                due = [run for run in self._runs.values() if run.due_at() <= now]
                if not due:
                    next_due = min((run.due_at() for run in self._runs.values()), default=now + 1)
                    self._cond.wait(timeout=max(0.01, min(1.0, next_due - now)))
                    continue
                reports = [run.build() for run in due]
            try:
                self._send(reports)
            except Exception:  # never let the reporter die
                log.exception("reporter error")
                with self._cond:
                    for report in reports:
                        report.run.in_flight = False
                        report.run.retry_at = time.monotonic() + 1.0

    def _send(self, reports: list[_Report]) -> None:
        if self.batch > 1:
            for start in range(0, len(reports), MAX_BATCH_REPORTS):
                chunk = reports[start : start + MAX_BATCH_REPORTS]
                self._send_batch(chunk)
            return
        for report in reports:
            try:
                answer = self.client.report(
                    report.run.execution_id,
                    report.run.lease_token,
                    cid=report.run.cid,
                    **report.body,
                )
            except PopError as exc:
                self._handle(report, None, exc)
            else:
                self._handle(report, answer, None)

    def _send_batch(self, reports: list[_Report]) -> None:
        try:
            results = self.client.report_batch(
                [
                    {
                        "execution": report.run.execution_id,
                        "lease_token": report.run.lease_token,
                        **report.body,
                    }
                    for report in reports
                ]
            )
        except PopError as exc:
            for report in reports:
                self._handle(report, None, exc)
            return
        for index, report in enumerate(reports):
            item = results[index] if index < len(results) else None
            if not isinstance(item, Mapping):
                self._handle(report, None, PopError("batch report: no result for this item"))
                continue
            error = error_from_batch_item(item)
            self._handle(report, None if error else item, error)

    def _handle(
        self, report: _Report, answer: Mapping[str, Any] | None, error: PopError | None
    ) -> None:
        run = report.run
        abort = pause = pause_now = False
        with self._cond:
            run.in_flight = False
            if error is None:
                run.sent_versions.update(report.versions)
                run.failures = 0
                run.retry_at = 0.0
                run.last_success = time.monotonic()
                answer = answer or {}
                if answer.get("lease_expires_at"):
                    run.lease.renewed(report.sent_at)
                abort = bool(answer.get("abort"))
                pause = bool(answer.get("pause"))
                pause_now = pause and bool(answer.get("pause_now"))
                if report.final:
                    self._finish(run, report.body.get("state", "?"))
            elif isinstance(error, Conflict | NotFound | Forbidden):
                log.warning(
                    "agenda %s: execution %s is no longer ours (%s); dropping it",
                    run.agenda_id,
                    run.execution_id,
                    error,
                )
                run.runner.cancel(outcome=FAILED, message="execution taken away by the server")
                self._finish(run, "dropped")
            elif isinstance(error, ValidationFailed):
                # Resending the same body cannot succeed: skip the rejected operation items,
                # and for the final report keep at least the outcome.
                log.error("agenda %s: report rejected: %s", run.agenda_id, error)
                run.sent_versions.update(report.versions)
                if report.final and "operations" in report.body:
                    run.retry_at = time.monotonic()
                elif report.final:
                    self._finish(run, "rejected")
            else:
                run.failures += 1
                lease_left = run.last_success + run.lease_seconds - time.monotonic()
                if report.final and lease_left < -run.lease_seconds:
                    log.error(
                        "agenda %s: final report undeliverable (%s); giving up",
                        run.agenda_id,
                        error,
                    )
                    self._finish(run, "undelivered")
                else:
                    delay = min(run.interval, 0.5 * 2 ** min(run.failures, 5))
                    log.warning(
                        "agenda %s: report failed (%s); retry in %.1fs", run.agenda_id, error, delay
                    )
                    run.retry_at = time.monotonic() + delay
            self._cond.notify_all()
        if abort and not run.runner.abort_requested and run.result is None:
            log.info("agenda %s: abort requested by the server", run.agenda_id)
            run.runner.request_abort("aborted on request")
        if pause and run.result is None and (not run.runner.pause_requested or pause_now):
            if not run.runner.pause_requested:
                log.info("agenda %s: pause requested by the server", run.agenda_id)
            run.runner.request_pause(now=pause_now)
        elif answer is not None and not pause and run.runner.pause_requested and not run.result:
            log.info("agenda %s: pause withdrawn by the server", run.agenda_id)
            run.runner.withdraw_pause()

    def _finish(self, run: AgendaRun, outcome: str) -> None:
        run.done = True
        run.dropped = outcome == "dropped"
        self.outcomes[run.agenda_id] = outcome
        self._runs.pop(run.execution_id, None)
