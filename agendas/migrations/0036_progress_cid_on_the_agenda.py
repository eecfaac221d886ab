"""The progress row's cid is read through its agenda (docs/decisions.md, "A progress row's keys
are read on its agenda"): `?cid=` on the progress and operation lists reads the agenda's
`agenda_cid`, written once at submit. `progress_cid` took an entry at the progress row's
insert and at each of its three state changes on the hot path (never HOT): four entries an
agenda, for a copy of the agenda's value.

On a large live database (docs/deploy.md, "Upgrading a large live database"):
  DROP INDEX CONCURRENTLY progress_cid;
then `manage.py migrate agendas 0036 --fake`.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("agendas", "0035_covered_lane_outbox_wait_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="agendaprogress",
            name="progress_cid",
        ),
    ]
