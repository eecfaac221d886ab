"""Run the same call from several threads at once, each on its own database connection."""

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection


def all_at_once(runs: int, process: Callable[..., Any], **kwargs: Any) -> list[Any]:
    """Start `runs` threads on `process(**kwargs)` behind one barrier; return their results.

    An exception in any thread fails the caller (it is not swallowed); each thread closes its
    database connection when done.
    """
    start = threading.Barrier(runs)
    results: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            results.append(process(**kwargs))
        except BaseException as error:  # surfaced below, not swallowed
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [], errors
    assert len(results) == runs, "a thread did not finish within 60 s"
    return results
