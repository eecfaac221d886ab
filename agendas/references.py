"""The `@<name::/json/pointer?fallback>` reference syntax (docs/design.md §5.3)."""

import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

REFERENCE_PATTERN = re.compile(r"@<(?P<reference>.+?)(::(?P<path>.+?))?>")
OUTPUT_SEGMENT = "out"
POP_PREFIX = "pop."
PAYLOAD = "pop.payload"
TRANSFORM_REQUEST = "pop.transformRequest"
AGENDA_ID = "pop.agendaId"
OPERATION_NAME = "pop.operationName"
WORKER_NAMES = frozenset({AGENDA_ID, OPERATION_NAME})


@dataclass(frozen=True)
class Reference:
    """One `@<…>` occurrence; `path` is the JSON pointer without its `?fallback`."""

    name: str
    path: str | None
    fallback: str | None
    has_fallback: bool
    text: str


class UnresolvedReferences(Exception):
    """Raised when references name unknown values (`missing`) or cannot be used (`invalid`)."""

    def __init__(self, missing: list[str], invalid: list[str]) -> None:
        self.missing = list(missing)
        self.invalid = list(invalid)
        parts = []
        if self.missing:
            parts.append(f"Unknown reference names: {', '.join(self.missing)}")
        if self.invalid:
            parts.append(f"Invalid references: {'; '.join(self.invalid)}")
        super().__init__(". ".join(parts) + ".")


def _parse(match: re.Match[str]) -> Reference:
    """Build a Reference from a REFERENCE_PATTERN match."""
    raw_path = match.group("path")
    path, fallback, has_fallback = raw_path, None, False
    if raw_path is not None and "?" in raw_path:
        path, _, rest = raw_path.partition("?")
        has_fallback = True
        fallback = rest or None
    return Reference(
        name=match.group("reference"),
        path=path,
        fallback=fallback,
        has_fallback=has_fallback,
        text=match.group(0),
    )


def _strings(value: Any) -> Iterator[str]:
    """Yield every string node of a JSON document (values and elements, never keys)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def find_references(value: Any) -> list[Reference]:
    """Return every reference in the string nodes of `value`, in document order."""
    return [_parse(match) for text in _strings(value) for match in REFERENCE_PATTERN.finditer(text)]


def output_operation(name: str) -> str | None:
    """Return `op` for a reference name `op.out` (or `op.out.<key>…`), else None."""
    if name.startswith(POP_PREFIX):
        return None
    segments = name.split(".")
    for index in range(len(segments) - 1, 0, -1):
        if segments[index] == OUTPUT_SEGMENT:
            return ".".join(segments[:index])
    return None


def referenced_operation_names(value: Any) -> set[str]:
    """Return the operations whose output (`<op>.out`) `value` references."""
    names = set()
    for reference in find_references(value):
        operation = output_operation(reference.name)
        if operation:
            names.add(operation)
    return names


def _pointer_tokens(path: str | None) -> list[str]:
    """Split a JSON pointer (leading `/` optional, `/` alone = whole) into unescaped tokens."""
    if path is None or path in ("", "/"):
        return []
    if not path.startswith("/"):
        path = "/" + path
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _follow(document: Any, tokens: list[str]) -> Any:
    """Walk `tokens` into `document`; raise KeyError when a token does not resolve."""
    current = document
    for token in tokens:
        if isinstance(current, Mapping) and token in current:
            current = current[token]
        elif (
            isinstance(current, list)
            and token.isdigit()
            and (token == "0" or not token.startswith("0"))
            and int(token) < len(current)
        ):
            current = current[int(token)]
        else:
            raise KeyError(token)
    return current


def _scalar_text(value: Any) -> str:
    """Render a scalar for a composite string: strings as is, the rest as JSON."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    return str(value)


class _Unresolved(Exception):
    """Internal signal: this reference stays as written."""


class _Resolver:
    """Substitutes references from `names`, collecting missing and invalid ones."""

    def __init__(self, names: Mapping[str, Any], deferred: Callable[[str], bool]) -> None:
        self.names = names
        self.deferred = deferred
        self.missing: list[str] = []
        self.invalid: list[str] = []

    def _lookup(self, name: str) -> tuple[Any, list[str]]:
        """Find `name` exactly, else its longest dotted prefix (the rest becomes pointer keys)."""
        if name in self.names:
            return self.names[name], []
        if self.deferred(name):
            raise _Unresolved
        segments = name.split(".")
        for cut in range(len(segments) - 1, 0, -1):
            prefix = ".".join(segments[:cut])
            if prefix in self.names:
                return self.names[prefix], segments[cut:]
        if name not in self.missing:
            self.missing.append(name)
        raise _Unresolved

    def _value(self, reference: Reference) -> Any:
        document, leading = self._lookup(reference.name)
        try:
            return _follow(document, leading + _pointer_tokens(reference.path))
        except KeyError:
            if reference.has_fallback:
                return reference.fallback
            self.invalid.append(f"{reference.text} (path not found)")
            raise _Unresolved from None

    def _string(self, text: str) -> Any:
        matches = list(REFERENCE_PATTERN.finditer(text))
        if not matches:
            return text
        if len(matches) == 1 and matches[0].span() == (0, len(text)):
            try:
                return copy.deepcopy(self._value(_parse(matches[0])))
            except _Unresolved:
                return text

        def substitute(match: re.Match[str]) -> str:
            reference = _parse(match)
            try:
                value = self._value(reference)
            except _Unresolved:
                return match.group(0)
            if isinstance(value, Mapping | list | tuple):
                self.invalid.append(f"{reference.name} cannot be used in composite string")
                return match.group(0)
            return _scalar_text(value)

        return REFERENCE_PATTERN.sub(substitute, text)

    def walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._string(value)
        if isinstance(value, Mapping):
            return {key: self.walk(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.walk(item) for item in value]
        return value


def _resolve(
    value: Any,
    names: Mapping[str, Any],
    *,
    leave_missing: bool,
    deferred: Callable[[str], bool],
) -> Any:
    """Resolve `value`; raise UnresolvedReferences unless everything left over is allowed."""
    resolver = _Resolver(names, deferred)
    resolved = resolver.walk(value)
    if resolver.invalid or (resolver.missing and not leave_missing):
        raise UnresolvedReferences(
            missing=[] if leave_missing else resolver.missing, invalid=resolver.invalid
        )
    return resolved


def resolve_references(value: Any, names: Mapping[str, Any], *, leave_missing: bool = False) -> Any:
    """Return a copy of `value` with every reference to `names` substituted."""
    return _resolve(value, names, leave_missing=leave_missing, deferred=lambda name: False)


def is_worker_reference(name: str) -> bool:
    """Tell whether `name` is only known when the agenda runs (`<op>.out`, `pop.agendaId`, …)."""
    return name in WORKER_NAMES or output_operation(name) is not None


def expand_template(agenda_body: Any, *, payload: Any, static_parameters: Mapping[str, Any]) -> Any:
    """Return the template body with `pop.payload` and static parameters substituted."""
    names = {**static_parameters, PAYLOAD: payload, TRANSFORM_REQUEST: payload}
    return _resolve(agenda_body, names, leave_missing=False, deferred=is_worker_reference)
