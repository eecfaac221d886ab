"""popclient stays standalone: it loads nothing beyond httpx, the standard library and the
agenda language it shares with the server (itself standard library only)."""

import json
import subprocess
import sys

SERVER_PACKAGES = {"django", "rest_framework", "agendas", "resourcepools", "scheduling", "popsite"}


def loaded_top_level_modules(imports):
    report = "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules})))"
    script = f"import json, sys\n{imports}\n{report}"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(result.stdout))


def test_popclient_loads_only_httpx_and_the_standard_library():
    baseline = loaded_top_level_modules("import httpx")
    loaded = loaded_top_level_modules(
        "import popclient, popclient.cli, popclient.client, popclient.dag\n"
        "import popclient.handlers, popclient.worker"
    )

    assert loaded & SERVER_PACKAGES == set()
    extra = loaded - baseline - set(sys.stdlib_module_names) - {"popclient", "agenda_language"}
    assert extra == set()


def test_the_agenda_language_loads_only_the_standard_library():
    baseline = loaded_top_level_modules("")
    loaded = loaded_top_level_modules(
        "import agenda_language.dependencies, agenda_language.progress, agenda_language.references"
    )

    assert loaded - baseline - set(sys.stdlib_module_names) == {"agenda_language"}


def test_cli_entry_point_is_main():
    from popclient import cli

    assert callable(cli.main)
