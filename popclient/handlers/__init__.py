"""Operation handlers: ``handler(payload, ctx) -> result``, registered by operation type.

A handler receives the operation's payload with every reference already resolved and an
:class:`OperationContext`. It returns a JSON-serialisable result (the operation's
``<name>.out``), raises :class:`HandlerError` (or any exception) to fail the operation,
:class:`PermanentError` when retrying cannot help (the agenda then fails at once), and
watches ``ctx.cancelled`` to stop early when the agenda is aborted or the operation times
out (raise :class:`Cancelled`, or just return).

Write your own in a module and start the worker with ``--handlers my.module``::

    from popclient.handlers import handler

    @handler("resize")
    def resize(payload, ctx):
        ctx.report_progress(50, "halfway")
        return {"ok": True}

A module may instead define ``HANDLERS = {"type": func}`` or ``register(registry)``.

The package re-exports its public names; each lives in the module of its concern:
``registry`` (context, errors, registry), ``process`` (subprocesses), ``builtins``
(log, echo, sleep, fail, exec, http), ``media`` (mediainfo, transcode, thumbnail),
``packaging`` (package: HLS and DASH) and
``defaults`` (the default registry).
"""

from popclient.handlers.builtins import (
    echo_handler,
    exec_handler,
    fail_handler,
    http_handler,
    log_handler,
    sleep_handler,
)
from popclient.handlers.defaults import BUILTIN_HANDLERS, default_registry
from popclient.handlers.media import (
    mediainfo_handler,
    summarize_probe,
    thumbnail_handler,
    transcode_handler,
)
from popclient.handlers.packaging import package_handler
from popclient.handlers.process import ProcessResult, run_subprocess
from popclient.handlers.registry import (
    DEFAULT_CANCEL_GRACE_SECONDS,
    Cancelled,
    Handler,
    HandlerError,
    HandlerRegistry,
    OperationContext,
    PermanentError,
    handler,
)

__all__ = [
    "BUILTIN_HANDLERS",
    "DEFAULT_CANCEL_GRACE_SECONDS",
    "Cancelled",
    "Handler",
    "HandlerError",
    "HandlerRegistry",
    "OperationContext",
    "PermanentError",
    "ProcessResult",
    "default_registry",
    "echo_handler",
    "exec_handler",
    "fail_handler",
    "handler",
    "http_handler",
    "log_handler",
    "mediainfo_handler",
    "package_handler",
    "run_subprocess",
    "sleep_handler",
    "summarize_probe",
    "thumbnail_handler",
    "transcode_handler",
]
