"""Scale-out, small: scripts/cluster_demo.py with 200 agendas of 5 customers.

Two gunicorn nodes behind the demo's load balancer, two qclusters and four `pop worker`
processes share one PostgreSQL database of their own (created and dropped by the script, on
the test database's server); one web node, one cluster and the busiest worker are SIGKILLed
midway. The script checks that every agenda succeeded, each operation ran exactly once per
attempt, no agenda was pulled twice in one attempt and nothing is left queued or executing.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the demo needs a PostgreSQL server"
)


def test_200_agendas_survive_losing_a_web_node_a_cluster_and_a_worker(tmp_path):
    db = connection.settings_dict
    env = {
        **os.environ,
        "POP_BENCH_PGHOST": db["HOST"] or "127.0.0.1",
        "POP_BENCH_PGPORT": str(db["PORT"] or 5432),
        "POP_BENCH_PGUSER": db["USER"] or "postgres",
    }
    summary_path = tmp_path / "summary.json"
    process = subprocess.run(
        [
            sys.executable,
            "scripts/cluster_demo.py",
            "--agendas",
            "200",
            "--customers",
            "5",
            "--timeout",
            "100",
            "--db",
            f"pop_bench_scale_out_{os.getpid()}",
            "--json",
            str(summary_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert summary_path.exists(), process.stdout[-3000:] + process.stderr[-3000:]
    summary = json.loads(summary_path.read_text())

    assert summary["problems"] == []
    assert summary["ok"] is True
    # docs/deploy.md's connection budget for the topology holds under load.
    assert 0 < summary["connections"]["peak"] <= summary["connections"]["budget"]
    assert summary["states"] == {"succeeded": 200}
    assert summary["killed midway"][:2] == ["web1", "cluster1"]
    assert summary["survivors alive"] == {"web2": True, "cluster2": True}
    assert summary["executions by outcome"]["succeeded"] == 200
    assert process.returncode == 0
