"""Minimal Django settings for the django-q2 ORM-broker peer (its own database)."""

import os

SECRET_KEY = "pop-bench-django-q-peer"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_q"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("POP_BENCH_PEER_DB", "pop_bench_peer_djangoq"),
        "USER": os.environ.get("POP_BENCH_PGUSER", "postgres"),
        "HOST": os.environ.get("POP_BENCH_PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("POP_BENCH_PGPORT", "5432"),
        "CONN_MAX_AGE": 600,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The documented knobs for throughput on the ORM broker: bulk dequeue, a short poll, no
# success rows, one attempt.
Q_CLUSTER = {
    "name": "popbench",
    "orm": "default",
    "workers": 2,
    "bulk": 10,
    "poll": 0.05,
    "save_limit": -1,
    "max_attempts": 1,
    "retry": 60,
    "timeout": 30,
    "ack_failures": True,
    "catch_up": False,
    "queue_limit": 50,
    "log_level": "ERROR",
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django-q": {"level": "ERROR"}, "django_q": {"level": "ERROR"}},
}


def noop() -> None:
    """The no-op task."""
