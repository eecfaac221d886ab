"""The state of a running agenda's operations: the state names, ``OperationState`` (one
operation, shaped like a report item), ``DagResult`` (a run's outcome), diagnostics, and how a
handler call ended (``handler_outcome``)."""

from __future__ import annotations

import threading
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from popclient.handlers import Cancelled, HandlerError, OperationContext, PermanentError

WAITING = "waiting"
EXECUTING = "executing"
SUCCEEDED = "succeeded"
FAILED = "failed"
ABORTED = "aborted"
PAUSED = "paused"


def now_iso() -> str:
    """The current UTC time in ISO 8601, ending in ``Z``."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


MAX_MESSAGE = 4000


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to at most ``limit`` characters, ending in "…" when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def diagnostic(message: str, *, code: str = "error", detail: Any = None) -> dict[str, Any]:
    """One diagnostics entry as docs/design.md §3 shapes them: ``{time, message, code, detail}``."""
    return {"time": now_iso(), "message": clip(message), "code": code[:100], "detail": detail}


@dataclass
class OperationState:
    """Live state of one operation, shaped like the report's ``operations`` items."""

    name: str
    type: str
    payload: Any = None
    depends_on: list[str] = field(default_factory=list)
    timeout_seconds: float | None = None
    state: str = WAITING
    percent_complete: float = 0.0
    message: str = ""
    result: Any = None
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] | None = None
    prior: dict[str, Any] | None = None
    skipped: bool = False
    started_at: str | None = None
    completed_at: str | None = None
    version: int = 0
    run_id: int = 0
    retryable: bool = True  # False: failed for good (PermanentError, unknown type, bad reference)

    def report(self) -> dict[str, Any]:
        """The sparse report item for this operation (docs/design.md §6.4)."""
        item: dict[str, Any] = {
            "name": self.name,
            "state": self.state,
            "percent_complete": round(self.percent_complete, 2),
            "message": clip(self.message),
        }
        if self.state == SUCCEEDED:
            item["result"] = self.result
        if self.diagnostics:
            item["diagnostics"] = list(self.diagnostics)
        if self.params is not None:
            item["params"] = dict(self.params)
        if self.state == FAILED and not self.retryable:
            item["retryable"] = False
        return item


@dataclass
class DagResult:
    """Outcome of a DAG run: ``state`` is succeeded|failed|aborted|paused."""

    state: str
    message: str
    retryable: bool
    percent_complete: float
    diagnostics: list[dict[str, Any]]
    operations: dict[str, OperationState]

    def results(self) -> dict[str, Any]:
        """``{name: result}`` of every succeeded operation."""
        return {name: op.result for name, op in self.operations.items() if op.state == SUCCEEDED}


# What an operation cancelled by a pause "now" says until it runs again.
PAUSED_NOW_MESSAGE = "interrupted by a pause; resumes from its saved params"
DEADLOCK_MESSAGE = (
    "Agenda operation deadlock has occurred. There are pending operations "
    "(likely with dependencies) but none are ready."
)


@dataclass
class RunningOperation:
    """A handler running in its thread: which run of the operation, its context, its end."""

    run_id: int
    ctx: OperationContext
    deadline: float | None
    thread: threading.Thread
    paused: bool = False  # cancelled by a pause "now": it goes back to waiting, not failed


def handler_outcome(
    handler: Any, name: str, payload: Any, ctx: OperationContext
) -> tuple[str, Any]:
    """Call a handler; return how it ended: ``ok`` (its result), ``cancelled``, ``error`` or
    ``permanent`` (a diagnostic: :class:`PermanentError` says retrying cannot help)."""
    try:
        result = handler(payload, ctx)
    except Cancelled as exc:
        return ("cancelled", str(exc))
    except HandlerError as exc:
        kind = "permanent" if isinstance(exc, PermanentError) else "error"
        return (kind, diagnostic(exc.message, code=exc.code, detail=exc.detail))
    except Exception as exc:  # the handler's own bug fails only its operation
        return (
            "error",
            diagnostic(
                f"Failed to execute operation: {name}: {exc.__class__.__name__}: {exc}",
                code="exception",
                detail=traceback.format_exc(limit=20),
            ),
        )
    return ("cancelled", "cancelled") if ctx.cancelled.is_set() else ("ok", result)
