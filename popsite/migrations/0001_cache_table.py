"""The database cache table (CACHES in popsite/settings.py): throttle counters and other cached
values shared by every web process and node. Created here, whatever backend is configured now,
so `migrate` is all a release needs and switching POP_CACHE_URL back to empty just works."""

from django.conf import settings
from django.core.management.commands.createcachetable import Command as CreateCacheTable
from django.db import migrations


def create_cache_table(apps, schema_editor):
    command = CreateCacheTable()
    command.verbosity = 0
    command.create_table(schema_editor.connection.alias, settings.POP_CACHE_TABLE, dry_run=False)


def drop_cache_table(apps, schema_editor):
    schema_editor.execute(
        f"DROP TABLE IF EXISTS {schema_editor.quote_name(settings.POP_CACHE_TABLE)}"
    )


class Migration(migrations.Migration):
    initial = True
    dependencies: list = []

    operations = [migrations.RunPython(create_cache_table, drop_cache_table)]
