"""The compiled fast path (core/compiled_validation.py) answers every body exactly as the DRF
serializer it is compiled from: the same validated data (types, key order and choice values
included, compared by `repr`) or the same errors; and it refuses to compile what it cannot
reproduce."""

import contextlib
import copy
import uuid
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.validators import RegexValidator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from agendas.api.serializers import (
    AgendaBulkItemSerializer,
    AgendaBulkSerializer,
    OperationInputSerializer,
)
from agendas.models import OperationProgress
from core.api import JSONObjectField, JSONValueField, UnknownFieldsRefused
from core.compiled_validation import FAST_PATH_REFUSALS, NotCompilable, compiled_validator
from scheduling.api.puller_serializers import (
    BatchReportItemSerializer,
    BatchReportSerializer,
    PullRequestSerializer,
    ReportSerializer,
)


class NestedSerializer(serializers.Serializer):
    label = serializers.CharField(max_length=5)
    weight = serializers.IntegerField(required=False, allow_null=True, min_value=-3)


class EveryKindSerializer(serializers.Serializer):
    """One field of every kind the fast path compiles, with the options that change DRF's
    answer: blank, null, trimming, bounds, defaults, lengths."""

    text = serializers.CharField(required=False, allow_blank=True, max_length=8)
    kept = serializers.CharField(required=False, trim_whitespace=False, allow_null=True)
    whole = serializers.IntegerField(required=False)
    ratio = serializers.FloatField(required=False)
    flag = serializers.BooleanField(default=False)
    kind = serializers.ChoiceField(choices=["a", "b"], required=False, allow_blank=True)
    ident = serializers.UUIDField(required=False, allow_null=True)
    tags = serializers.ListField(
        child=serializers.ChoiceField(choices=["x", "y"]),
        required=False,
        allow_empty=False,
        max_length=3,
    )
    nested = NestedSerializer(required=False, allow_null=True)
    many = NestedSerializer(many=True, required=False, max_length=2)
    document = JSONObjectField(required=False)
    anything = JSONValueField(required=False)
    # Defaults DRF puts in as they are, not as the field would convert them: an enum's value
    # stays the plain text, a date stays its text.
    state = serializers.ChoiceField(choices=OperationProgress.State.choices, default="pending")
    when = serializers.DateTimeField(default="2020-01-01T00:00:00Z")


class HookedSerializer(UnknownFieldsRefused):
    """DRF's hooks, which the fast path runs in DRF's order: a field's `validate_<field>`
    (on its default too), the serializer's `validate`; and unknown keys refused."""

    text = serializers.CharField(required=False, max_length=8)
    whole = serializers.IntegerField(default=3)
    nested = NestedSerializer(required=False)

    def validate_text(self, value):
        if value == "a":
            raise serializers.ValidationError("not a")
        return value.upper()

    def validate_whole(self, value):
        return value * 2

    def validate(self, attrs):
        if attrs.get("text") == "1" and attrs["whole"] > 2:
            raise serializers.ValidationError("text 1 wants a small whole")
        return {**attrs, "checked": True}


SERIALIZERS = [
    PullRequestSerializer,
    ReportSerializer,
    BatchReportItemSerializer,
    BatchReportSerializer,
    OperationInputSerializer,
    AgendaBulkItemSerializer,
    AgendaBulkSerializer,
    EveryKindSerializer,
    HookedSerializer,
]
# What the bulk item's customer field reads: the requesting principal (one that sees none).
CONTEXT = {"request": SimpleNamespace(user=AnonymousUser())}

TEXTS = st.sampled_from(
    ["", "a", " a", "a ", "\u00a0a", "a\n", "ab cd", "\x00", "a\ud800", "x" * 9, "x" * 101,
     "succeeded", "failed", "running", "x", "y", "1", "1.5", "-2", "true", "noop", "😀" * 5,
     str(uuid.UUID(int=7)), uuid.UUID(int=7).hex, "not-a-uuid"]
)  # fmt: skip
NUMBERS = st.sampled_from(
    [0, 1, -1, 5, 10, 100, 101, -4, 2**63, 10**400, 0.0, 0.5, 1.5, 99.9, 100.0, 100.5, -0.1,
     1e308, float("inf"), float("-inf"), float("nan"), True, False]
)  # fmt: skip
SCALARS = st.one_of(st.none(), TEXTS, NUMBERS, st.text(max_size=12))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def bodies(serializer: serializers.Serializer, depth: int = 0) -> st.SearchStrategy:
    """Dicts with `serializer`'s required fields (mostly) and any subset of the others (and
    an unknown key), each holding a value of its own kind (mostly) or anything else."""
    required, optional, own_kind = {}, {"unknown": JSON}, {}
    for name, field in serializer.fields.items():
        value = st.one_of(values_for(field, depth), JSON)
        (required if field.required else optional)[name] = value
        own_kind[name] = values_for(field, depth)
    return st.one_of(
        st.fixed_dictionaries(required, optional=optional),
        st.fixed_dictionaries({}, optional=required | optional),
        st.fixed_dictionaries(
            {name: own_kind[name] for name in required},
            optional={name: own_kind[name] for name in optional if name in own_kind},
        ),
    )


def values_for(field: serializers.Field, depth: int) -> st.SearchStrategy:
    if isinstance(field, serializers.ListSerializer):
        return st.lists(st.one_of(bodies(field.child, depth + 1), JSON), max_size=3)
    if isinstance(field, serializers.Serializer):
        return bodies(field, depth + 1)
    if isinstance(field, serializers.ListField | serializers.DictField):
        item = st.one_of(values_for(field.child, depth), SCALARS)
        if isinstance(field, serializers.DictField):
            return st.dictionaries(st.text(max_size=3), item, max_size=3)
        return st.lists(item, max_size=4)
    if isinstance(field, serializers.UUIDField):
        return st.one_of(st.uuids().map(str), st.uuids().map(lambda value: value.hex), TEXTS)
    if isinstance(field, serializers.ChoiceField):
        return st.sampled_from([*field.choice_strings_to_values, "", "other"])
    if isinstance(field, serializers.CharField):
        return st.one_of(st.text(alphabet="ab c\t", min_size=1, max_size=6), TEXTS)
    if isinstance(field, serializers.IntegerField | serializers.FloatField):
        low, high = field.min_value, field.max_value
        if isinstance(field, serializers.IntegerField):
            return st.one_of(st.integers(low, high), NUMBERS)
        return st.one_of(st.floats(low, high, allow_nan=False, allow_infinity=False), NUMBERS)
    if isinstance(field, serializers.BooleanField):
        return st.one_of(st.booleans(), SCALARS)
    if isinstance(field, JSONObjectField):
        return st.one_of(st.dictionaries(st.text(max_size=3), JSON, max_size=2), JSON)
    return st.one_of(JSON, SCALARS)


def outcome(validator, data) -> tuple[str, str]:
    try:
        return "valid", repr(validator.run_validation(copy.deepcopy(data)))
    except serializers.ValidationError as error:
        return "invalid", repr(error.detail)


@pytest.mark.django_db
@pytest.mark.parametrize("serializer_class", SERIALIZERS, ids=lambda cls: cls.__name__)
def test_every_body_gets_drf_s_answer_data_or_errors_alike(serializer_class):
    drf = serializer_class(context=CONTEXT)
    compiled = compiled_validator(serializer_class).bound(serializer_class(context=CONTEXT))
    fast_answers = []

    @settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body=st.one_of(bodies(drf), JSON))
    def check(body):
        assert outcome(compiled, body) == outcome(drf, body)
        with contextlib.suppress(*FAST_PATH_REFUSALS):
            fast_answers.append(compiled.fast_path(copy.deepcopy(body)))

    check()
    assert len(fast_answers) >= 10, "too few generated bodies took the fast path"


GOOD_ITEM = {
    "execution": str(uuid.uuid4()),
    "lease_token": "t0k",
    "state": "succeeded",
    "message": "done",
    "percent_complete": 100,
    "operations": [
        {
            "name": "noop",
            "state": "succeeded",
            "percent_complete": 100,
            "result": {"ok": True},
            "diagnostics": [{"message": "m", "code": "c", "detail": None}],
            "params": {},
            "retryable": False,
        }
    ],
    "diagnostics": [],
    "retryable": True,
}


def test_a_well_formed_batch_report_item_takes_the_fast_path_with_drf_s_data():
    compiled = compiled_validator(BatchReportItemSerializer)

    fast = compiled.fast_path(copy.deepcopy(GOOD_ITEM))

    drf = BatchReportItemSerializer().run_validation(copy.deepcopy(GOOD_ITEM))
    assert repr(fast) == repr(drf)
    assert type(fast["percent_complete"]) is float
    assert type(fast["state"]) is type(drf["state"]) is not str  # the choice's own value


def test_what_the_fast_path_refuses_gets_drf_s_own_errors():
    compiled = compiled_validator(BatchReportItemSerializer)
    bad = {**GOOD_ITEM, "lease_token": " t0k", "operations": [{"name": "n", "result": "\x00"}]}

    with pytest.raises(serializers.ValidationError) as refused:
        compiled.run_validation(copy.deepcopy(bad))

    with pytest.raises(serializers.ValidationError) as expected:
        BatchReportItemSerializer().run_validation(copy.deepcopy(bad))
    assert refused.value.detail == expected.value.detail
    assert "operations" in refused.value.detail


def test_a_trimmed_string_and_a_number_in_a_string_are_accepted_as_drf_accepts_them():
    compiled = compiled_validator(PullRequestSerializer)

    data = compiled.run_validation({"count": "7", "worker": "  w1 ", "wait_seconds": "0.5"})

    assert data == {"count": 7, "worker": "w1", "wait_seconds": 0.5}


class RegexSerializer(serializers.Serializer):
    name = serializers.CharField(validators=[RegexValidator("^a")])


class SourceSerializer(serializers.Serializer):
    name = serializers.CharField(source="title")


class CallableDefaultSerializer(serializers.Serializer):
    names = serializers.ListField(child=serializers.CharField(), default=list)


class OwnParsingSerializer(serializers.Serializer):
    name = serializers.CharField()

    def to_internal_value(self, data):
        return super().to_internal_value({"name": data})


class NestedOwnParsingSerializer(serializers.Serializer):
    inner = OwnParsingSerializer(many=True)


@pytest.mark.parametrize(
    "serializer_class",
    [
        RegexSerializer,
        SourceSerializer,
        CallableDefaultSerializer,
        OwnParsingSerializer,
        NestedOwnParsingSerializer,
    ],
    ids=lambda cls: cls.__name__,
)
def test_a_serializer_whose_rules_the_fast_path_cannot_reproduce_is_refused_when_built(
    serializer_class,
):
    with pytest.raises(NotCompilable):
        compiled_validator(serializer_class)


def test_a_validator_serves_only_instances_of_the_class_it_was_compiled_from():
    with pytest.raises(TypeError):
        compiled_validator(PullRequestSerializer).bound(ReportSerializer())
