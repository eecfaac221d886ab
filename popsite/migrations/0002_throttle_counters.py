"""The API throttles' counters (core/throttling.py): one row per key, rewritten in place.
Unlogged on PostgreSQL: a counter is worth no WAL, and a commit that wrote only unlogged rows
does not wait for a flush; after a crash the table comes back empty, which forgets at most one
window of counts."""

from django.db import migrations

COLUMNS = """(
    key varchar(255) PRIMARY KEY,
    window_number bigint NOT NULL,
    hits integer NOT NULL,
    expires_at double precision NOT NULL
)"""


def create_throttle_table(apps, schema_editor):
    unlogged = "UNLOGGED " if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"CREATE {unlogged}TABLE pop_throttle {COLUMNS}")


def drop_throttle_table(apps, schema_editor):
    schema_editor.execute("DROP TABLE IF EXISTS pop_throttle")


class Migration(migrations.Migration):
    dependencies = [("popsite", "0001_cache_table")]

    operations = [migrations.RunPython(create_throttle_table, drop_throttle_table)]
