"""The PostgreSQL session POP opens (docs/deploy.md): JIT is off unless DATABASE_JIT allows it;
statements are bound on the server and prepared as DATABASE_PREPARED_STATEMENTS says."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL setting")
def test_sessions_run_without_jit():
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        (jit,) = cursor.fetchone()

    assert jit == "off"


PREPARED_PROBE = (
    "from django.conf import settings; options = settings.DATABASES['default']['OPTIONS']; "
    "print(settings.POP_PREPARED_STATEMENTS, options.get('server_side_binding'), "
    "options.get('prepare_threshold', 'unset'))"
)


def _settings_with_prepared_statements(value: str | None) -> subprocess.CompletedProcess:
    """Load the settings in a fresh process for PostgreSQL with DATABASE_PREPARED_STATEMENTS."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "popsite.settings",
        "SECRET_KEY": "x",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/unused",
    }
    env.pop("DATABASE_PREPARED_STATEMENTS", None)
    if value is not None:
        env["DATABASE_PREPARED_STATEMENTS"] = value
    return subprocess.run(
        [sys.executable, "-c", PREPARED_PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "hot True None"),  # bound on the server, prepared only on the hot path
        ("hot", "hot True None"),
        ("all", "all True 5"),
        ("true", "all True 5"),  # the switch's old boolean spellings
        ("off", "off None unset"),
        ("false", "off None unset"),
    ],
)
def test_prepared_statements_are_the_hot_paths_unless_configured(value, expected):
    done = _settings_with_prepared_statements(value)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == expected


def test_an_unknown_prepared_statements_mode_stops_the_start():
    done = _settings_with_prepared_statements("sometimes")

    assert done.returncode != 0
    assert "DATABASE_PREPARED_STATEMENTS must be hot, all or off" in done.stderr
