"""The PostgreSQL session POP opens (docs/deploy.md): JIT is off unless DATABASE_JIT allows it."""

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL setting")
def test_sessions_run_without_jit():
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        (jit,) = cursor.fetchone()

    assert jit == "off"
