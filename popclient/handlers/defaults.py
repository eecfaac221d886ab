"""The default registry: every built-in handler plus the ``@handler`` declarations."""

from __future__ import annotations

from collections.abc import Sequence

from popclient.handlers.builtins import (
    echo_handler,
    exec_handler,
    fail_handler,
    http_handler,
    log_handler,
    sleep_handler,
)
from popclient.handlers.media import mediainfo_handler, thumbnail_handler, transcode_handler
from popclient.handlers.packaging import package_handler
from popclient.handlers.registry import (
    DEFAULT_CANCEL_GRACE_SECONDS,
    Handler,
    HandlerRegistry,
    declared_handlers,
)

BUILTIN_HANDLERS: dict[str, Handler] = {
    "log": log_handler,
    "echo": echo_handler,
    "sleep": sleep_handler,
    "fail": fail_handler,
    "exec": exec_handler,
    "http": http_handler,
    "mediainfo": mediainfo_handler,
    "transcode": transcode_handler,
    "thumbnail": thumbnail_handler,
    "package": package_handler,
}


def default_registry(
    *,
    allow_exec: bool = False,
    modules: Sequence[str] = (),
    cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS,
) -> HandlerRegistry:
    """The built-in handlers, plus ``@handler`` declarations and the given modules."""
    registry = HandlerRegistry(
        {**BUILTIN_HANDLERS, **declared_handlers()},
        allow_exec=allow_exec,
        cancel_grace_seconds=cancel_grace_seconds,
    )
    for module_path in modules:
        registry.load_module(module_path)
    return registry
