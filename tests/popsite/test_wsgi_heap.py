"""The web worker's heap is loaded and frozen before its first request (popsite/wsgi.py), so
a full collection during a request walks only what requests created."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import gc, json, sys
import popsite.wsgi
frozen = gc.get_freeze_count()
tracked = len(gc.get_objects())
print(json.dumps({
    "frozen": frozen,
    "tracked": tracked,
    "views_loaded": "scheduling.api.puller_views" in sys.modules,
}))
"""


def test_loading_the_wsgi_application_imports_every_view_and_freezes_the_heap():
    env = {**os.environ, "SECRET_KEY": "test-secret"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    heap = json.loads(probe.stdout.strip().splitlines()[-1])

    assert heap["views_loaded"]
    # The loaded application is tens of thousands of objects; what a full collection still
    # walks is a small remainder of them.
    assert heap["frozen"] > 50_000
    assert heap["tracked"] < heap["frozen"] / 20
