"""Migration tests' step: move the test database's schema to chosen migrations. A test module
that uses it also asks for the `back_to_the_latest_schema` fixture (tests/conftest.py)."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(targets):
    """Migrate to `targets` ([(app, migration name)]) and return the apps of that state."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps
