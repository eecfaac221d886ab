"""A compiled fast path for a DRF serializer's validation (msgspec), for the hot puller bodies.

The serializer stays the one declaration: drf-spectacular documents it, and it writes every
error. `compiled_validator(SerializerClass)` derives a msgspec type from its fields once per
process; `run_validation(data)` converts `data` to that type in C and rebuilds the validated
data DRF would return. Anything the type refuses — a wrong type, a bound, a missing field,
surrounding whitespace DRF would trim, a NUL or a lone surrogate, a string DRF would coerce to
a number — goes to the serializer's own `run_validation`, which answers as it always did: the
fast path accepts a subset of what DRF accepts and returns exactly DRF's data for it
(tests/core/test_compiled_validation.py compares both on generated bodies).

Compiled: CharField, IntegerField, FloatField, BooleanField, ChoiceField, UUIDField, ListField
and nested serializers (one or many), with DRF's own length, bound, blank and null rules. Any
other field (the JSON fields, say) is taken as it comes and handed to the field's own
`run_validation`, exactly as the serializer would. A serializer with its own `validate`,
`validate_<field>` or `to_internal_value`, a field with a validator DRF did not put there, a
`source` or a default that is not a constant, is refused when the validator is built
(`NotCompilable`): the fast path never guesses.

Why: DRF's generic field walk cost 57 µs for one batch-report item against 3 µs here
(2026-11-27), and the batch report validates ten per request.
"""

from __future__ import annotations

import functools
import sys
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec
from django.core import validators as django_validators
from rest_framework import serializers
from rest_framework.fields import ProhibitSurrogateCharactersValidator

UNSET = msgspec.UNSET
#: What PostgreSQL's text cannot hold; DRF's CharField refuses it (as do POP's JSON fields).
_UNSTORABLE = "\\x00\\ud800-\\udfff"
#: A string DRF's CharField keeps as it is: no NUL, no lone surrogate, and (when it trims) no
#: whitespace at either end, which `str.strip()` and `\s` agree on.
_KEPT_AS_IS = rf"\A[^{_UNSTORABLE}]*\Z"
_TRIMMED = rf"\A(?:[^\s{_UNSTORABLE}](?:[^{_UNSTORABLE}]*[^\s{_UNSTORABLE}])?)?\Z"
_CHAR_VALIDATORS = (
    django_validators.MaxLengthValidator,
    django_validators.MinLengthValidator,
    django_validators.ProhibitNullCharactersValidator,
    ProhibitSurrogateCharactersValidator,
)
_LENGTH_VALIDATORS = (django_validators.MaxLengthValidator, django_validators.MinLengthValidator)
_NUMBER_VALIDATORS = (django_validators.MaxValueValidator, django_validators.MinValueValidator)
_CONSTANTS = (int, float, str, bool, type(None))


class NotCompilable(TypeError):
    """The serializer has a part whose validation the fast path cannot reproduce exactly."""


Rebuild = Callable[[Any], Any]


class CompiledValidator:
    """`serializer.run_validation(data)`, with the fast path first (see the module)."""

    def __init__(self, serializer: serializers.Serializer) -> None:
        self.serializer = serializer
        self.type, self.rebuild = _compiled_serializer(serializer, type(serializer).__name__)

    def fast_path(self, data: Any) -> Any:
        """DRF's validated data for a body the compiled type accepts; raises for any other
        (msgspec's ValidationError, a field's own ValidationError, or ValueError)."""
        return self.rebuild(msgspec.convert(data, self.type))

    def run_validation(self, data: Any) -> Any:
        try:
            return self.fast_path(data)
        except (msgspec.ValidationError, serializers.ValidationError, ValueError):
            # ValueError: msgspec cannot even encode a lone surrogate to say what is wrong.
            return self.serializer.run_validation(data)


@functools.cache
def compiled_validator(serializer_class: type[serializers.Serializer]) -> CompiledValidator:
    """One compiled validator per context-free serializer class, for the whole process (as
    `core.api.shared_validator`; validation keeps nothing on it)."""
    from core.api import shared_validator  # the shared instance, its fields built

    return CompiledValidator(shared_validator(serializer_class))


def _compiled_serializer(serializer: serializers.Serializer, name: str) -> tuple[Any, Rebuild]:
    """The msgspec Struct type for `serializer`'s writable fields, and the function that turns
    one of its values into the data `serializer.run_validation` returns."""
    _refuse_hooks(serializer)
    struct_fields: list[tuple[str, Any, Any]] = []
    rebuilds: list[tuple[str, Rebuild | None]] = []
    for field_name, field in serializer.fields.items():
        if field.read_only:
            continue
        if field.source != field_name:
            raise NotCompilable(f"{name}.{field_name}: a source of its own")
        annotation, rebuild = _compiled_field(field, f"{name}.{field_name}")
        default = _default(field, f"{name}.{field_name}")
        if default is msgspec.NODEFAULT:
            struct_fields.append((field_name, annotation, msgspec.NODEFAULT))
        else:
            struct_fields.append((field_name, annotation | msgspec.UnsetType, default))
        rebuilds.append((field_name, rebuild))
    struct = msgspec.defstruct(
        "Compiled" + "".join(part for part in name if part.isalnum()),
        [(n, a) if d is msgspec.NODEFAULT else (n, a, d) for n, a, d in struct_fields],
        kw_only=True,
    )

    def rebuild(value: Any) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for field_name, rebuild_field in rebuilds:
            item = getattr(value, field_name)
            if item is UNSET:
                continue
            data[field_name] = item if rebuild_field is None else rebuild_field(item)
        return data

    return struct, rebuild


