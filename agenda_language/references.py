"""The `@<name::/json/pointer?fallback>` reference syntax (docs/design.md §5.3).

- A string that is exactly one reference becomes the referenced JSON value with its type
  (objects, arrays, strings, numbers, booleans, null), copied.
- References inside a longer string must resolve to scalars and are inserted as text
  (strings as they are, other scalars as JSON: `true`, `3`, `null`).
- `@<name>` / `@<name::/>` is the whole value; `?fallback` is used (as a string) when the
  pointer does not resolve, and a bare `?` gives null.
- A name is looked up exactly, then ignoring case, then through its longest dotted prefix
  (`@<probe.out.size::/w>` reads `/size/w` of `probe.out`).
- An unknown name stays as written and is reported in `missing`; a known name whose pointer
  does not resolve (without a fallback), or a non-scalar in a longer string, in `invalid`.

Only string values are examined (object keys are not), through objects and arrays.
"""

import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agenda_language.pointers import follow_tokens, pointer_tokens

REFERENCE_PATTERN = re.compile(r"@<(?P<reference>.+?)(::(?P<path>.+?))?>")
OUTPUT_SEGMENT = "out"
POP_PREFIX = "pop."
PAYLOAD = "pop.payload"
TRANSFORM_REQUEST = "pop.transformRequest"
AGENDA_ID = "pop.agendaId"
OPERATION_NAME = "pop.operationName"
WORKER_NAMES = frozenset({AGENDA_ID, OPERATION_NAME})


def output_name(operation: str) -> str:
    """The name an operation's result is known by once it succeeded: `<operation>.out`."""
    return f"{operation}.{OUTPUT_SEGMENT}"


def output_operation(name: str) -> str | None:
    """Return `op` for a reference name `op.out` (or `op.out.<key>…`), else None."""
    if name.startswith(POP_PREFIX):
        return None
    segments = name.split(".")
    for index in range(len(segments) - 1, 0, -1):
        if segments[index] == OUTPUT_SEGMENT:
            return ".".join(segments[:index])
    return None


@dataclass(frozen=True)
class Reference:
    """One `@<…>` occurrence; `path` is the JSON pointer without its `?fallback`."""

    name: str
    path: str | None
    fallback: str | None
    has_fallback: bool
    text: str

    @property
    def pointer(self) -> str:
        """The pointer as written, `""` when there is none."""
        return self.path or ""

    @property
    def operation(self) -> str | None:
        """The operation whose output this references (`x` for `@<x.out…>`), else None."""
        return output_operation(self.name)


def parse_reference(match: re.Match[str]) -> Reference:
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
    return [
        parse_reference(match)
        for text in _strings(value)
        for match in REFERENCE_PATTERN.finditer(text)
    ]


def referenced_operations(value: Any) -> list[str]:
    """The operations whose output (`<op>.out`) `value` references, first mention first."""
    names: list[str] = []
    for reference in find_references(value):
        operation = reference.operation
        if operation is not None and operation not in names:
            names.append(operation)
    return names


def referenced_operation_names(value: Any) -> set[str]:
    """The operations whose output (`<op>.out`) `value` references."""
    return set(referenced_operations(value))


def is_worker_reference(name: str) -> bool:
    """Tell whether `name` is only known when the agenda runs (`<op>.out`, `pop.agendaId`, …)."""
    return name in WORKER_NAMES or output_operation(name) is not None


@dataclass
class Resolution:
    """A resolved document and what could not be resolved in it."""

    value: Any
    missing: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.invalid


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


def _scalar_text(value: Any) -> str:
    """Render a scalar for a longer string: strings as is, the rest as JSON."""
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
        self.lowered = {str(key).lower(): key for key in names}
        self.missing: list[str] = []
        self.invalid: list[str] = []

    def _known(self, name: str) -> tuple[bool, Any]:
        if name in self.names:
            return True, self.names[name]
        key = self.lowered.get(name.lower())
        if key is not None:
            return True, self.names[key]
        return False, None

    def _lookup(self, name: str) -> tuple[Any, list[str]]:
        """Find `name` exactly, else its longest dotted prefix (the rest becomes pointer keys)."""
        found, value = self._known(name)
        if found:
            return value, []
        if self.deferred(name):
            raise _Unresolved
        segments = name.split(".")
        for cut in range(len(segments) - 1, 0, -1):
            found, value = self._known(".".join(segments[:cut]))
            if found:
                return value, segments[cut:]
        if name not in self.missing:
            self.missing.append(name)
        raise _Unresolved

    def _value(self, reference: Reference) -> Any:
        document, leading = self._lookup(reference.name)
        try:
            return follow_tokens(document, leading + pointer_tokens(reference.path))
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
                return copy.deepcopy(self._value(parse_reference(matches[0])))
            except _Unresolved:
                return text

        def substitute(match: re.Match[str]) -> str:
            reference = parse_reference(match)
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


def resolve(
    value: Any, names: Mapping[str, Any], *, deferred: Callable[[str], bool] | None = None
) -> Resolution:
    """Return a copy of `value` with every reference to `names` substituted, and what was not.

    A name for which `deferred(name)` holds stays as written without being reported."""
    resolver = _Resolver(names, deferred or (lambda name: False))
    resolved = resolver.walk(value)
    return Resolution(value=resolved, missing=resolver.missing, invalid=resolver.invalid)


def resolve_references(value: Any, names: Mapping[str, Any], *, leave_missing: bool = False) -> Any:
    """Return a copy of `value` with every reference to `names` substituted; raise
    UnresolvedReferences for invalid ones, and for unknown names unless `leave_missing`."""
    resolution = resolve(value, names)
    if resolution.invalid or (resolution.missing and not leave_missing):
        raise UnresolvedReferences(
            missing=[] if leave_missing else resolution.missing, invalid=resolution.invalid
        )
    return resolution.value


def expand_template(agenda_body: Any, *, payload: Any, static_parameters: Mapping[str, Any]) -> Any:
    """Return the template body with `pop.payload` and static parameters substituted; names only
    known when the agenda runs stay as written."""
    names = {**static_parameters, PAYLOAD: payload, TRANSFORM_REQUEST: payload}
    resolution = resolve(agenda_body, names, deferred=is_worker_reference)
    if resolution.invalid or resolution.missing:
        raise UnresolvedReferences(missing=resolution.missing, invalid=resolution.invalid)
    return resolution.value
