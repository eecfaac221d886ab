"""A template's `payload_schema`: checked when the template is saved, applied safely at run.

jsonschema, left to itself, fetches a `$ref` it does not hold (from any URL, `file://`
included) and runs `pattern` with Python's backtracking `re`. A payload schema here is one
self-contained JSON Schema (draft 2020-12) document:

- every `$ref` points inside the document (`#…`) and resolves there, no `$ref` chain loops
  back without reading the payload, and no subschema sets `$id` or uses `$dynamicRef`;
- every `pattern` and `patternProperties` key compiles with RE2, the linear-time engine that
  also runs them (Python's `re` never sees a schema's pattern);
- it is at most MAX_SCHEMA_BYTES of JSON, nested at most MAX_SCHEMA_DEPTH deep.

`payload_schema_errors` is the check at save; `payload_errors` validates a payload at run
with a registry that retrieves nothing, `format` as an annotation only, and a deadline, and
repeats the save check first, so a schema stored before these rules is a 400, never a fetch.
"""

import contextvars
import functools
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

import re2
import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator, SchemaError, validators
from jsonschema.exceptions import ValidationError as SchemaViolation
from referencing.jsonschema import DRAFT202012

MAX_SCHEMA_BYTES = 32 * 1024
MAX_SCHEMA_DEPTH = 32
#: How many subschemas (through `$ref`, `allOf`, …) one schema may apply to the same value.
MAX_IN_PLACE_SCHEMAS = 10_000
#: The longest a payload may take to check against a schema (seconds of wall time).
CHECK_SECONDS = 1.0
DRAFT_2020_12 = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    }
)
# Keywords that apply their subschemas to the same value (a `$ref` cycle through them never
# ends); the others descend into a member or item of the value.
IN_PLACE_ONE = ("not", "if", "then", "else")
IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
# Where draft 2020-12 holds subschemas: a map of them, a list of them, or one.
SCHEMA_MAPS = frozenset(
    {"$defs", "definitions", "properties", "patternProperties", "dependentSchemas"}
)
SCHEMA_LISTS = frozenset({*IN_PLACE_MANY, "prefixItems"})
SCHEMA_ONE = frozenset(
    {*IN_PLACE_ONE, "items", "contains", "propertyNames", "contentSchema"}
    | {"additionalProperties", "unevaluatedProperties", "unevaluatedItems"}
)


class PayloadCheckTooSlow(Exception):
    """The payload's check passed its deadline."""


# --- retrieval: none ------------------------------------------------------------------------


def _retrieve_nothing(uri: str) -> referencing.Resource:
    """A payload schema is one document: every other URI is unknown, never fetched or read."""
    raise referencing.exceptions.NoSuchResource(ref=uri)


OFFLINE_REGISTRY: referencing.Registry = referencing.Registry(retrieve=_retrieve_nothing)


# --- RE2 ------------------------------------------------------------------------------------


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.never_capture = True
    options.max_mem = 1 << 20  # per pattern; past it RE2 falls back to its (linear) NFA
    return options


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _re2_options())


def pattern_error(pattern: str) -> str | None:
    """Why RE2 cannot compile `pattern`, or None when it can."""
    try:
        _compiled(pattern)
    except re2.error as error:
        reason = error.args[0] if error.args else ""
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return str(reason) or "not a usable regular expression"
    return None


def _matches(pattern: str, text: str) -> bool:
    return _compiled(pattern).search(text) is not None


# --- the check at save ----------------------------------------------------------------------