def _refuse_hooks(serializer: serializers.Serializer) -> None:
    kind = type(serializer)
    for hook in ("run_validation", "to_internal_value", "validate"):
        if getattr(kind, hook) is not getattr(serializers.Serializer, hook):
            raise NotCompilable(f"{kind.__name__}.{hook} is its own")
    if any(hasattr(serializer, f"validate_{name}") for name in serializer.fields):
        raise NotCompilable(f"{kind.__name__} validates a field itself")
    if serializer.validators:
        raise NotCompilable(f"{kind.__name__} has validators")


def _default(field: serializers.Field, where: str) -> Any:
    """The Struct's default: none for a required field, UNSET for one left out when absent,
    else DRF's constant default (returned unvalidated, as DRF does)."""
    if field.required:
        return msgspec.NODEFAULT
    if field.default is serializers.empty:
        return UNSET
    if callable(field.default) or not isinstance(field.default, _CONSTANTS):
        raise NotCompilable(f"{where}: a default that is not a constant")
    return field.default


def _compiled_field(field: serializers.Field, where: str) -> tuple[Any, Rebuild | None]:
    """A field's msgspec annotation (null allowed where DRF allows it), and how its converted
    value becomes DRF's (None: as it is). A field taken as Any decides on null itself."""
    annotation, rebuild = _compiled_value(field, where)
    if annotation is Any or not field.allow_null:
        return annotation, rebuild
    if rebuild is None:
        return annotation | None, None
    rebuild_value = rebuild

    def rebuild_or_null(value: Any) -> Any:
        return None if value is None else rebuild_value(value)

    return annotation | None, rebuild_or_null


def _compiled_value(field: serializers.Field, where: str) -> tuple[Any, Rebuild | None]:
    kind = type(field)
    if isinstance(field, serializers.ListSerializer):
        return _compiled_list(field, field.child, where, allow_empty=field.allow_empty)
    if isinstance(field, serializers.Serializer):
        return _compiled_serializer(field, where)
    if kind is serializers.ListField:
        return _compiled_list(field, field.child, where, allow_empty=field.allow_empty)
    if kind is serializers.CharField:
        _only_validators(field, _CHAR_VALIDATORS, where)
        meta = msgspec.Meta(
            pattern=_TRIMMED if field.trim_whitespace else _KEPT_AS_IS,
            min_length=max(field.min_length or 0, 0 if field.allow_blank else 1),
            **({"max_length": field.max_length} if field.max_length is not None else {}),
        )
        return Annotated[str, meta], None
    if kind is serializers.IntegerField or kind is serializers.FloatField:
        _only_validators(field, _NUMBER_VALIDATORS, where)
        bounds = {
            key: value
            for key, value in (("ge", field.min_value), ("le", field.max_value))
            if value is not None
        }
        if kind is serializers.IntegerField:
            return (Annotated[int, msgspec.Meta(**bounds)] if bounds else int), None
        # DRF refuses what is not finite; bounds refuse infinities and NaN here too.
        bounds.setdefault("ge", -sys.float_info.max)
        bounds.setdefault("le", sys.float_info.max)
        return Annotated[float, msgspec.Meta(**bounds)], None
    if kind is serializers.BooleanField:
        _only_validators(field, (), where)
        return bool, None
    if kind is serializers.UUIDField:
        _only_validators(field, (), where)
        return uuid.UUID, None
    if kind is serializers.ChoiceField:
        _only_validators(field, (), where)
        values = dict(field.choice_strings_to_values)
        if field.allow_blank:
            values[""] = ""
        return Literal[tuple(values)], values.__getitem__
    # Any other field: taken as it comes, validated by the field itself as DRF would.
    return Any, _field_run_validation(field)


def _compiled_list(
    field: serializers.Field, child: serializers.Field, where: str, *, allow_empty: bool
) -> tuple[Any, Rebuild | None]:
    _only_validators(field, _LENGTH_VALIDATORS, where)
    item, rebuild_item = _compiled_field(child, f"{where}[]")
    bounds = {}
    if field.max_length is not None:
        bounds["max_length"] = field.max_length
    if field.min_length is not None or not allow_empty:
        bounds["min_length"] = max(field.min_length or 0, 0 if allow_empty else 1)
    annotation = Annotated[list[item], msgspec.Meta(**bounds)] if bounds else list[item]
    if rebuild_item is None:
        return annotation, None

    def rebuild(values: list) -> list:
        return [rebuild_item(value) for value in values]

    return annotation, rebuild


def _field_run_validation(field: serializers.Field) -> Rebuild:
    def rebuild(value: Any) -> Any:
        return field.run_validation(value)

    return rebuild


def _only_validators(field: serializers.Field, allowed: tuple, where: str) -> None:
    """Refuse a field whose validators are not the ones DRF adds for what the type checks."""
    for validator in getattr(field, "validators", ()):
        if not isinstance(validator, allowed):
            raise NotCompilable(f"{where}: validator {type(validator).__name__}")
