"""Handlers for the live tests, loaded by workers with ``--handlers tests.live.handlers``."""

from typing import Any

from popclient.handlers import Cancelled, OperationContext


def resumable_sleep(payload: Any, ctx: OperationContext) -> Any:
    """Sleep ``first_seconds`` on the first attempt and ``retry_seconds`` on later ones.

    The attempt number lives in the operation's params, so a retry knows from the prior
    progress the worker hands it that it already ran once.
    """
    attempt = int(ctx.params.get("attempt", 0)) + 1
    ctx.report_progress(1, f"attempt {attempt}", params={"attempt": attempt})
    seconds = float(payload["first_seconds"] if attempt == 1 else payload["retry_seconds"])
    if ctx.sleep(seconds):
        raise Cancelled(f"cancelled during attempt {attempt}")
    return {"attempt": attempt, "prior_state": (ctx.prior or {}).get("state")}


HANDLERS = {"resumable_sleep": resumable_sleep}
