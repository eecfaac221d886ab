"""An agenda's submit options (everything but its operations and customer), checked one way
whichever way they come in: a direct submission and a bulk item (the API's serializers extend
AgendaOptionsSerializer), a template's body when the template is saved, and the expanded body
plus the caller's overrides when a template runs (schedules included).
"""

import math
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from rest_framework import serializers

from agenda_language.references import find_references
from agendas.labels import MAX_LABELS, labels_problems
from agendas.validation import COST_RANGE
from core.api import JSONObjectField, OptionalURLField, flatten_errors


class AgendaOptionsSerializer(serializers.Serializer):
    params = JSONObjectField(required=False, help_text="Agenda-wide parameters.")
    link_id = serializers.CharField(
        max_length=255, required=False, allow_blank=True, help_text="Grouping key."
    )
    external_id = serializers.CharField(
        max_length=255, required=False, allow_blank=True, help_text="Your own id for it."
    )
    priority = serializers.IntegerField(
        required=False, min_value=0, max_value=9, help_text="0–9, higher first; default 5."
    )
    max_attempts = serializers.IntegerField(
        required=False, min_value=1, max_value=20, help_text="1–20; default 3."
    )
    retry_delay_seconds = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=86_400,
        help_text="Backoff base; doubles per attempt, capped at 600 s. Default 10.",
    )
    cost = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=COST_RANGE[0],
        max_value=COST_RANGE[1],
        help_text="Expected execution seconds, charged to your fair share when it is queued "
        "(on `fair_share` insights) and corrected to the real time when it ends. Default: "
        "your running mean on the insight.",
    )
    labels = JSONObjectField(
        required=False,
        help_text=f"Up to {MAX_LABELS} labels, key → text, to find and act on sets of agendas "
        "(`?label=key:value`). Keys: letters, digits, '_', '.', '-', '/'.",
    )
    callback_url = OptionalURLField(required=False, help_text="Overrides the customer's.")
    run_after = serializers.DateTimeField(
        required=False, allow_null=True, help_text="Not eligible before this time."
    )
    do_not_run = serializers.BooleanField(
        required=False, help_text="Hold it (pending) until rerun."
    )
    default_insight = serializers.CharField(
        max_length=200, required=False, help_text="Preferred insight, by name or id."
    )

    def validate_labels(self, value: dict) -> dict:
        problems = labels_problems(value)
        if "labels" in problems:  # about the whole map
            raise serializers.ValidationError(problems["labels"])
        if problems:  # about single labels: reported as labels.<key>
            raise serializers.ValidationError(
                {path.removeprefix("labels."): messages for path, messages in problems.items()}
            )
        return value

    def validate_cost(self, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise serializers.ValidationError("A finite number of seconds is required.")
        return value


class KeyedAgendaOptionsSerializer(AgendaOptionsSerializer):
    """The options plus an idempotency key (a bulk item, a template body, a template run)."""

    idempotency_key = serializers.CharField(
        max_length=255,
        required=False,
        help_text="Like the Idempotency-Key header, for this item.",
    )


OPTION_NAMES: tuple[str, ...] = tuple(KeyedAgendaOptionsSerializer().fields)


def agenda_options_checked(options: Mapping[str, Any], *, prefix: str = "") -> dict[str, Any]:
    """The options as agenda_submit takes them (`run_after` a datetime, text trimmed…), or a
    ValidationError naming each bad one as `<prefix><name>` (`agenda.link_id`)."""
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise TypeError(f"Unknown agenda options {unknown}")
    try:
        return dict(KeyedAgendaOptionsSerializer().run_validation(dict(options)))
    except serializers.ValidationError as error:
        raise ValidationError(
            {f"{prefix}{path}": messages for path, messages in flatten_errors(error.detail).items()}
        ) from error


def template_body_option_errors(body: Mapping[str, Any]) -> dict[str, list[str]]:
    """The options of a template's (unexpanded) body that no payload can make valid, named
    `agenda.<name>`. An option written as an @<…> text is checked when the template runs."""
    options = {
        name: body[name]
        for name in OPTION_NAMES
        if name in body and not (isinstance(body[name], str) and find_references(body[name]))
    }
    try:
        agenda_options_checked(options, prefix="agenda.")
    except ValidationError as error:
        return error.message_dict
    return {}
