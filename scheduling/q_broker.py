"""django-q2's ORM broker, made to ride out a database outage quickly.

When `dequeue` raises, django-q2's pusher logs it, sleeps 10 seconds and exits, and the
sentinel starts a new pusher: after a PostgreSQL restart no task was picked up for 10 s or
more. Here a database error while dequeuing closes the connection, waits a moment
(`RETRY_SECONDS`) and answers "nothing to do", so the pusher tries again at once and the
cluster resumes within a couple of seconds of the database coming back.
(`Q_CLUSTER["broker_class"]` in popsite/settings.py.)
"""

import logging
import time

from django.db import InterfaceError, OperationalError, connection
from django_q.brokers.orm import ORM

logger = logging.getLogger("pop.scheduling")

RETRY_SECONDS = 1.0


class OutageTolerantORM(ORM):
    def dequeue(self):
        try:
            return super().dequeue()
        except (OperationalError, InterfaceError) as error:
            logger.warning("task queue unreachable (%s); retrying in %.1f s", error, RETRY_SECONDS)
            connection.close()
            time.sleep(RETRY_SECONDS)
            return None
