"""Ratchets: the rules of STYLE §4.2 that a grep can hold."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ["agendas", "scheduling", "resourcepools", "popsite"]
STATE_WRITE = re.compile(
    r"(\.state\s*=[^=]|\bstate\s*=\s*(S|OpState|AgendaProgress\.State|OperationProgress\.State)\.)"
)


def _sources():
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" not in path.parts:
                yield path


def test_only_the_state_machine_writes_agenda_or_operation_state():
    offenders = []
    for path in _sources():
        if path == ROOT / "agendas" / "states.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if STATE_WRITE.search(line) and "Schedule" not in line and "Alert" not in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_no_viewset_overrides_get_queryset():
    offenders = [
        str(path.relative_to(ROOT))
        for path in _sources()
        if path.name != "api.py" and "def get_queryset" in path.read_text()
    ]
    assert offenders == []
