"""The README and .env.example name every variable and POP_* setting the code reads.

A grep of the code, so the configuration docs cannot drift again:

- server side: the keys of `env(...)` calls in popsite/settings.py, every "POP_*" string the
  server packages read (getattr(settings, ...), callbacks' `_setting`, the periods in
  scheduling/recurring.py), and os.environ reads there (PROMETHEUS_MULTIPROC_DIR) must all
  appear in README.md and in .env.example;
- popclient's "POP_*" environment variables must appear in README.md;
- `.env.example` only offers as `# NAME=value` what the environment really sets, with the
  default the code uses.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = ["agendas", "popsite", "resourcepools", "scheduling"]
SETTINGS = ROOT / "popsite" / "settings.py"

POP_STRING = re.compile(r"""["'](POP_[A-Z0-9_]+)["']""")
ENVIRON_READ = re.compile(
    r"""os\.(?:environ\.get\(|environ\[|getenv\()\s*["']([A-Z][A-Z0-9_]*)["']"""
)
EXAMPLE_ASSIGNMENT = re.compile(r"^#\s?([A-Z][A-Z0-9_]*)=(.*)$", re.MULTILINE)
# Set by manage.py/wsgi.py/asgi.py for Django itself, not configuration.
NOT_CONFIGURATION = {"DJANGO_SETTINGS_MODULE"}


def _server_sources() -> list[Path]:
    return [
        path
        for package in SERVER_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def settings_env_defaults() -> dict[str, object]:
    """{name: default} of every env(...)/env.<type>(...) call in popsite/settings.py.

    The default is the literal value, or `...` when it is an expression (f-string, 1024 * 1024).
    """
    found: dict[str, object] = {}
    for node in ast.walk(ast.parse(SETTINGS.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        is_env = (isinstance(func, ast.Name) and func.id == "env") or (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "env"
            and func.attr != "read_env"
        )
        if not is_env or not node.args or not isinstance(node.args[0], ast.Constant):
            continue
        default: object = ...
        for keyword in node.keywords:
            if keyword.arg == "default":
                default = _constant(keyword.value)
        found[node.args[0].value] = default
    return found


def _constant(node: ast.expr) -> object:
    """A literal, or arithmetic on numbers (1024 * 1024); `...` for anything else."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if all(
        isinstance(part, ast.BinOp | ast.operator | ast.Constant)
        and (not isinstance(part, ast.Constant) or isinstance(part.value, int | float))
        for part in ast.walk(node)
    ):
        return eval(compile(ast.Expression(node), "<default>", "eval"))  # noqa: S307 numbers only
    return ...


def server_environment_names() -> set[str]:
    """Names the server reads from the environment."""
    names = set(settings_env_defaults())
    for path in _server_sources():
        names |= set(ENVIRON_READ.findall(path.read_text()))
    return names - NOT_CONFIGURATION


def server_setting_names() -> set[str]:
    """POP_* settings the server code reads, whether or not the environment can set them."""
    names: set[str] = set()
    for path in _server_sources():
        names |= set(POP_STRING.findall(path.read_text()))
    return names


def client_environment_names() -> set[str]:
    names: set[str] = set()
    for path in sorted((ROOT / "popclient").rglob("*.py")):
        names |= {
            name for name in ENVIRON_READ.findall(path.read_text()) if name.startswith("POP_")
        }
    return names


def _mentioned(name: str, text: str) -> bool:
    return re.search(rf"(?<![A-Z0-9_]){re.escape(name)}(?![A-Z0-9_])", text) is not None


def _example_text(value: object) -> str:
    """How .env.example writes a default: 2.0 → "2", True → "true", a list comma-joined, None
    (unset) as nothing after the `=`."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def test_the_grep_finds_the_known_variables():
    """Guards the grep itself: if these stop being found, the regexes broke."""
    assert {"DATABASE_URL", "SECRET_KEY", "POP_FILL_INTERVAL", "POP_METRICS_TOKEN"} <= (
        server_environment_names()
    )
    assert "PROMETHEUS_MULTIPROC_DIR" in server_environment_names()
    assert {"POP_CALLBACK_BACKOFF_SECONDS", "POP_CRON_MISFIRE_GRACE_SECONDS"} <= (
        server_setting_names()
    )
    assert {"POP_URL", "POP_TOKEN", "POP_CONFIG"} <= client_environment_names()


def test_readme_names_every_variable_and_setting():
    readme = (ROOT / "README.md").read_text()
    names = server_environment_names() | server_setting_names() | client_environment_names()
    missing = sorted(name for name in names if not _mentioned(name, readme))
    assert not missing, f"README.md does not document: {missing}"


def test_env_example_names_every_server_variable_and_setting():
    example = (ROOT / ".env.example").read_text()
    names = server_environment_names() | server_setting_names()
    missing = sorted(name for name in names if not _mentioned(name, example))
    assert not missing, f".env.example does not mention: {missing}"


def test_env_example_offers_only_what_the_environment_sets():
    """A `# NAME=value` line must name a variable the server really reads from the environment."""
    example = (ROOT / ".env.example").read_text()
    offered = {name for name, _ in EXAMPLE_ASSIGNMENT.findall(example)}
    assert offered, "no `# NAME=value` lines found in .env.example"
    not_read = sorted(offered - server_environment_names())
    assert not not_read, f".env.example offers variables nothing reads: {not_read}"


def test_env_example_defaults_match_settings():
    example = dict(EXAMPLE_ASSIGNMENT.findall((ROOT / ".env.example").read_text()))
    wrong = {}
    for name, default in settings_env_defaults().items():
        if default is ... or name not in example or name == "SECRET_KEY":
            continue
        if example[name].strip() != _example_text(default):
            wrong[name] = (example[name].strip(), _example_text(default))
    assert not wrong, f".env.example value vs settings.py default: {wrong}"
