"""The documented production environment passes `manage.py check --deploy`, and the pages need no
inline script (the Content-Security-Policy forbids it)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "kubernetes" / "namespace-and-secrets.yaml"
TEMPLATES = ROOT / "templates"

# A <script> element with a body (an inline script), and on*= event-handler attributes.
INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)[^>]*>(?!\s*</script>)", re.IGNORECASE)
EVENT_HANDLER = re.compile(r"<[^>]*\son[a-z]+\s*=", re.IGNORECASE)
JAVASCRIPT_URL = re.compile(r"""(?:href|src|action)\s*=\s*["']\s*javascript:""", re.IGNORECASE)


def production_environment() -> dict[str, str]:
    """The ConfigMap and the web Secret of deploy/kubernetes, with real-looking secrets."""
    documents = list(yaml.safe_load_all(CONFIG.read_text()))
    config = next(d for d in documents if d["kind"] == "ConfigMap")["data"]
    secrets = next(d for d in documents if d["metadata"]["name"] == "pop-secrets")["stringData"]
    environment = {**config, **secrets}
    environment["SECRET_KEY"] = "k8s-" + "Zq7#vW2!pL9$xR4@mN6%tB1^cH8&jF3*dG5(sK0)yE" * 2
    environment["POP_METRICS_TOKEN"] = "a-long-random-metrics-token"
    environment["DATABASE_URL"] = "sqlite:////tmp/pop-check-deploy.sqlite3"  # check opens none
    return environment


def _run_check(extra: dict[str, str]) -> subprocess.CompletedProcess:
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("POP_", "DJANGO_", "SECRET_KEY", "DEBUG", "DATABASE_"))
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**inherited, **extra, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_documented_production_environment_sets_tls_and_trusted_proxies():
    environment = production_environment()

    assert environment["DEBUG"] == "false"
    assert environment["POP_TLS_UPSTREAM"] == "true"
    assert int(environment["POP_NUM_PROXIES"]) >= 1


def test_check_deploy_reports_nothing_with_the_documented_production_environment():
    result = _run_check(production_environment())

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr


def test_check_deploy_warns_when_tls_is_not_declared():
    """Guards the test above: the same check does complain about a plain-HTTP setup."""
    environment = production_environment()
    environment["POP_TLS_UPSTREAM"] = "false"

    result = _run_check(environment)

    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout


def test_tls_upstream_without_a_trusted_proxy_is_refused_at_start():
    environment = production_environment()
    environment["POP_NUM_PROXIES"] = "0"

    result = _run_check(environment)

    assert result.returncode != 0
    assert "POP_NUM_PROXIES" in result.stderr


def _template_files() -> list[Path]:
    return sorted(TEMPLATES.rglob("*.html"))


def test_the_template_scan_finds_inline_scripts_and_handlers():
    """Guards the scan itself."""
    assert INLINE_SCRIPT.search("<script>alert(1)</script>")
    assert INLINE_SCRIPT.search('<script type="module">go()</script>')
    assert not INLINE_SCRIPT.search('<script src="/static/pop.js"></script>')
    assert EVENT_HANDLER.search('<form method="post" onsubmit="return confirm()">')
    assert EVENT_HANDLER.search("<button\n  onclick='x()'>")
    assert not EVENT_HANDLER.search('<form data-confirm="Abort?" action="/x">')
    assert JAVASCRIPT_URL.search('<a href="javascript:void(0)">')


@pytest.mark.parametrize("template", _template_files(), ids=lambda path: str(path.name))
def test_no_template_has_an_inline_script_or_event_handler(template):
    text = template.read_text()

    assert not INLINE_SCRIPT.findall(text)
    assert not EVENT_HANDLER.findall(text)
    assert not JAVASCRIPT_URL.findall(text)


@pytest.mark.django_db
def test_pages_send_a_policy_without_unsafe_inline_scripts(client):
    response = client.get("/accounts/login/")

    policy = response["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";") if part.strip())
    assert directives["script-src"] == "'self'"
    assert directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in directives.get("default-src", "")
