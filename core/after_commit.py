"""Side effects that run once a transaction commits, and can never fail the request.

A request whose transaction committed has done its work: a side effect after the commit (a
fill nudge, a log line) that raises must not turn that into an error answer, or the client
retries work that was done. Django's `on_commit(..., robust=True)` is meant for this, but its
error handler reads `func.__qualname__`, which a `functools.partial` lacks, and so raises
from the handler itself. Every after-commit side effect goes through `after_commit`.
"""

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

logger = logging.getLogger("pop.after_commit")


def after_commit(func: Callable[..., Any], *args: Any, using: str | None = None) -> None:
    """Call `func(*args)` once the current transaction commits (at once outside one); an
    exception it raises is logged with its traceback and goes no further."""
    name = getattr(func, "__qualname__", None) or repr(func)

    def side_effect() -> None:
        try:
            func(*args)
        except Exception:
            logger.exception("after-commit side effect %s failed; the commit stands", name)

    side_effect.__qualname__ = f"after_commit({name})"
    transaction.on_commit(side_effect, using=using)
