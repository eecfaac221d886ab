"""The embedded database of `make run`: the engine's SQLite fallbacks (docs/design.md §6.1, §6.3).

The rest of the suite runs on PostgreSQL, where claims use SKIP LOCKED and fills an advisory
try-lock. On SQLite every write transaction is `BEGIN IMMEDIATE` (popsite/settings.py) and the
claim is a checked conditional write; this proves those paths in a child process on a fresh
SQLite file: migrate, demo data, then four threads filling, pulling and reporting at once
until the backlog is drained — every agenda executed exactly once and succeeded; and the
label filter's SQLite form finds the demo's labelled agendas.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, threading
    import django
    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Count
    call_command("migrate", verbosity=0)
    call_command("pop_demo", verbosity=0)
    from agendas.labels import labels_matching
    from agendas.models import Agenda, AgendaProgress, Execution
    from agendas.services import agenda_submit
    from core.principals import SYSTEM
    from resourcepools.models import Insight
    from scheduling import fill, pull, report

    template = Agenda.objects.order_by("created_at").first()
    for index in range(120):
        agenda_submit(
            principal=SYSTEM, customer=template.customer, operations=template.operations,
            external_id=f"sqlite-{index}",
        )
    insights = list(Insight.objects.all())
    pulled, errors = [], []

    def puller(number):
        try:
            idle = 0
            while idle < 3:
                got = []
                for insight in insights:
                    fill.insight_fill(insight_id=insight.pk)
                    got += pull.insight_pull(
                        principal=SYSTEM, insight=insight, worker=f"w{number}", count=5
                    )
                idle = 0 if got else idle + 1
                for item in got:
                    pulled.append(str(item.agenda.pk))
                    report.execution_report(
                        execution_id=item.execution.pk,
                        lease_token=item.execution.lease_token,
                        state="succeeded",
                    )
        except BaseException as error:
            errors.append(repr(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=puller, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps({
        "vendor": connection.vendor,
        "errors": errors,
        "agendas": Agenda.objects.count(),
        "pulled": len(pulled),
        "distinct_pulled": len(set(pulled)),
        "states": dict(AgendaProgress.objects.values_list("state").annotate(n=Count("pk"))),
        "most_executions": max(
            Execution.objects.values("agenda").annotate(n=Count("pk")).values_list("n", flat=True)
        ),
        "labelled": [
            labels_matching(Agenda.objects.all(), pairs).count()
            for pairs in ([("demo", "long")], [("demo", "fails")], [("demo", "long"), ("x", "y")])
        ],
    }))
    """
)


def test_four_threads_drain_a_backlog_on_sqlite_exactly_once(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'pop.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "popsite.settings",
        "SECRET_KEY": "sqlite-test",
        "POP_FILL_NUDGE": "off",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert result["vendor"] == "sqlite"
    assert result["errors"] == []
    assert result["agendas"] >= 120
    assert result["pulled"] == result["distinct_pulled"] == result["agendas"]
    assert result["states"] == {"succeeded": result["agendas"]}
    assert result["most_executions"] == 1
    assert result["labelled"] == [3, 1, 0]  # the demo's labels, found by SQLite's JSON_EXTRACT
