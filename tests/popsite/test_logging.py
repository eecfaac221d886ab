"""POP_Q_LOG_LEVEL reaches django-q2's own logger ("django-q"), so its per-task INFO lines
stay out of the cluster's log unless asked for."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import logging, django; django.setup(); import django_q.conf; "
    "django_q.conf.logger.info('a task ran'); "
    "print(logging.getLogger('django-q').getEffectiveLevel())"
)


@pytest.mark.parametrize(
    ("level", "expected", "info_shown"), [(None, 30, False), ("INFO", 20, True)]
)
def test_the_q_log_level_setting_governs_django_q2s_logger(level, expected, info_shown):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "popsite.settings", "SECRET_KEY": "x"}
    env.pop("POP_Q_LOG_LEVEL", None)
    if level:
        env["POP_Q_LOG_LEVEL"] = level

    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip().splitlines()[-1]) == expected
    assert ("a task ran" in done.stderr) is info_shown
