"""The migrations match the models: no model change is left without its migration."""

from io import StringIO

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_migrations_are_up_to_date():
    out = StringIO()

    # --check exits non-zero (SystemExit) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)

    assert "No changes detected" in out.getvalue()
