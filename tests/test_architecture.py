"""Ratchets: the code's rules (docs/architecture.md §3) that a grep can hold."""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = [
    "core",
    "accounts",
    "audit",
    "agendas",
    "scheduling",
    "triggers",
    "resourcepools",
    "popsite",
]
STATE_MACHINE = ROOT / "agendas" / "states"
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
        if path.is_relative_to(STATE_MACHINE):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if STATE_WRITE.search(line) and "Schedule" not in line and "Alert" not in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


# Schedules and alerts have states of their own, written by their own services.
OTHER_STATEFUL = re.compile(r"\b(Schedule|Alert|schedule|alert)\b")


def _state_writes(tree: ast.AST):
    """(line, source) of every way to write a `state` the AST can show: attribute assignment,
    setattr, queryset update/create with `state=`, bulk_update naming "state"."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "state" for t in targets):
                yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            source = ast.unparse(node)
            receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
            is_queryset = "objects" in receiver or "filter(" in receiver or "exclude(" in receiver
            if (
                (name in ("update", "create", "get_or_create", "update_or_create") and is_queryset)
                and any(keyword.arg == "state" for keyword in node.keywords)
            ) or (name == "bulk_update" and "'state'" in source):
                yield node.lineno, source
            elif name == "setattr" and len(node.args) > 1:
                if isinstance(node.args[1], ast.Constant) and node.args[1].value == "state":
                    yield node.lineno, source


def test_only_the_state_machine_writes_agenda_or_operation_state_by_any_means():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {source[:120]}"
        for path in _sources()
        if not path.is_relative_to(STATE_MACHINE)
        for line, source in _state_writes(ast.parse(path.read_text()))
        if not OTHER_STATEFUL.search(source)
    ]
    assert offenders == []


RAW_PROGRESS_TABLE = re.compile(
    r"agendas_(agendaprogress|operationprogress)|(AgendaProgress|OperationProgress)\._meta\.db_table"
)


def test_only_the_state_machine_touches_the_progress_tables_in_raw_sql():
    offenders = [
        str(path.relative_to(ROOT))
        for path in _sources()
        if not path.is_relative_to(STATE_MACHINE) and RAW_PROGRESS_TABLE.search(path.read_text())
    ]
    assert offenders == []


def test_the_state_write_check_sees_every_form():
    sample = ast.parse(
        "progress.state = 'ready'\n"
        "setattr(progress, 'state', 'ready')\n"
        "AgendaProgress.objects.filter(pk=1).update(state='executing')\n"
        "OperationProgress.objects.bulk_update(rows, ['state'])\n"
        "result.update(state='ok')\n"  # a dict, not a queryset: not a write of a model state
    )
    assert [line for line, _ in _state_writes(sample)] == [1, 2, 3, 4]


def test_no_viewset_overrides_get_queryset():
    offenders = [
        str(path.relative_to(ROOT))
        for path in _sources()
        if path.name != "api.py" and "def get_queryset" in path.read_text()
    ]
    assert offenders == []


AUDIT_WRITE_SIDE = ["models", "context", "middleware", "services", "admin_log", "apps", "admin"]
DOMAIN_APPS = {"agendas", "scheduling", "resourcepools", "accounts"}


def test_the_audit_write_side_imports_no_domain_app():
    """Every domain service imports audit.services: audit must not import them back."""
    offenders = []
    for name in AUDIT_WRITE_SIDE:
        path = ROOT / "audit" / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            offenders += [
                f"audit/{name}.py: {module}"
                for module in modules
                if module.split(".")[0] in DOMAIN_APPS
            ]
    assert offenders == []


def test_every_after_commit_side_effect_goes_through_after_commit():
    """`transaction.on_commit` lives in core/after_commit.py only: its wrapper is what
    keeps a failing side effect from turning a committed request into an error."""
    offenders = [
        str(path.relative_to(ROOT))
        for app in [*APPS, "accounts", "audit"]
        for path in (ROOT / app).rglob("*.py")
        if "on_commit(" in path.read_text() and path.name != "after_commit.py"
    ]
    assert offenders == []


# The house, from the bottom up: a module imports only from lower floors, or from its own app.
# audit is split: its write side (every service records through it) sits under accounts; its
# read side (API, page, selectors) sits with the apps whose scoping it uses.
FLOORS = [
    ("core", ["core"]),
    ("audit write side", [f"audit.{name}" for name in AUDIT_WRITE_SIDE] + ["audit"]),
    ("accounts", ["accounts"]),
    ("resourcepools", ["resourcepools"]),
    ("audit read side", ["audit.api", "audit.views", "audit.selectors", "audit.templatetags"]),
    ("agendas", ["agendas"]),
    ("scheduling", ["scheduling"]),
    ("triggers", ["triggers"]),
    ("popsite (settings, URL confs, pages)", ["popsite"]),
]
HOUSE_APPS = {
    "core",
    "audit",
    "accounts",
    "resourcepools",
    "agendas",
    "scheduling",
    "triggers",
    "popsite",
}


def _floor(module: str) -> int:
    """The floor of a dotted module name: its longest matching prefix in FLOORS."""
    best, length = -1, -1
    for number, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = number, len(prefix)
    return best


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in HOUSE_APPS:  # `from agendas import states`
                yield from (f"{node.module}.{alias.name}" for alias in node.names)
            else:
                yield node.module


def test_every_import_runs_down_the_house_or_stays_in_its_app():
    upward = []
    for app in sorted(HOUSE_APPS):
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            importer = _module_name(path)
            for imported in _imports(path):
                top = imported.split(".")[0]
                if top not in HOUSE_APPS or top == importer.split(".")[0]:
                    continue
                if _floor(imported) >= _floor(importer):
                    upward.append(f"{importer} -> {imported}")
    assert upward == []


def test_core_imports_no_pop_app_and_nothing_imports_popsite():
    core = [
        f"{_module_name(path)} -> {imported}"
        for path in (ROOT / "core").rglob("*.py")
        for imported in _imports(path)
        if imported.split(".")[0] in HOUSE_APPS - {"core"}
    ]
    into_popsite = [
        f"{_module_name(path)} -> {imported}"
        for app in sorted(HOUSE_APPS - {"popsite"})
        for path in (ROOT / app).rglob("*.py")
        for imported in _imports(path)
        if imported.split(".")[0] == "popsite"
    ]
    assert (core, into_popsite) == ([], [])


def test_the_agenda_language_imports_nothing_but_itself_and_the_standard_library():
    outside = [
        f"{_module_name(path)} -> {imported}"
        for path in (ROOT / "agenda_language").rglob("*.py")
        for imported in _imports(path)
        if imported.split(".")[0] not in sys.stdlib_module_names | {"agenda_language"}
    ]
    assert outside == []
