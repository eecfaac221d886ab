"""Reading an inbound event, pure (no ORM): a trigger's filter, its payload mapping, its event
id, and the bounded excerpt a firing stores (docs/design.md §5.4).

A payload mapping is written in the templates' `@<…>` language (agenda_language.references)
with the event as the one document references resolve against: `@</Records/0/s3/object/key>`
(a bare JSON pointer) or `@<event::/Records/0/s3/object/key>`, `?fallback` as in templates.
"""

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agenda_language.pointers import follow_tokens, pointer_tokens
from agenda_language.references import (
    REFERENCE_PATTERN,
    find_references,
    parse_reference,
    resolve,
)

EVENT = "event"
MAX_FILTERS = 16
MAX_POINTER = 500
MAX_MATCH_TEXT = 1000
MAX_MAPPING_BYTES = 16 * 1024
MAX_EVENT_ID = 255
MAX_MAPPING_REFERENCES = 200
SCALARS = (str, int, float, bool, type(None))


class EventRefused(Exception):
    """The event cannot run the trigger: `errors` as `{pointer or field: [messages]}`."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{key}: {' '.join(value)}" for key, value in errors.items()))


# --- checks of a trigger's definition ------------------------------------------------------


def pointer_problem(pointer: Any) -> str | None:
    """Why `pointer` is not a JSON pointer a trigger may use; None when it is."""
    if not isinstance(pointer, str):
        return "Expected a JSON pointer (text starting with '/')."
    if not pointer.startswith("/") or len(pointer) > MAX_POINTER:
        return f"Expected a JSON pointer starting with '/', at most {MAX_POINTER} characters."
    return None


def filter_problems(conditions: Any) -> dict[str, list[str]]:
    """What is wrong with a filter: a list of at most MAX_FILTERS `{pointer, equals | prefix}`."""
    if not isinstance(conditions, list):
        return {"filter": ["Expected a list of {pointer, equals | prefix} objects."]}
    if len(conditions) > MAX_FILTERS:
        return {"filter": [f"At most {MAX_FILTERS} conditions (got {len(conditions)})."]}
    problems: dict[str, list[str]] = {}
    for index, condition in enumerate(conditions):
        where = f"filter.{index}"
        if not isinstance(condition, dict):
            problems[where] = ["Expected an object {pointer, equals | prefix}."]
            continue
        unknown = sorted(set(condition) - {"pointer", "equals", "prefix"})
        if unknown:
            problems[where] = [f"Unknown keys: {', '.join(map(str, unknown))[:200]}."]
        problem = pointer_problem(condition.get("pointer"))
        if problem:
            problems[f"{where}.pointer"] = [problem]
        if ("equals" in condition) == ("prefix" in condition):
            problems.setdefault(where, []).append("Give exactly one of `equals` and `prefix`.")
        elif "prefix" in condition and not isinstance(condition["prefix"], str):
            problems[f"{where}.prefix"] = ["A prefix is text."]
        elif "equals" in condition and not isinstance(condition["equals"], SCALARS):
            problems[f"{where}.equals"] = ["Compare with text, a number, a boolean or null."]
        text = condition.get("prefix", condition.get("equals"))
        if isinstance(text, str) and len(text) > MAX_MATCH_TEXT:
            problems[f"{where}"] = [f"A compared text is at most {MAX_MATCH_TEXT} characters."]
    return problems


def as_event_references(value: Any) -> Any:
    """`value` with each bare-pointer reference `@</p…>` written `@<event::/p…>`."""
    if isinstance(value, str):

        def rewrite(match: Any) -> str:
            inner = match.group(0)[2:-1]
            return f"@<{EVENT}::{inner}>" if inner.startswith("/") else match.group(0)

        return REFERENCE_PATTERN.sub(rewrite, value)
    if isinstance(value, Mapping):
        return {key: as_event_references(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_event_references(item) for item in value]
    return value


def mapping_problems(mapping: Any) -> dict[str, list[str]]:
    """What is wrong with a payload mapping: too large, or naming anything but the event."""
    try:
        size = len(json.dumps(mapping, separators=(",", ":")).encode())
    except (TypeError, ValueError):
        return {"payload_mapping": ["Expected JSON."]}
    if size > MAX_MAPPING_BYTES:
        return {"payload_mapping": [f"At most {MAX_MAPPING_BYTES} bytes of JSON (got {size})."]}
    references = find_references(as_event_references(mapping))
    if len(references) > MAX_MAPPING_REFERENCES:
        # Each reference may copy the event: their number bounds what one firing can build.
        return {
            "payload_mapping": [
                f"At most {MAX_MAPPING_REFERENCES} references (got {len(references)})."
            ]
        }
    others = sorted(
        {
            reference.text
            for reference in references
            if reference.name.split(".")[0].lower() != EVENT
        }
    )
    if others:
        return {
            "payload_mapping": [
                "References name the event only (@</pointer> or @<event::/pointer>); "
                f"not: {', '.join(others)[:500]}."
            ]
        }
    return {}


# --- reading one event ---------------------------------------------------------------------


def nonfinite_problem(event: Any) -> str | None:
    """Why `event` cannot be stored as JSON: a number too large for a float (`1e999` parses
    as infinity), which no JSON document may hold; None when every number is finite."""
    pending = [event]
    while pending:
        item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "Numbers must be finite (one is too large for a double)."
        if isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return None


def _at(event: Any, pointer: str) -> tuple[bool, Any]:
    try:
        return True, follow_tokens(event, pointer_tokens(pointer))
    except KeyError:
        return False, None


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def filter_miss(conditions: list[dict[str, Any]], event: Any) -> str | None:
    """Why `event` does not pass the filter (the first condition that fails); None if it does."""
    for condition in conditions:
        pointer = condition["pointer"]
        found, value = _at(event, pointer)
        if not found:
            return f"{pointer} is not in the event."
        if "prefix" in condition:
            if not isinstance(value, str) or not value.startswith(condition["prefix"]):
                prefix = _shown(condition["prefix"])
                return f"{pointer} is {_shown(value)}, not starting with {prefix}."
        elif not _same(value, condition["equals"]):
            return f"{pointer} is {_shown(value)}, not {_shown(condition['equals'])}."
    return None


def _same(value: Any, wanted: Any) -> bool:
    """JSON equality: true is not 1, and 1 is 1.0."""
    if isinstance(value, bool) or isinstance(wanted, bool):
        return type(value) is type(wanted) and value == wanted
    return value == wanted


def _reference_pointer(reference: Any) -> str:
    _, *leading = reference.name.split(".")
    tokens = leading + pointer_tokens(reference.path)
    return "/" + "/".join(token.replace("~", "~0").replace("/", "~1") for token in tokens)


def mapped_size_problem(written: Any, event: Any, limit: int) -> str | None:
    """Why the payload `written` (references as `@<event::…>`) would build more than `limit`
    bytes of JSON from `event`, measured before it is built: the mapping's own size plus the
    encoded size of each value a reference copies (each distinct pointer encoded once)."""
    total = len(json.dumps(written, separators=(",", ":"), ensure_ascii=False).encode())
    sizes: dict[str, int] = {}
    for reference in find_references(written):
        pointer = _reference_pointer(reference)
        if pointer not in sizes:
            found, value = _at(event, pointer)
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False) if found else ""
            sizes[pointer] = len(text.encode(errors="surrogatepass"))
        total += sizes[pointer]
        if total > limit:
            return (
                f"The mapped payload would be more than {limit} bytes "
                "(each reference copies the value it names)."
            )
    return None


def payload_mapped(mapping: Any, event: Any, *, limit: int | None = None) -> Any:
    """The run payload: `mapping` with its references resolved against `event`.

    Raises EventRefused keyed by each JSON pointer that did not resolve (or that names an
    object or array inside longer text), or on `payload_mapping` when the payload would be
    more than `limit` bytes of JSON.
    """
    written = as_event_references(mapping)
    if limit is not None:
        problem = mapped_size_problem(written, event, limit)
        if problem:
            raise EventRefused({"payload_mapping": [problem]})
    resolution = resolve(written, {EVENT: event})
    if resolution.ok:
        return resolution.value
    errors: dict[str, list[str]] = {}
    for text in _strings(written):
        matches = list(REFERENCE_PATTERN.finditer(text))
        whole = len(matches) == 1 and matches[0].span() == (0, len(text))
        for match in matches:
            reference = parse_reference(match)
            if reference.name.split(".")[0].lower() != EVENT:
                errors.setdefault("payload_mapping", []).append(f"{reference.text} names no event.")
                continue
            pointer = _reference_pointer(reference)
            found, value = _at(event, pointer)
            if not found and not reference.has_fallback:
                errors.setdefault(pointer, []).append("Not found in the event.")
            elif found and not whole and isinstance(value, Mapping | list):
                errors.setdefault(pointer, []).append(
                    "An object or array cannot be put inside longer text."
                )
    if not errors:  # a refusal the checks above do not name: say what resolve() said
        errors["payload_mapping"] = resolution.invalid or ["The mapping does not resolve."]
    raise EventRefused({key: sorted(set(messages)) for key, messages in errors.items()})


def _strings(value: Any) -> list[str]:
    """Every string value of `value` (through objects and arrays; keys are not examined)."""
    found: list[str] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found


def event_id(pointer: str, event: Any) -> str:
    """The event's id at `pointer` as text ("" when the trigger names none or the event has
    none there; an object or array is not an id). An id longer than MAX_EVENT_ID characters
    is kept as `sha256:<hex>` of its text, so two long ids never collide by a common head."""
    if not pointer:
        return ""
    found, value = _at(event, pointer)
    if not found or isinstance(value, Mapping | list) or value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) <= MAX_EVENT_ID:
        return text
    return "sha256:" + hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Excerpt:
    """What a firing stores of its event: the event itself, or its first bytes."""

    event: Any
    truncated: bool


def excerpt(event: Any, limit: int, *, ascii_only: bool = False) -> Excerpt:
    """The event if its compact JSON fits in `limit` bytes, else `{"excerpt": <its first bytes
    as text>, "bytes": <size>}`. `ascii_only`: always the text, with every non-ASCII character
    escaped (for an event holding text the database cannot store, NUL or lone surrogates)."""
    text = json.dumps(event, separators=(",", ":"), ensure_ascii=ascii_only)
    size = len(text.encode(errors="surrogatepass"))
    if size <= limit and not ascii_only:
        return Excerpt(event=event, truncated=False)
    head = text.encode(errors="surrogatepass")[:limit].decode(errors="ignore")
    return Excerpt(event={"excerpt": head, "bytes": size}, truncated=size > limit)


def body_excerpt(body: bytes, limit: int) -> Excerpt:
    """What a firing stores of a body that is not a usable event (not JSON, not an object,
    too deep): its first `limit` bytes as text (bad UTF-8 and NUL replaced), and its size."""
    head = body[:limit].decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    return Excerpt(event={"excerpt": head, "bytes": len(body)}, truncated=len(body) > limit)
