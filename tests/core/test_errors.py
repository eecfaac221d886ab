"""One rule maps a refusal to its HTTP status, for the API and for batch items alike."""

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404

from core.errors import InvalidTransition, refusal_status, validation_messages


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ValidationError({"name": ["bad"]}), 400),
        (PermissionDenied("no"), 403),
        (Http404("gone"), 404),
        (get_user_model().DoesNotExist(), 404),
        (InvalidTransition("no", current_state="succeeded"), 409),
        (RuntimeError("boom"), None),
    ],
)
def test_each_refusal_has_one_status(error, status):
    assert refusal_status(error) == status


def test_validation_messages_name_the_field_or_none():
    assert validation_messages(ValidationError({"name": ["bad"]})) == {"name": ["bad"]}
    assert validation_messages(ValidationError("bad")) == {"non_field_errors": ["bad"]}
