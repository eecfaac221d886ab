"""Domain errors that every app raises and the one rule mapping a refusal to an HTTP status
(core.api's exception handler and the per-item results of batch calls use it)."""

from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404


class InvalidTransition(Exception):
    """A move the state machine does not allow; the API answers 409 naming the current
    state."""

    def __init__(self, message: str, *, current_state: str) -> None:
        super().__init__(message)
        self.current_state = current_state


def refusal_status(error: Exception) -> int | None:
    """The HTTP status of a refused request, one rule for the exception handler and for the
    per-item results of batch calls: 400 invalid input, 403 not allowed, 404 not found or not
    visible, 409 the state does not allow it; None for anything that is not a refusal."""
    if isinstance(error, DjangoValidationError):
        return 400
    if isinstance(error, PermissionDenied):
        return 403
    if isinstance(error, Http404 | ObjectDoesNotExist):
        return 404
    if isinstance(error, InvalidTransition):
        return 409
    return None


def validation_messages(error: DjangoValidationError) -> dict[str, list[str]]:
    """`{field: [messages]}` of a Django ValidationError (`non_field_errors` when it names no
    field)."""
    if hasattr(error, "error_dict"):
        return {key: [str(m) for m in messages] for key, messages in error.message_dict.items()}
    return {"non_field_errors": [str(message) for message in error.messages]}
