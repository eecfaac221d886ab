"""The fault-injection suite (issue 17): live POP processes on a private PostgreSQL, broken on
purpose. `pytest -m faults` runs it alone; it also runs with the rest of the suite.

- `private_postgres` (session): a PostgreSQL server of the suite's own (tests/faults/postgres.py),
  started from the machine's binaries, with a template database migrated once, the scenarios'
  world written into it (tests/faults/world.py) and the ticker registered (`pop_schedules`);
- `stack` (per test): a copy of the template and the processes of one scenario
  (tests/faults/stack.py), stopped and dropped afterwards; the server is started again if a
  scenario left it down, and given back its max_connections if a scenario squeezed them. The
  processes' logs and the run log stay in /tmp/pop-faults-* when the test failed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.common import PYTHON, ROOT, World, pop_env
from tests.faults.postgres import PrivatePostgres, binaries
from tests.faults.stack import Stack, run_world_script

TEMPLATE = "pop_faults_template"
MAX_CONNECTIONS = 100


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, so `stack` knows whether the test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@dataclass
class Server:
    postgres: PrivatePostgres
    world: World
    idle_insight: str


@pytest.fixture(scope="session")
def private_postgres() -> Server:
    if binaries() is None:
        pytest.skip("no PostgreSQL binaries under /usr/lib/postgresql/*/bin")
    postgres = PrivatePostgres(max_connections=MAX_CONNECTIONS)
    try:
        postgres.start()
        postgres.create_role()
        postgres.create_database(TEMPLATE)
        env = pop_env(TEMPLATE, DATABASE_URL=postgres.url(TEMPLATE))
        for command in (["migrate", "--verbosity", "0"], ["pop_schedules"]):
            subprocess.run(
                [PYTHON, "manage.py", *command],
                cwd=ROOT,
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        world, idle_insight = run_world_script(postgres, TEMPLATE)
        yield Server(postgres=postgres, world=world, idle_insight=idle_insight)
    finally:
        postgres.remove()


@pytest.fixture
def stack(private_postgres: Server, request: pytest.FixtureRequest):
    postgres = private_postgres.postgres
    dbname = "pop_faults_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40]
    postgres.create_database(dbname, template=TEMPLATE)
    logs = Path(tempfile.mkdtemp(prefix="pop-faults-"))
    scenario = Stack(
        postgres=postgres,
        dbname=dbname,
        world=private_postgres.world,
        idle_insight=private_postgres.idle_insight,
        logs=logs,
    )
    try:
        yield scenario
    finally:
        scenario.stop()
        if not postgres.running():
            postgres.start()
        with postgres.connect("postgres") as conn:
            squeezed = conn.execute("SHOW max_connections").fetchone()[0] != str(MAX_CONNECTIONS)
        if squeezed:
            postgres.set_max_connections(MAX_CONNECTIONS)
        postgres.drop_database(dbname)
        report = getattr(request.node, "report_call", None)
        if report is None or not report.failed:
            shutil.rmtree(logs, ignore_errors=True)
