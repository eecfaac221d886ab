"""Autovacuum for the customer lanes (docs/design.md §6.1), as for the other queue tables
(scheduling.0002): every fill updates the `served` of the lanes it serves, so vacuum and
analyze them after a fixed number of dead rows, with room on each page for HOT updates.
PostgreSQL only; a no-op elsewhere."""

from django.db import migrations

LANE_SETTINGS = (
    "fillfactor = 70, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000, "
    "autovacuum_analyze_scale_factor = 0.0, autovacuum_analyze_threshold = 1000, "
    "autovacuum_vacuum_cost_delay = 0"
)
LANE_RESET = (
    "fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, "
    "autovacuum_analyze_scale_factor, autovacuum_analyze_threshold, autovacuum_vacuum_cost_delay"
)


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE scheduling_customerlane SET ({LANE_SETTINGS})")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE scheduling_customerlane RESET ({LANE_RESET})")


class Migration(migrations.Migration):

    dependencies = [
        ('agendas', '0009_customer_lanes'),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]
