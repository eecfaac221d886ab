"""Where an agenda's work went: the outputs its operations declared.

The convention (docs/design.md, "Outputs"): an operation's result may hold
`outputs: [{"path": ..., "kind": ..., "bytes": ...}]`, with `url` in place of (or beside)
`path`. The built-in media handlers follow it; any handler may. Results are written by workers,
which run a customer's code, so each entry is checked and bounded here before it is shown on a
page, printed by the CLI or sent in a callback: an entry without a text `path` or `url` is
dropped, texts are cut, `bytes` must be a whole number, and only the first
`MAX_OUTPUTS_PER_OPERATION` entries of an operation, `MAX_OUTPUTS_PER_AGENDA` of an agenda, count.
"""

from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any, Protocol
from urllib.parse import urlsplit

MAX_OUTPUTS_PER_OPERATION = 50
# An agenda may have hundreds of operations: what it shows, answers and sends stays bounded.
MAX_OUTPUTS_PER_AGENDA = 200
MAX_TEXT = 2048
MAX_KIND = 64


class _Operation(Protocol):
    name: str
    result: Any


def _text(value: Any, limit: int) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return value[:limit]


def output_entries(result: Any) -> list[dict[str, Any]]:
    """The well-formed entries of one result's `outputs` (none when it has no such list)."""
    if not isinstance(result, Mapping) or not isinstance(result.get("outputs"), list):
        return []
    entries: list[dict[str, Any]] = []
    for raw in result["outputs"][:MAX_OUTPUTS_PER_OPERATION]:
        if not isinstance(raw, Mapping):
            continue
        path, url = _text(raw.get("path"), MAX_TEXT), _text(raw.get("url"), MAX_TEXT)
        if path is None and url is None:
            continue
        size = raw.get("bytes")
        entry: dict[str, Any] = {
            "path": path,
            "url": url,
            "kind": _text(raw.get("kind"), MAX_KIND),
            "bytes": size if isinstance(size, int) and not isinstance(size, bool) else None,
        }
        if entry["bytes"] is not None and entry["bytes"] < 0:
            entry["bytes"] = None
        entries.append(entry)
    return entries


def agenda_outputs(operations: Iterable[_Operation]) -> list[dict[str, Any]]:
    """The outputs of an agenda's operations (the first MAX_OUTPUTS_PER_AGENDA), in operation
    order, each naming its operation."""
    entries = (
        {"operation": operation.name, **entry}
        for operation in operations
        for entry in output_entries(operation.result)
    )
    return list(islice(entries, MAX_OUTPUTS_PER_AGENDA))


def is_web_link(url: str | None) -> bool:
    """Whether `url` may be rendered as a link: http(s) only (never `javascript:` or `data:`)."""
    if not url:
        return False
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)
