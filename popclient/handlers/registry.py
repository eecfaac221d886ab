"""The handler registry: what a handler gets (:class:`OperationContext`), how it fails
(:class:`HandlerError`; :class:`PermanentError` when retrying cannot help; :class:`Cancelled`)
and how operation types map to handlers."""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Handler = Callable[[Any, "OperationContext"], Any]

DEFAULT_CANCEL_GRACE_SECONDS = 1.0


class HandlerError(Exception):
    """Fail the operation with a clear message (and an optional diagnostic code/detail)."""

    def __init__(self, message: str, *, code: str = "handler_error", detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.detail = detail


class PermanentError(HandlerError):
    """Fail the operation, and its agenda, for good: retrying cannot help (a missing or
    invalid input, an unknown operation type, a 4xx answer). The worker reports the failure
    as not retryable, so the agenda goes to `failed` without using its remaining attempts."""


class Cancelled(Exception):  # noqa: N818 - reads as an outcome, like asyncio.CancelledError
    """Raised by a handler that stopped because ``ctx.cancelled`` was set."""


class OperationContext:
    """What a handler gets besides its payload.

    ``prior`` is this operation's progress from the previous attempt (``state``,
    ``params``, ``diagnostics``, ``result``…) or ``None``; ``params`` starts as the prior
    params so a handler can resume; ``cancelled`` is set on abort, time-out or worker
    shutdown.
    """

    def __init__(
        self,
        *,
        agenda_id: str,
        operation_name: str,
        operation_type: str,
        operation: Mapping[str, Any] | None = None,
        prior: Mapping[str, Any] | None = None,
        cancelled: threading.Event | None = None,
        allow_exec: bool = False,
        cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS,
        deadline: float | None = None,
        on_progress: Callable[[float | None, str | None, dict[str, Any] | None], None]
        | None = None,
        on_add_operations: Callable[[list[dict[str, Any]]], None] | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.agenda_id = agenda_id
        self.operation_name = operation_name
        self.operation_type = operation_type
        self.operation = dict(operation or {})
        self.prior = dict(prior) if prior else None
        self.cancelled = cancelled if cancelled is not None else threading.Event()
        self.allow_exec = allow_exec
        self.cancel_grace_seconds = cancel_grace_seconds
        self.deadline = deadline
        self.settings = dict(settings or {})
        self.params: dict[str, Any] = dict((self.prior or {}).get("params") or {})
        self.log = logging.getLogger(f"popclient.op.{operation_type}")
        self._on_progress = on_progress
        self._on_add_operations = on_add_operations

    def report_progress(
        self,
        percent: float | None = None,
        message: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        """Record progress; ``params`` is merged into the operation's resume state."""
        if params:
            self.params.update(params)
        if self._on_progress is not None:
            self._on_progress(
                None if percent is None else max(0.0, min(100.0, float(percent))),
                message,
                dict(self.params) if params else None,
            )

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; returns True (early) when the operation is cancelled."""
        return self.cancelled.wait(max(0.0, seconds))

    def raise_if_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled(f"operation {self.operation_name} cancelled")

    def add_operations(self, operations: Sequence[Mapping[str, Any]]) -> None:
        """Append generated operations to the running agenda (POP ``updateAgenda``)."""
        if self._on_add_operations is None:
            raise HandlerError("this runner cannot add operations")
        self._on_add_operations([dict(op) for op in operations])


# -- registry --------------------------------------------------------------------------

_DECLARED: dict[str, Handler] = {}


def handler(type_name: str) -> Callable[[Handler], Handler]:
    """Decorator declaring a handler for an operation type (picked up by every registry)."""

    def decorate(func: Handler) -> Handler:
        _DECLARED[type_name] = func
        return func

    return decorate


def declared_handlers() -> dict[str, Handler]:
    """The handlers declared so far with :func:`handler`."""
    return dict(_DECLARED)


class HandlerRegistry:
    """Operation type → handler. Lookup is exact first, then case-insensitive."""

    def __init__(
        self,
        handlers: Mapping[str, Handler] | None = None,
        *,
        allow_exec: bool = False,
        cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self._handlers: dict[str, Handler] = dict(handlers or {})
        self.allow_exec = allow_exec
        self.cancel_grace_seconds = cancel_grace_seconds
        self.settings = dict(settings or {})

    def register(self, type_name: str, func: Handler | None = None) -> Any:
        """``registry.register("t", f)`` or ``@registry.register("t")``."""
        if func is None:

            def decorate(inner: Handler) -> Handler:
                self._handlers[type_name] = inner
                return inner

            return decorate
        self._handlers[type_name] = func
        return func

    def get(self, type_name: str) -> Handler | None:
        if type_name in self._handlers:
            return self._handlers[type_name]
        lowered = type_name.lower()
        for name, func in self._handlers.items():
            if name.lower() == lowered:
                return func
        return None

    def __contains__(self, type_name: object) -> bool:
        return isinstance(type_name, str) and self.get(type_name) is not None

    def types(self) -> list[str]:
        return sorted(self._handlers)

    def load_module(self, module_path: str) -> None:
        """Import ``module_path`` and register its handlers.

        Picks up ``@handler`` declarations, a ``HANDLERS`` mapping and a
        ``register(registry)`` function, in that order.
        """
        module = importlib.import_module(module_path)
        self._handlers.update(_DECLARED)
        declared = getattr(module, "HANDLERS", None)
        if isinstance(declared, Mapping):
            self._handlers.update(declared)
        register = getattr(module, "register", None)
        if callable(register):
            register(self)
