"""Agenda labels: a flat string → string map set at submit (directly, from a template's body or
run, by a schedule), stored in `Agenda.labels` and found by containment (docs/design.md §5.1).

On PostgreSQL a label filter is `labels @> {"k": "v", …}`, served by the GIN index
`agenda_labels` (jsonb_path_ops); elsewhere (the SQLite demo) it is one JSON_EXTRACT
comparison per label. Keys are short identifiers without ':' (a filter is written
`key:value`).
"""

import re
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection
from django.db.models import F, Func, QuerySet, TextField, Value

MAX_LABELS = 32
MAX_KEY_LENGTH = 63
MAX_VALUE_LENGTH = 256
KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/]*")
KEY_RULE = (
    f"a label key is 1–{MAX_KEY_LENGTH} characters: letters, digits, '_', '.', '-', '/', "
    "starting with a letter or digit"
)


def labels_problems(labels: Any) -> dict[str, list[str]]:
    """What is wrong with `labels`, keyed by the field path (`labels`, `labels.<key>`)."""
    if not isinstance(labels, Mapping):
        return {"labels": ["Expected a JSON object of label keys to text values."]}
    problems: dict[str, list[str]] = {}
    if len(labels) > MAX_LABELS:
        problems["labels"] = [f"At most {MAX_LABELS} labels (got {len(labels)})."]
    for key, value in labels.items():
        where = f"labels.{str(key)[:MAX_KEY_LENGTH]}"
        if not isinstance(key, str) or len(key) > MAX_KEY_LENGTH or not KEY_PATTERN.fullmatch(key):
            problems.setdefault(where, []).append(KEY_RULE[0].upper() + KEY_RULE[1:] + ".")
        if not isinstance(value, str):
            problems.setdefault(where, []).append("A label value is text.")
        elif len(value) > MAX_VALUE_LENGTH or any(ord(c) < 32 or c == "\x7f" for c in value):
            problems.setdefault(where, []).append(
                f"A label value is at most {MAX_VALUE_LENGTH} printable characters."
            )
    return problems


def label_filter_parsed(text: str) -> tuple[str, str]:
    """`key:value` (the value may hold ':') → (key, value); ValueError saying what is wrong."""
    key, colon, value = text.partition(":")
    if not colon:
        raise ValueError(f"Write a label filter as key:value (got {text[:80]!r}).")
    if len(key) > MAX_KEY_LENGTH or not KEY_PATTERN.fullmatch(key):
        raise ValueError(KEY_RULE[0].upper() + KEY_RULE[1:] + f" (got {key[:80]!r}).")
    if len(value) > MAX_VALUE_LENGTH:
        raise ValueError(f"A label value is at most {MAX_VALUE_LENGTH} characters.")
    return key, value


def labels_matching(queryset: QuerySet, pairs: Iterable[tuple[str, str]], field: str = "labels"):
    """The rows whose labels hold every (key, value) pair (ANDed)."""
    wanted: dict[str, str] = {}
    for key, value in pairs:
        if wanted.get(key, value) != value:
            return queryset.none()  # one key cannot hold two values
        wanted[key] = value
    if not wanted:
        return queryset
    if connection.vendor == "postgresql":
        return queryset.filter(**{f"{field}__contains": wanted})
    for number, (key, value) in enumerate(sorted(wanted.items())):
        # JSON_EXTRACT as text (Django's key transforms would compare the value as JSON);
        # keys hold no quote (KEY_PATTERN), so the quoted path needs no escaping.
        alias = f"_label_{number}"
        value_of_key = Func(
            F(field), Value(f'$."{key}"'), function="JSON_EXTRACT", output_field=TextField()
        )
        queryset = queryset.alias(**{alias: value_of_key}).filter(**{alias: value})
    return queryset