def _walk(schema: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every JSON value of the document with its path, outermost first (iterative)."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), schema)]
    while stack:
        path, value = stack.pop()
        yield path, value
        if len(path) > MAX_SCHEMA_DEPTH:
            continue
        if isinstance(value, dict):
            stack.extend(((*path, str(key)), item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(((*path, str(index)), item) for index, item in enumerate(value))


def _where(path: tuple[str, ...]) -> str:
    return ".".join(path) or "the top level"


def _shape_errors(schema: Any) -> list[str]:
    """Depth, size, `$schema`, `$id`, `$ref`, `$dynamicRef` and the patterns, by location.

    Every object of the document is read as if it were a schema (a `const` value holding
    `"$ref": "http://…"` is refused too): nothing that could be a reference slips through.
    """
    errors: list[str] = []
    for path, value in _walk(schema):
        if len(path) > MAX_SCHEMA_DEPTH:
            return [f"Nested deeper than {MAX_SCHEMA_DEPTH} levels (at {_where(path)})."]
        if not isinstance(value, dict):
            continue
        where = _where(path)
        if isinstance(value.get("$ref"), str) and not value["$ref"].startswith("#"):
            errors.append(
                f"`$ref` at {where} points outside this schema; only `#…` references to "
                "its own parts are allowed."
            )
        if "$dynamicRef" in value or "$dynamicAnchor" in value:
            errors.append(f"`$dynamicRef` and `$dynamicAnchor` are not supported ({where}).")
        if path and isinstance(value.get("$id"), str):
            errors.append(f"`$id` is allowed only at the top level (found at {where}).")
        if isinstance(value.get("pattern"), str):
            reason = pattern_error(value["pattern"])
            if reason:
                errors.append(f"`pattern` at {where} is not a usable RE2 expression: {reason}.")
        if isinstance(value.get("patternProperties"), dict):
            for key in value["patternProperties"]:
                reason = pattern_error(key)
                if reason:
                    errors.append(
                        f"`patternProperties` key {key!r} at {where} is not a usable RE2 "
                        f"expression: {reason}."
                    )
    declared = schema.get("$schema") if isinstance(schema, dict) else None
    if declared is not None and declared not in DRAFT_2020_12:
        errors.append("`$schema` must be the draft 2020-12 meta-schema (or left out).")
    return errors


def _references(schema: dict) -> Iterator[tuple[tuple[str, ...], dict, str]]:
    for path, value in _walk(schema):
        if isinstance(value, dict) and isinstance(value.get("$ref"), str):
            yield path, value, value["$ref"]


def _in_place(node: dict, targets: dict[int, Any]) -> Iterator[Any]:
    """The subschemas applied to the same value as `node` (its `$ref` target included)."""
    for keyword in IN_PLACE_ONE:
        yield node.get(keyword)
    for keyword in IN_PLACE_MANY:
        if isinstance(node.get(keyword), list):
            yield from node[keyword]
    if isinstance(node.get("dependentSchemas"), dict):
        yield from node["dependentSchemas"].values()
    if id(node) in targets:
        yield targets[id(node)]


def _loops(schema: dict, targets: dict[int, Any]) -> list[str]:
    """Where a `$ref` leads back to a schema already being applied to the same value, or
    fans out (`allOf` of `$ref`s of `allOf`s …) to over MAX_IN_PLACE_SCHEMAS of them."""
    nodes = {id(value): (path, value) for path, value in _walk(schema) if isinstance(value, dict)}
    for target in targets.values():
        if isinstance(target, dict) and id(target) not in nodes:
            nodes[id(target)] = (("(reference target)",), target)
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    applied: dict[int, int] = {}  # done node: the subschemas it applies to one value
    loops: list[str] = []
    for start in nodes:
        if start in state:
            continue
        stack = [(start, iter(list(_in_place(nodes[start][1], targets))))]
        state[start] = 1
        while stack:
            current, children = stack[-1]
            for child in children:
                if not isinstance(child, dict):
                    continue
                if state.get(id(child)) == 1:
                    loops.append(
                        f"`$ref` at {_where(nodes[current][0])} loops back to a schema it is "
                        "part of without reading any of the payload."
                    )
                    continue
                if id(child) not in state:
                    state[id(child)] = 1
                    stack.append((id(child), iter(list(_in_place(child, targets)))))
                    break
            else:
                state[current] = 2
                stack.pop()
                applied[current] = 1 + sum(
                    applied.get(id(child), 0)
                    for child in _in_place(nodes[current][1], targets)
                    if isinstance(child, dict)
                )
                if applied[current] > MAX_IN_PLACE_SCHEMAS and not loops:
                    return [
                        f"The schema at {_where(nodes[current][0])} applies over "
                        f"{MAX_IN_PLACE_SCHEMAS} subschemas to one value (through `$ref`, "
                        "`allOf`, `anyOf`, …)."
                    ]
    return loops


def _subschema_position(reference: str) -> bool:
    """Whether a `#/json/pointer` reference (or an `#anchor`, which only schemas declare)
    names a place where a schema stands: the meta-schema check at save read it as one."""
    fragment = unquote(reference[1:])
    if not fragment.startswith("/"):
        return True
    expect = "schema"
    for segment in fragment[1:].split("/"):
        segment = segment.replace("~1", "/").replace("~0", "~")
        if expect in ("name", "index"):
            expect = "schema"
        elif segment in SCHEMA_MAPS:
            expect = "name"
        elif segment in SCHEMA_LISTS:
            expect = "index"
        elif segment in SCHEMA_ONE:
            expect = "schema"
        else:
            return False
    return expect == "schema"


def _reference_errors(schema: dict) -> list[str]:
    """Each `$ref` resolves (offline) to a subschema of this document; no `$ref` loop."""
    resolver = OFFLINE_REGISTRY.resolver_with_root(DRAFT202012.create_resource(schema))
    errors: list[str] = []
    targets: dict[int, Any] = {}
    for path, node, reference in _references(schema):
        where = _where(path)
        try:
            target = resolver.lookup(reference).contents
        except referencing.exceptions.Unresolvable:
            errors.append(f"`$ref` at {where} points to nothing in this schema.")
            continue
        if not isinstance(target, dict | bool) or not _subschema_position(reference):
            errors.append(f"`$ref` at {where} does not point to a subschema.")
            continue
        targets[id(node)] = target
    return errors or _loops(schema, targets)


def payload_schema_errors(schema: Any) -> list[str]:
    """Every reason `schema` cannot be a template's payload schema; [] when it can (or is
    None: no schema)."""
    if schema is None:
        return []
    if not isinstance(schema, dict):
        return ["Must be a JSON object (a JSON Schema, draft 2020-12)."]
    errors = _shape_errors(schema)
    if errors:
        return errors
    size = len(json.dumps(schema, separators=(",", ":")))
    if size > MAX_SCHEMA_BYTES:
        return [f"Ensure the schema has no more than {MAX_SCHEMA_BYTES} bytes of JSON ({size})."]
    try:
        Draft202012Validator.check_schema(schema, format_checker=None)
    except SchemaError as error:
        return [f"Not a valid JSON Schema: {error.message}"]
    return _reference_errors(schema)


# --- the check at run -----------------------------------------------------------------------

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "payload_check_deadline", default=None
)


def _additional_keys(instance: Mapping, schema: Mapping) -> Iterator[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    for key in instance:
        if key not in properties and not any(_matches(pattern, key) for pattern in patterns):
            yield key


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield SchemaViolation(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict, instance: Any, schema: Any) -> Iterator:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator:
    if not validator.is_type(instance, "object"):
        return
    extras = sorted(_additional_keys(instance, schema))
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        yield SchemaViolation(
            f"Additional properties are not allowed ({', '.join(map(repr, extras))})"
        )


def _evaluated_keys(validator: Any, instance: Mapping, schema: Any) -> set[str]:
    """jsonschema's find_evaluated_property_keys_by_schema, with RE2 for patternProperties."""
    if not isinstance(schema, dict):
        return set()
    keys: set[str] = set()
    reference = schema.get("$ref")
    if reference is not None:
        resolved = validator._resolver.lookup(reference)
        inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
        keys |= _evaluated_keys(inner, instance, resolved.contents)
    if isinstance(schema.get("properties"), dict):
        keys |= schema["properties"].keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (subschema := schema.get(keyword)) is not None:
            keys |= {
                key
                for key, value in instance.items()
                if next(validator.descend(value, subschema), None) is None
            }
    for pattern in schema.get("patternProperties", {}):
        keys |= {key for key in instance if _matches(pattern, key)}
    for key, subschema in (schema.get("dependentSchemas") or {}).items():
        if key in instance:
            keys |= _evaluated_keys(validator, instance, subschema)
    for keyword in IN_PLACE_MANY:
        for subschema in schema.get(keyword, []):
            if next(validator.descend(instance, subschema), None) is None:
                keys |= _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated_keys(validator, instance, schema["if"])
            keys |= _evaluated_keys(validator, instance, schema.get("then"))
        else:
            keys |= _evaluated_keys(validator, instance, schema.get("else"))
    return keys


def _unevaluated_properties(validator: Any, rest: Any, instance: Any, schema: Any) -> Iterator:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    refused = sorted(
        key
        for key in instance
        if key not in evaluated
        and next(validator.descend(instance[key], rest, path=key), None) is not None
    )
    if refused:
        yield SchemaViolation(
            f"Unevaluated properties are not allowed ({', '.join(map(repr, refused))})"
        )


def _identity(value: Any) -> Any:
    """A hashable stand-in equal exactly when JSON Schema calls two values equal."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(_identity(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _identity(item)) for key, item in value.items()))
    return ("other", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator:
    # jsonschema's own check falls back to comparing every pair: quadratic in a large array.
    if unique and validator.is_type(instance, "array"):
        identities = [_identity(item) for item in instance]
        if len(set(identities)) != len(identities):
            yield SchemaViolation("The array has non-unique elements.")


def _annotation_only(validator: Any, value: Any, instance: Any, schema: Any) -> None:
    """`format` is an annotation (draft 2020-12's default): its checks use Python regexes."""
    return None


def _within_deadline(keyword: Any) -> Any:
    def checked(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        deadline = _DEADLINE.get()
        if deadline is not None and time.monotonic() > deadline:
            raise PayloadCheckTooSlow
        return keyword(validator, value, instance, schema)

    return checked


_KEYWORDS = {
    **Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
    "uniqueItems": _unique_items,
    "format": _annotation_only,
}
PayloadValidator = validators.extend(
    Draft202012Validator,
    validators={name: _within_deadline(keyword) for name, keyword in _KEYWORDS.items()},
)


@functools.lru_cache(maxsize=128)
def _checked(schema_json: str) -> tuple[tuple[str, ...], Any]:
    """(the save check's errors, a validator when there are none) for one schema's JSON."""
    schema = json.loads(schema_json)
    errors = tuple(payload_schema_errors(schema))
    if errors:
        return errors, None
    return (), PayloadValidator(schema, registry=OFFLINE_REGISTRY, format_checker=None)


def payload_errors(schema: Any, payload: Any) -> dict[str, list[str]]:
    """The payload's problems against the schema by field path (`payload.url`), `{}` when it
    passes; a schema that fails the save check is `{"payload_schema": [...]}` and is never
    applied. Bounded in time by CHECK_SECONDS whatever the schema."""
    if schema is None:
        return {}
    try:
        errors, validator = _checked(json.dumps(schema, sort_keys=True))
    except RecursionError:
        errors, validator = (f"Nested deeper than {MAX_SCHEMA_DEPTH} levels.",), None
    if errors:
        return {
            "payload_schema": [
                "The template's payload schema is unusable; its owner must fix it.",
                *errors,
            ]
        }
    token = _DEADLINE.set(time.monotonic() + CHECK_SECONDS)
    try:
        problems = sorted(
            validator.iter_errors(payload), key=lambda error: [str(part) for part in error.path]
        )
    except PayloadCheckTooSlow:
        return {"payload": [f"Checking the payload took over {CHECK_SECONDS:g} s; simplify it."]}
    except RecursionError:
        return {"payload": ["The payload is nested too deeply to check against the schema."]}
    except referencing.exceptions.Unresolvable:
        return {"payload_schema": ["The template's payload schema has an unresolvable `$ref`."]}
    finally:
        _DEADLINE.reset(token)
    found: dict[str, list[str]] = {}
    for problem in problems:
        path = ".".join(["payload", *(str(part) for part in problem.path)])
        found.setdefault(path, []).append(problem.message)
    return found
