"""django-q2's ORM broker, made to ride out a database outage quickly.

When `dequeue` raises, django-q2's pusher logs it, sleeps 10 seconds and exits, and the
sentinel starts a new pusher: after a PostgreSQL restart no task was picked up for 10 s or
more. Here a database error while dequeuing closes the connection, waits a moment
(`RETRY_SECONDS`) and answers "nothing to do", so the pusher tries again at once and the
cluster resumes within a couple of seconds of the database coming back.
(`Q_CLUSTER["broker_class"]` in popsite/settings.py.)

The same reader keeps the ticker chain alive: once every REVIVE_CHECK_SECONDS it asks
`scheduling.tasks.ticker_revive` whether the chain's heartbeat stopped (the cluster running it
was killed), and if so a new chain starts within a link's length of the last beat, not at the
minute schedule's next turn (tests/faults/test_clusters_killed.py).
"""

import logging
import time

from django.db import InterfaceError, OperationalError, connection
from django_q.brokers.orm import ORM

from scheduling.tasks import ticker_revive

logger = logging.getLogger("pop.scheduling")

RETRY_SECONDS = 1.0
REVIVE_CHECK_SECONDS = 1.0


class OutageTolerantORM(ORM):
    _revive_checked = 0.0

    def dequeue(self):
        try:
            if time.monotonic() - self._revive_checked >= REVIVE_CHECK_SECONDS:
                self._revive_checked = time.monotonic()
                self._keep_ticker_alive()
            return super().dequeue()
        except (OperationalError, InterfaceError) as error:
            logger.warning("task queue unreachable (%s); retrying in %.1f s", error, RETRY_SECONDS)
            connection.close()
            time.sleep(RETRY_SECONDS)
            return None

    def _keep_ticker_alive(self) -> None:
        try:
            ticker_revive()
        except Exception as error:  # the keep-alive must never stop the task queue itself
            logger.warning("ticker keep-alive check failed (%s)", error)
