"""An example payload built from a template's payload schema: what the template run form
starts from, so a first preview does not fail on a required field.

The schema's own `examples` (or `example`, `default`, `const`, first `enum` value) win at every
level; otherwise an object gets its required properties, a string a placeholder (a URL where
the format says so), a number its minimum or 0. Local `$ref`s are not followed: the form is a
starting point, the run validates the payload for real.
"""

from typing import Any

MAX_DEPTH = 8


def payload_example(schema: Any) -> Any:
    """A payload shaped like `schema` asks (`{}` for none)."""
    example = _example(schema, 0)
    return {} if example is None else example


def _example(schema: Any, depth: int) -> Any:
    if depth > MAX_DEPTH or not isinstance(schema, dict):
        return None
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    for key in ("example", "default", "const"):
        if key in schema:
            return schema[key]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or (kind is None and isinstance(schema.get("properties"), dict)):
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = [name for name in schema.get("required") or [] if isinstance(name, str)]
        return {name: _placeholder(properties.get(name), depth + 1) for name in required}
    if kind == "array":
        item = _example(schema.get("items"), depth + 1)
        minimum = schema.get("minItems")
        return [item] if isinstance(minimum, int) and minimum > 0 and item is not None else []
    if kind == "string":
        return _string(schema)
    if kind in ("integer", "number"):
        minimum = schema.get("minimum", schema.get("exclusiveMinimum"))
        return minimum if isinstance(minimum, int | float) and not isinstance(minimum, bool) else 0
    if kind == "boolean":
        return False
    return None


def _placeholder(schema: Any, depth: int) -> Any:
    value = _example(schema, depth)
    return "" if value is None else value


def _string(schema: dict) -> str:
    fmt = schema.get("format")
    if fmt in ("uri", "url", "iri", "uri-reference"):
        return "https://example.com/input.mp4"
    if fmt == "date-time":
        return "2030-01-01T00:00:00Z"
    if fmt == "email":
        return "someone@example.com"
    length = schema.get("minLength")
    return "x" * length if isinstance(length, int) and 0 < length <= 64 else "example"
