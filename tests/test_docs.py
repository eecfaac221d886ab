"""The repository carries its own design: every Markdown link resolves inside it, and no
document, docstring, template or API description points at a file outside it."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", ".git", "node_modules", "test-output", "run", "staticfiles"}
TEXT_SUFFIXES = {".py", ".md", ".html", ".yaml", ".yml", ".sh", ".toml", ".txt", ".js", ".css"}
# The names of the documents the project was asked from, kept out of the repository; written
# in parts so that this file does not name them itself.
OUTSIDE_NAMES = [
    ("DESIGN", " §"),
    ("DESIGN", ".md"),
    ("STYLE", ".md"),
    ("STYLE", " §"),
    ("POP-", "REFERENCE"),
    ("shared", "/design"),
    ("../", "shared"),
]
OUTSIDE = re.compile("|".join(re.escape(head + tail) for head, tail in OUTSIDE_NAMES))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def files(suffixes: set[str]):
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if relative.parts and relative.parts[0] in SKIP or any(p in SKIP for p in relative.parts):
            continue
        if path.is_file() and path.suffix in suffixes:
            yield path


def test_every_markdown_link_resolves_inside_the_repository():
    broken = []
    for path in files({".md"}):
        for target in LINK.findall(path.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            resolved = (path.parent / target.split("#", 1)[0]).resolve()
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_no_file_refers_to_documents_outside_the_repository():
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
        for path in files(TEXT_SUFFIXES)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert offenders == []


@pytest.mark.django_db
def test_the_api_description_refers_to_nothing_outside_the_repository():
    from drf_spectacular.generators import SchemaGenerator

    schema = json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str)

    assert OUTSIDE.findall(schema) == []


def test_the_check_catches_a_link_or_a_reference_outside(tmp_path):
    # Built from parts, so this file does not itself name an outside document.
    outside = (
        "see [the contract](../" + "shared/" + "design/" + "DESIGN" + ".md) and DESIGN" + " §5.1"
    )

    assert OUTSIDE.search(outside)
    [target] = LINK.findall(outside)
    assert not (ROOT / target).resolve().is_relative_to(ROOT)
