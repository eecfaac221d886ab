"""Range checks of an agenda's numeric options, for service callers too (docs/design.md §5.1)."""

import pytest
from django.core.exceptions import ValidationError

from agendas.models import Agenda
from agendas.validation import validate_agenda_options


@pytest.mark.parametrize(
    ("options", "errors"),
    [
        ({"priority": 0, "max_attempts": 1, "retry_delay_seconds": 0}, {}),
        ({"priority": 9, "max_attempts": 20, "retry_delay_seconds": 86_400}, {}),
        ({"max_attempts": 0}, {"max_attempts": ["Must be between 1 and 20."]}),
        ({"max_attempts": 21}, {"max_attempts": ["Must be between 1 and 20."]}),
        ({"priority": 10}, {"priority": ["Must be between 0 and 9."]}),
        ({"retry_delay_seconds": -1}, {"retry_delay_seconds": ["Must be between 0 and 86400."]}),
        ({"max_attempts": "3"}, {"max_attempts": ["A whole number is required."]}),
        ({"priority": True}, {"priority": ["A whole number is required."]}),
    ],
)
def test_ranges(options, errors):
    assert validate_agenda_options(**options) == errors


@pytest.mark.django_db
@pytest.mark.parametrize("max_attempts", [0, 21])
def test_a_service_caller_gets_a_field_error_and_nothing_is_written(
    submitter, submit_agenda, max_attempts
):
    with pytest.raises(ValidationError) as caught:
        submit_agenda(submitter, max_attempts=max_attempts)

    assert set(caught.value.message_dict) == {"max_attempts"}
    assert Agenda.objects.count() == 0
