"""Worker-side ``@<name::/json/pointer?fallback>`` references (docs/design.md §5.3).

- A string that is exactly one reference becomes the referenced JSON value with its type
  (objects, arrays, strings, numbers, null and — unlike POP — booleans).
- References inside a longer string must resolve to scalars and are inserted as text
  (strings as they are, other scalars as JSON: ``true``, ``3``, ``null``).
- ``@<name>`` / ``@<name::/>`` is the whole value; the leading ``/`` of the pointer is
  optional; ``?fallback`` is used (as a string) when the pointer does not resolve, and a
  bare ``?`` gives null.
- An unknown name is left untouched and reported in ``missing``; a known name whose
  pointer does not resolve (and has no fallback), or a non-scalar in a composite string,
  is reported in ``invalid``.

Only string values are examined (object keys are not), recursively through objects and
arrays. Names the worker provides: ``<operation>.out``, ``pop.agendaId``,
``pop.operationName``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

REFERENCE_PATTERN = re.compile(r"@<(?P<reference>[^>]+?)(?:::(?P<path>[^>]+?))?>")
OUTPUT_SUFFIX = ".out"
AGENDA_ID = "pop.agendaId"
OPERATION_NAME = "pop.operationName"


@dataclass(frozen=True)
class Reference:
    """One parsed ``@<…>`` occurrence."""

    text: str
    name: str
    pointer: str
    fallback: str | None
    has_fallback: bool

    @property
    def operation(self) -> str | None:
        """The operation whose output this references (``x`` for ``@<x.out…>``), else None."""
        if self.name.endswith(OUTPUT_SUFFIX) and len(self.name) > len(OUTPUT_SUFFIX):
            return self.name[: -len(OUTPUT_SUFFIX)]
        return None


@dataclass
class Resolution:
    """Result of :func:`resolve_references`."""

    value: Any
    missing: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.invalid


class _Unresolved(Exception):
    pass


def parse_reference(match: re.Match[str]) -> Reference:
    name = match.group("reference")
    raw_path = match.group("path")
    fallback: str | None = None
    has_fallback = False
    pointer = ""
    if raw_path is not None:
        pointer, sep, rest = raw_path.partition("?")
        if sep:
            has_fallback = True
            fallback = rest if rest != "" else None
    return Reference(
        text=match.group(0),
        name=name,
        pointer=pointer,
        fallback=fallback,
        has_fallback=has_fallback,
    )


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def find_references(value: Any) -> list[Reference]:
    """Every reference in the string values of a JSON document, in document order."""
    return [
        parse_reference(match)
        for text in _strings(value)
        for match in REFERENCE_PATTERN.finditer(text)
    ]


def referenced_operations(value: Any) -> list[str]:
    """Names of operations whose output (``<name>.out``) the document references."""
    names: list[str] = []
    for reference in find_references(value):
        operation = reference.operation
        if operation is not None and operation not in names:
            names.append(operation)
    return names


def resolve_pointer(document: Any, pointer: str) -> Any:
    """RFC 6901 JSON pointer; the leading ``/`` is optional and ``""``/``"/"`` is the whole.

    Raises ``KeyError`` when the pointer does not resolve.
    """
    if pointer in ("", "/"):
        return document
    if not pointer.startswith("/"):
        pointer = "/" + pointer
    current = document
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(current, Mapping):
            if token not in current:
                raise KeyError(token)
            current = current[token]
        elif isinstance(current, list):
            if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
                raise KeyError(token)
            index = int(token)
            if index >= len(current):
                raise KeyError(token)
            current = current[index]
        else:
            raise KeyError(token)
    return current


def _lookup(context: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    if name in context:
        return True, context[name]
    lowered = name.lower()
    for key, value in context.items():
        if key.lower() == lowered:
            return True, value
    return False, None


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


class _Resolver:
    def __init__(self, context: Mapping[str, Any]) -> None:
        self.context = context
        self.missing: list[str] = []
        self.invalid: list[str] = []

    def _value(self, reference: Reference) -> Any:
        found, document = _lookup(self.context, reference.name)
        if not found:
            if reference.name not in self.missing:
                self.missing.append(reference.name)
            raise _Unresolved
        try:
            return resolve_pointer(document, reference.pointer)
        except KeyError:
            if reference.has_fallback:
                return reference.fallback
            self.invalid.append(f"{reference.text}: path {reference.pointer!r} not found")
            raise _Unresolved from None

    def string(self, text: str) -> Any:
        whole = REFERENCE_PATTERN.fullmatch(text)
        if whole is not None:
            try:
                return self._value(parse_reference(whole))
            except _Unresolved:
                return text

        def substitute(match: re.Match[str]) -> str:
            reference = parse_reference(match)
            try:
                value = self._value(reference)
            except _Unresolved:
                return match.group(0)
            if isinstance(value, Mapping | list):
                self.invalid.append(f"{reference.name} cannot be used in composite string")
                return match.group(0)
            return _scalar_text(value)

        return REFERENCE_PATTERN.sub(substitute, text)

    def walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.string(value)
        if isinstance(value, Mapping):
            return {key: self.walk(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.walk(item) for item in value]
        return value


def resolve_references(value: Any, context: Mapping[str, Any]) -> Resolution:
    """Replace every reference in ``value`` from ``context`` (name → JSON value).

    Returns a new document; ``value`` is not modified.
    """
    resolver = _Resolver(context)
    resolved = resolver.walk(value)
    return Resolution(value=resolved, missing=resolver.missing, invalid=resolver.invalid)
