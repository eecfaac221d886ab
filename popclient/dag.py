"""Run one agenda's operations as a DAG (popclient/README.md).

- An operation waits for what ``agenda_language.dependencies.waits_for`` names, the very
  function the server validates with: its ``depends_on`` (a list, or POP's comma-separated
  string), ``params.dependsOn``, and every operation whose output its ``payload`` or its
  ``params`` reference (``@<name.out…>``). Both are resolved before the handler runs: the
  payload is its argument, the params are in ``ctx.operation["params"]``.
- Ready operations start in threads, at most ``max_parallel`` at once.
- Fail fast: after a failure no operation starts; running ones finish.
- Deadlock (nothing running, nothing ready, something pending) fails the agenda with POP's
  message.
- Operations that succeeded in the prior progress are not run again: their ``result`` is
  fed forward as ``<name>.out``. Every other operation gets its prior progress in
  ``ctx.prior``.
- ``timeout_seconds`` per operation: the handler is cancelled and the operation fails.
- With a ``lease`` (:class:`LeaseGate`), no operation starts unless more than a third of the
  lease is left; otherwise the runner renews it first (outside its lock) and waits.
- :meth:`DagRunner.request_abort` cancels running handlers (outcome ``aborted``);
  :meth:`DagRunner.request_pause` starts nothing new and lets running operations finish, or
  with ``now`` cancels them back to ``waiting`` (outcome ``paused`` unless all finished).

A worker watches the runner (no HTTP here) through ``on_change`` and ``changes_since``.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from agenda_language.dependencies import waits_for
from agenda_language.progress import percent_rollup
from agenda_language.references import AGENDA_ID, OPERATION_NAME, output_name, resolve
from popclient.handlers import (
    HandlerError,
    HandlerRegistry,
    OperationContext,
)
from popclient.lease import LeaseGate
from popclient.operation_state import (
    ABORTED,
    DEADLOCK_MESSAGE,
    EXECUTING,
    FAILED,
    PAUSED,
    PAUSED_NOW_MESSAGE,
    SUCCEEDED,
    WAITING,
    DagResult,
    OperationState,
    RunningOperation,
    diagnostic,
    handler_outcome,
    now_iso,
)

log = logging.getLogger(__name__)


class DagRunner:
    """Executes one agenda. Create, then call :meth:`run` (blocking) from any thread."""

    def __init__(
        self,
        agenda: Mapping[str, Any],
        *,
        registry: HandlerRegistry,
        prior_progress: Mapping[str, Any] | None = None,
        max_parallel: int = 8,
        on_change: Callable[[bool], None] | None = None,
        on_add_operations: Callable[[list[dict[str, Any]]], None] | None = None,
        abort_grace_seconds: float = 5.0,
        lease: LeaseGate | None = None,
    ) -> None:
        self.agenda_id = str(agenda.get("id") or "")
        self.registry = registry
        self.max_parallel = max(1, int(max_parallel))
        self.abort_grace_seconds = abort_grace_seconds
        self._on_change = on_change
        self._on_add_operations = on_add_operations
        self._lease = lease
        self._held = False  # an operation could start but the lease is short: wait
        self._lock = threading.RLock()
        self._events: queue.Queue[tuple[str, int, str, Any]] = queue.Queue()
        self._operations: dict[str, OperationState] = {}
        self._order: list[str] = []
        self._by_lower: dict[str, str] = {}
        self._definitions: dict[str, dict[str, Any]] = {}
        self._context: dict[str, Any] = {AGENDA_ID: self.agenda_id}
        self._running: dict[str, RunningOperation] = {}
        self._diagnostics: list[dict[str, Any]] = []
        self._failure_message: str | None = None
        self._stop_outcome: str | None = None  # set by cancel(): aborted / failed
        self._stop_message = ""
        self._stop_deadline: float | None = None
        self._pause = False
        self._pause_deadline: float | None = None  # a pause "now": running ones end by then
        self._started = False
        self._setup_errors: list[str] = []
        self._load(agenda, prior_progress)

    # -- setup --------------------------------------------------------------------------

    def _load(self, agenda: Mapping[str, Any], prior_progress: Mapping[str, Any] | None) -> None:
        operations = agenda.get("operations")
        if not isinstance(operations, list) or not operations:
            self._setup_errors.append("No operations in Agenda. Nothing to do.")
            return
        for index, operation in enumerate(operations):
            error = self._add(operation, index)
            if error:
                self._setup_errors.append(error)
        prior_items = []
        if isinstance(prior_progress, Mapping):
            prior_items = prior_progress.get("operations") or []
        for item in prior_items:
            if not isinstance(item, Mapping):
                continue
            name = self._by_lower.get(str(item.get("name", "")).lower())
            if name is None:
                continue
            op = self._operations[name]
            op.prior = copy.deepcopy(dict(item))
            if item.get("state") == SUCCEEDED:
                op.state = SUCCEEDED
                op.skipped = True
                op.percent_complete = 100.0
                op.result = item.get("result")
                op.message = str(item.get("message") or SUCCEEDED)
                self._context[output_name(name)] = op.result
            elif item.get("params") is not None:
                op.params = dict(item.get("params") or {})

    def _add(self, operation: Any, index: int | str) -> str | None:
        if not isinstance(operation, Mapping):
            return f"operation {index} is not an object"
        name = str(operation.get("name") or "").strip()
        if not name:
            return "Operations must have names."
        if name.lower() in self._by_lower:
            return f"Operation names must be unique: {name}"
        timeout = operation.get("timeout_seconds")
        op = OperationState(
            name=name,
            type=str(operation.get("type") or ""),
            payload=copy.deepcopy(operation.get("payload")),
            depends_on=waits_for(operation),
            timeout_seconds=float(timeout) if timeout not in (None, "") else None,
        )
        self._operations[name] = op
        self._order.append(name)
        self._by_lower[name.lower()] = name
        self._definitions[name] = copy.deepcopy(dict(operation))
        return None

    # -- control (any thread) -----------------------------------------------------------

    def _wake(self) -> None:
        self._events.put(("wake", 0, "", None))

    def _notify(self, urgent: bool) -> None:
        if self._on_change is not None:
            try:
                self._on_change(urgent)
            except Exception:  # a reporter bug must not stop the agenda
                log.exception("on_change callback failed")

    def request_abort(self, message: str = "aborted on request") -> None:
        """Cancel running handlers; the outcome is ``aborted``."""
        self.cancel(outcome=ABORTED, message=message)

    def cancel(self, *, outcome: str = ABORTED, message: str = "cancelled") -> None:
        """Cancel running handlers and start nothing more; ``outcome`` aborted or failed."""
        with self._lock:
            if self._stop_outcome is None:
                self._stop_outcome = outcome
                self._stop_message = message
                self._stop_deadline = time.monotonic() + self.abort_grace_seconds
            for running in self._running.values():
                running.ctx.cancelled.set()
        self._wake()

    def request_pause(self, *, now: bool = False) -> None:
        """Start no new operation; the outcome is ``paused``. Running operations finish, or with
        ``now`` are cancelled (``abort_grace_seconds`` to stop) and go back to ``waiting`` with
        their params — their resume state — kept."""
        with self._lock:
            self._pause = True
            if now and self._pause_deadline is None:
                self._pause_deadline = time.monotonic() + self.abort_grace_seconds
                for running in self._running.values():
                    running.paused = True
                    running.ctx.cancelled.set()
        self._wake()

    def withdraw_pause(self) -> None:
        """The pause was withdrawn before the run stopped: start operations again (one already
        cancelled by a pause "now" goes back to waiting and starts again)."""
        with self._lock:
            self._pause = False
            self._pause_deadline = None
        self._wake()

    @property
    def abort_requested(self) -> bool:
        return self._stop_outcome is not None

    @property
    def pause_requested(self) -> bool:
        return self._pause

    def percent_complete(self) -> float:
        """``(succeeded × 100 + Σ running %) / n`` (docs/design.md §6.4)."""
        with self._lock:
            return self._percent()

    def _percent(self) -> float:
        return percent_rollup((op.state, op.percent_complete) for op in self._operations.values())

    def operations(self) -> dict[str, OperationState]:
        with self._lock:
            return {name: copy.deepcopy(self._operations[name]) for name in self._order}

    def changes_since(
        self, versions: Mapping[str, int]
    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Report items of operations changed since ``versions``, and the versions now."""
        with self._lock:
            items = []
            current: dict[str, int] = {}
            for name in self._order:
                op = self._operations[name]
                current[name] = op.version
                if op.version > versions.get(name, 0):
                    items.append(op.report())
            return items, current

    # -- generated operations (POP updateAgenda) ----------------------------------------

    def add_operations(
        self, operations: list[dict[str, Any]], *, parent: str | None = None
    ) -> None:
        """Append operations while running (first persisted through ``on_add_operations``).

        An operation this agenda already has with the very same definition (generated by an
        earlier attempt of a generator that is running again) is left as it is.
        """
        if parent is not None:
            for operation in operations:
                params = dict(operation.get("params") or {})
                params.setdefault("generatedOperationParent", parent)
                operation["params"] = params
        fresh = []
        with self._lock:
            names = set(self._by_lower)
            for operation in operations:
                name = str(operation.get("name") or "").strip().lower()
                known = self._by_lower.get(name)
                if known is not None and self._definitions.get(known) == dict(operation):
                    continue
                if not name or name in names:
                    raise HandlerError(f"generated operation name missing or taken: {name!r}")
                names.add(name)
                fresh.append(operation)
        if not fresh:
            return
        operations = fresh
        if self._on_add_operations is not None:
            self._on_add_operations(operations)
        with self._lock:
            for operation in operations:
                error = self._add(operation, str(operation.get("name")))
                if error:
                    raise HandlerError(error)
                self._operations[self._order[-1]].version += 1
        self._wake()
        self._notify(True)

    # -- execution ----------------------------------------------------------------------

    def run(self) -> DagResult:
        """Execute until every operation finished, a failure drained, abort or pause."""
        with self._lock:
            if self._started:
                raise RuntimeError("a DagRunner runs once")
            self._started = True
            if self._setup_errors:
                for error in self._setup_errors:
                    self._diagnostics.append(diagnostic(error, code="invalid_agenda"))
                return self._result(FAILED, self._setup_errors[0], retryable=False)
        while True:
            self._drain_events()
            if self._lease is not None and not self._lease.fresh() and self._startable():
                self._lease.renew()  # may block on the network: never under the lock
            with self._lock:
                outcome, changed = self._step()
            if outcome is not None or changed:
                self._notify(True)
            if outcome is not None:
                return outcome
            self._wait()

    def _wait(self) -> None:
        with self._lock:
            deadlines = [r.deadline for r in self._running.values() if r.deadline is not None]
            if self._stop_deadline is not None and self._running:
                deadlines.append(self._stop_deadline)
            if self._pause_deadline is not None and self._running:
                deadlines.append(self._pause_deadline)
        timeout = 0.2 if self._held else 1.0
        if deadlines:
            timeout = max(0.0, min(min(deadlines) - time.monotonic(), timeout))
        try:
            event = self._events.get(timeout=timeout)
        except queue.Empty:
            return
        self._events.put(event)  # handled by _drain_events

    def _drain_events(self) -> None:
        changed = False
        while True:
            try:
                kind, run_id, name, value = self._events.get_nowait()
            except queue.Empty:
                break
            if kind == "done":
                with self._lock:
                    changed = self._finish(name, run_id, value) or changed
        if changed:
            self._notify(True)

    def _step(self) -> tuple[DagResult | None, bool]:
        """One scheduling pass: returns (outcome or None, whether an operation changed)."""
        now = time.monotonic()
        changed = self._check_timeouts(now)
        if self._stop_outcome is not None:
            if self._running and self._stop_deadline is not None and now >= self._stop_deadline:
                for name in list(self._running):
                    self._end_running(
                        name, self._stop_outcome, self._stop_message, code="cancelled"
                    )
                changed = True
            if not self._running:
                return self._result(self._stop_outcome, self._stop_message), changed
            return None, changed
        if self._pause_deadline is not None and now >= self._pause_deadline:
            for name in [name for name, running in self._running.items() if running.paused]:
                self._end_running(name, WAITING, PAUSED_NOW_MESSAGE, code="paused")
                changed = True
        self._held = False
        if self._failure_message is None and not self._pause:
            changed = self._start_ready() or changed
        if self._running:
            return None, changed
        if self._failure_message is not None:
            return self._result(FAILED, self._failure_message), changed
        if self._held:
            return None, changed  # waiting for the lease to be renewed (or to lapse)
        pending = [op for op in self._operations.values() if op.state == WAITING]
        if not pending:
            return self._result(SUCCEEDED, SUCCEEDED), changed
        if self._pause:
            return self._result(PAUSED, "paused: running operations finished"), changed
        waits = []
        for op in pending:
            unmet = [d for d in op.depends_on if self._dependency_state(d) != SUCCEEDED]
            waits.append(f"{op.name} waits for {', '.join(unmet) or 'nothing'}")
        self._diagnostics.append(diagnostic(DEADLOCK_MESSAGE, code="deadlock", detail=waits))
        deadlock = f"{DEADLOCK_MESSAGE} {'; '.join(waits)}"
        return self._result(FAILED, deadlock, retryable=False), changed

    def _dependency_state(self, name: str) -> str | None:
        actual = self._by_lower.get(name.lower())
        if actual is None:
            return None
        return self._operations[actual].state

    def _startable(self) -> bool:
        with self._lock:
            return (
                self._stop_outcome is None
                and self._failure_message is None
                and not self._pause
                and len(self._running) < self.max_parallel
                and any(
                    op.state == WAITING
                    and all(self._dependency_state(d) == SUCCEEDED for d in op.depends_on)
                    for op in self._operations.values()
                )
            )

    def _start_ready(self) -> bool:
        started = False
        for name in self._order:
            if len(self._running) >= self.max_parallel:
                break
            op = self._operations[name]
            if op.state != WAITING:
                continue
            if any(self._dependency_state(d) != SUCCEEDED for d in op.depends_on):
                continue
            if self._lease is not None and not self._lease.fresh():
                self._held = True  # renewed outside the lock before the next step
                break
            self._launch(op)
            started = True
            if self._failure_message is not None:
                break
        return started

    def _fail_now(
        self, op: OperationState, message: str, *, code: str, retryable: bool = True
    ) -> None:
        op.state = FAILED
        op.retryable = retryable
        op.message = message
        op.completed_at = now_iso()
        entry = diagnostic(message, code=code)
        op.diagnostics = [*op.diagnostics, entry]
        op.version += 1
        self._diagnostics.append(entry)
        if self._failure_message is None:
            self._failure_message = message

    def _launch(self, op: OperationState) -> None:
        handler = self.registry.get(op.type)
        if handler is None:
            self._fail_now(
                op,
                f"Unknown operation type found: {op.type} on operation: {op.name}",
                code="unknown_type",
                retryable=False,
            )
            return
        context = dict(self._context)
        context[OPERATION_NAME] = op.name
        definition_params = self._definitions[op.name].get("params")
        resolution = resolve({"payload": op.payload, "params": definition_params}, context)
        problems = [f"unknown reference {name}" for name in resolution.missing]
        problems += resolution.invalid
        if problems:
            self._fail_now(
                op,
                f"Operation {op.name} has invalid references: {'; '.join(problems)}",
                code="invalid_reference",
                retryable=False,
            )
            return
        op.run_id += 1
        op.state = EXECUTING
        op.percent_complete = 0.0
        op.message = "executing"
        op.started_at = now_iso()
        op.version += 1
        deadline = time.monotonic() + op.timeout_seconds if op.timeout_seconds else None
        run_id = op.run_id
        name = op.name
        ctx = OperationContext(
            agenda_id=self.agenda_id,
            operation_name=name,
            operation_type=op.type,
            operation={
                "name": name,
                "type": op.type,
                "payload": op.payload,
                "params": resolution.value["params"],
            },
            prior=op.prior,
            allow_exec=self.registry.allow_exec,
            cancel_grace_seconds=self.registry.cancel_grace_seconds,
            deadline=deadline,
            settings=self.registry.settings,
            on_progress=lambda percent, message, params: self._progress(
                name, run_id, percent, message, params
            ),
            on_add_operations=lambda operations: self.add_operations(operations, parent=name),
        )
        thread = threading.Thread(
            target=self._execute,
            args=(name, run_id, handler, resolution.value["payload"], ctx),
            name=f"pop-op-{name}",
            daemon=True,
        )
        self._running[name] = RunningOperation(
            run_id=run_id, ctx=ctx, deadline=deadline, thread=thread
        )
        thread.start()

    def _execute(
        self, name: str, run_id: int, handler: Any, payload: Any, ctx: OperationContext
    ) -> None:
        self._events.put(("done", run_id, name, handler_outcome(handler, name, payload, ctx)))

    def _progress(
        self,
        name: str,
        run_id: int,
        percent: float | None,
        message: str | None,
        params: dict[str, Any] | None,
    ) -> None:
        with self._lock:
            op = self._operations.get(name)
            if op is None or op.run_id != run_id or op.state != EXECUTING:
                return
            if percent is not None:
                op.percent_complete = percent
            if message is not None:
                op.message = message
            if params is not None:
                op.params = params
            op.version += 1
        self._notify(False)

    def _finish(self, name: str, run_id: int, outcome: tuple[str, Any]) -> bool:
        running = self._running.get(name)
        op = self._operations.get(name)
        if running is None or op is None or running.run_id != run_id or op.state != EXECUTING:
            return False  # already timed out or abandoned
        del self._running[name]
        kind, value = outcome
        op.completed_at = now_iso()
        op.version += 1
        if kind == "ok":
            op.state = SUCCEEDED
            op.percent_complete = 100.0
            op.message = SUCCEEDED
            op.result = value
            self._context[output_name(name)] = value
        elif kind == "cancelled" and running.paused and self._stop_outcome is None:
            op.state = WAITING
            op.message = PAUSED_NOW_MESSAGE
            op.completed_at = None
        elif kind == "cancelled" and self._stop_outcome is not None:
            op.state = self._stop_outcome
            op.message = self._stop_message
            if op.state == FAILED:
                op.diagnostics = [*op.diagnostics, diagnostic(op.message, code="interrupted")]
        elif kind == "cancelled":  # the handler gave up by itself: that is a failure
            entry = diagnostic(f"Operation {name} cancelled itself: {value}", code="cancelled")
            op.state = FAILED
            op.message = entry["message"]
            op.diagnostics = [*op.diagnostics, entry]
            self._diagnostics.append(entry)
            if self._failure_message is None:
                self._failure_message = entry["message"]
        else:
            op.state = FAILED
            op.retryable = kind != "permanent"
            op.message = value["message"]
            op.diagnostics = [*op.diagnostics, value]
            self._diagnostics.append(value)
            if self._failure_message is None:
                self._failure_message = f"Operation {name} failed: {value['message']}"
        return True

    def _end_running(self, name: str, state: str, message: str, *, code: str) -> None:
        running = self._running.pop(name)
        running.ctx.cancelled.set()
        op = self._operations[name]
        op.state = state
        op.message = message
        op.completed_at = None if state == WAITING else now_iso()
        if state == FAILED:
            op.diagnostics = [*op.diagnostics, diagnostic(message, code=code)]
        op.version += 1

    def _check_timeouts(self, now: float) -> bool:
        expired = [
            name
            for name, running in self._running.items()
            if running.deadline is not None and now >= running.deadline
        ]
        for name in expired:
            op = self._operations[name]
            message = f"Operation {name} timed out after {op.timeout_seconds:g} s"
            self._end_running(name, FAILED, message, code="timeout")
            self._diagnostics.append(op.diagnostics[-1])
            if self._failure_message is None:
                self._failure_message = message
        return bool(expired)

    def _result(self, state: str, message: str, *, retryable: bool = True) -> DagResult:
        if state == SUCCEEDED:
            percent = 100.0
        else:
            percent = self._percent()
        permanent = any(op.state == FAILED and not op.retryable for op in self._operations.values())
        return DagResult(
            state=state,
            message=message,
            retryable=state != FAILED or (retryable and not permanent),
            percent_complete=percent,
            diagnostics=list(self._diagnostics),
            operations={name: copy.deepcopy(self._operations[name]) for name in self._order},
        )
