"""Shared API plumbing: error mapping, parsing limits, schema, fields, scoped viewsets."""

import functools
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC
from typing import Any, Protocol

import django_filters
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from django.db.models import Model, ProtectedError, QuerySet
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django_filters.fields import IsoDateTimeField
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import is_serializer
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import exceptions, serializers, status, views, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import refusal_status
from core.outbound_urls import callback_url_refusal
from core.pagination import Pagination as Pagination  # re-export; see that module
from core.parsers import LimitedJSONParser as LimitedJSONParser  # re-export
from core.parsers import PayloadTooLarge as PayloadTooLarge  # re-export
from core.parsers import body_limit
from core.prepared_statements import hot_path_statements
from core.principals import SYSTEM


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The object's state does not allow this."
    default_code = "conflict"


def printable_text(text: str) -> str:
    """`text` with NUL and lone surrogates written as `\\u0000` escapes: an error message that
    quotes the input (an unknown choice, a slug) must still encode as UTF-8."""
    return UNSTORABLE_TEXT.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Turn DRF's nested error structure into `{"operations.2.name": [messages]}` (messages
    printable: see printable_text)."""
    if isinstance(detail, dict):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            for field, messages in flatten_errors(value, path).items():
                flat.setdefault(field, []).extend(messages)
        return flat
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            messages = [printable_text(str(item)) for item in detail]
            return {prefix or "non_field_errors": messages} if detail else {}
        flat = {}
        for index, item in enumerate(detail):
            path = f"{prefix}.{index}" if prefix else str(index)
            for field, messages in flatten_errors(item, path).items():
                flat.setdefault(field, []).extend(messages)
        return flat
    return {prefix or "non_field_errors": [printable_text(str(detail))]}


class RunsValidation(Protocol):
    """A serializer, or what validates as one (`core.compiled_validation.CompiledValidator`)."""

    def run_validation(self, data: Any) -> Any: ...


def validate_each(
    serializer: RunsValidation, items: list[Any]
) -> list[tuple[Any, dict[str, list[str]] | None]]:
    """Validate every item with one serializer instance: (validated data, None) when the item
    is good, (None, its errors by field path) when not; in order, each item on its own.

    One instance for all items because DRF deep-copies a serializer's fields for every new
    instance: for a bulk of 100 that copying cost more than the validation (bench.profile).
    `is_valid()` runs the same `run_validation`, so the errors are the same; a null item never
    gets here (the list fields of the callers refuse it for the whole request).
    """
    results: list[tuple[Any, dict[str, list[str]] | None]] = []
    for item in items:
        try:
            results.append((serializer.run_validation(item), None))
        except serializers.ValidationError as error:
            results.append((None, flatten_errors(error.detail)))
    return results


@functools.cache
def shared_validator(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    """One instance of a context-free serializer for the whole process: for `validate_each`, or
    `.run_validation(request.data)` for a whole body (its errors flatten as `is_valid`'s do).

    DRF deep-copies a serializer's declared fields into every new instance, and each nested
    serializer's into its own on first use: for the batch report's items that was 4% of the
    web's CPU over HTTP (py-spy, 2026-11-27), paid again at every request. Validation only reads
    a serializer's fields (`run_validation` keeps nothing on the instance), so one instance
    serves every request and thread once its fields, and its nested serializers' fields, are
    built — here, before it is shared. Only for serializers that read no context (no request,
    no user): those get a new instance per request."""
    serializer = serializer_class()
    _build_fields(serializer)
    return serializer


def _build_fields(field: serializers.Field) -> None:
    """Build now every lazily built part of `field` that validation would otherwise build."""
    if isinstance(
        field, serializers.ListSerializer | serializers.ListField | serializers.DictField
    ):
        _build_fields(field.child)
    elif isinstance(field, serializers.Serializer):
        field.validators  # noqa: B018  (a lazily set attribute, built here)
        for child in field.fields.values():
            _build_fields(child)


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Map domain errors to HTTP (`core.errors.refusal_status`): 400 with field paths, 403,
    404, 409 with the state; 409 for a row still in use, 413."""
    refusal = refusal_status(exc)
    if refusal == 400:
        exc = exceptions.ValidationError(as_serializer_error(exc))
    elif refusal == 409:
        return Response(
            {"detail": str(exc), "current_state": exc.current_state},
            status=status.HTTP_409_CONFLICT,
        )
    elif refusal == 403:
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif refusal == 404:
        exc = exceptions.NotFound()
    elif isinstance(exc, ProtectedError):
        names = sorted({str(obj._meta.verbose_name) for obj in exc.protected_objects})
        exc = Conflict(f"Still in use by {', '.join(names)}; delete or change those first.")
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge()
    elif isinstance(exc, exceptions.ParseError):
        # Every 400 has one shape, `{field: [messages]}`; an unreadable body has no field.
        exc = exceptions.ValidationError({"non_field_errors": [str(exc.detail)]})
    if isinstance(exc, exceptions.ValidationError):
        exc.detail = flatten_errors(exc.detail)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict):
        detail = response.data.get("detail")
        if isinstance(detail, str):
            response.data["detail"] = printable_text(detail)
    return response


# --- OpenAPI -------------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What went wrong.")


class ConflictSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="Why the object's state refuses the request.")
    current_state = serializers.CharField(
        required=False, help_text="The state the object is in (state conflicts only)."
    )


FIELD_ERRORS_SCHEMA: dict = {
    "type": "object",
    "description": "Field path (`operations.2.depends_on`) to its messages.",
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
}
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH"})


class PopAutoSchema(AutoSchema):
    """Documents the errors every endpoint can answer besides its success response."""

    #: Extra response codes a view documents explicitly (e.g. 409 for state actions).
    def _get_response_bodies(self, direction: str = "response") -> dict:
        responses = super()._get_response_bodies(direction)
        for code, response in self._error_responses().items():
            if code not in responses:
                responses[code] = self._get_response_for_code(response, code, direction=direction)
        return responses

    def _error_responses(self) -> dict[str, OpenApiResponse]:
        errors: dict[str, OpenApiResponse] = {}
        has_query = self.method == "GET" and (
            self._is_list_view() or any(self._get_filter_parameters())
        )
        if self.method in WRITE_METHODS or has_query or self._declares_query_parameters():
            errors["400"] = OpenApiResponse(FIELD_ERRORS_SCHEMA, "Invalid input, by field path.")
        if self._requires_authentication():
            errors["401"] = OpenApiResponse(ErrorSerializer, "No or invalid credentials.")
            errors["403"] = OpenApiResponse(ErrorSerializer, "Visible, but your role is too low.")
        if "{" in self.path:
            errors["404"] = OpenApiResponse(ErrorSerializer, "Missing, or another customer's.")
        if self.method in WRITE_METHODS:
            errors["413"] = OpenApiResponse(ErrorSerializer, "Request body over 1 MiB.")
            errors["415"] = OpenApiResponse(ErrorSerializer, "Request body is not JSON.")
        errors["429"] = OpenApiResponse(ErrorSerializer, "Too many requests; retry later.")
        return errors

    def _declares_query_parameters(self) -> bool:
        return any(
            getattr(parameter, "location", None) == "query" or is_serializer(parameter)
            for parameter in self.get_override_parameters()
        )

    def _requires_authentication(self) -> bool:
        return bool(getattr(self.view, "permission_classes", None)) and any(
            getattr(permission, "__name__", "") != "AllowAny"
            for permission in self.view.permission_classes
        )


CONFLICT_RESPONSE = OpenApiResponse(ConflictSerializer, "The state does not allow this.")


# --- fields --------------------------------------------------------------------------------


UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")


def unstorable_text_problem(value: Any) -> str | None:
    """Why PostgreSQL cannot store `value` (a string, or JSON: keys and values at any depth):
    text and jsonb hold neither NUL nor lone surrogates. None when it can.

    Iterative, so a deep value never hits Python's recursion limit.
    """
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found = UNSTORABLE_TEXT.search(item)
            if found:
                return (
                    f"Null and surrogate characters are not allowed (U+{ord(found.group()):04X})."
                )
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return None


def reject_unstorable_text(value: Any) -> None:
    """Refuse text PostgreSQL cannot store (NUL, lone surrogates) as a 400 of the field."""
    problem = unstorable_text_problem(value)
    if problem:
        raise serializers.ValidationError(problem)


class UnknownFieldsRefused(serializers.Serializer):
    """A body (or a part of one) that refuses keys it does not declare, as one error:
    `non_field_errors: ["Unknown fields: a, b."]` — a typo in an option is not ignored."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {"non_field_errors": [f"Unknown fields: {', '.join(unknown)}."]}
                )
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.ANY)
class JSONValueField(serializers.JSONField):
    """Any JSON value storable in PostgreSQL jsonb (no NUL or lone surrogate characters)."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        reject_unstorable_text(value)
        return value


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JSONObjectField(JSONValueField):
    """A JSON object (dict) storable in PostgreSQL jsonb."""

    default_error_messages = {"not_an_object": "Expected a JSON object."}

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_an_object")
        return value


@extend_schema_field(
    {"anyOf": [{"type": "string", "format": "uri"}, {"type": "string", "maxLength": 0}]}
)
class OptionalURLField(serializers.URLField):
    """A callback URL, or "" for none (the models store blank, not null).

    Refused as delivery would refuse it (`core.outbound_urls.callback_url_refusal`): not
    http(s), user-info or a backslash, or a non-public address written in it.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("max_length", 1000)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        refusal = callback_url_refusal(value) if value else None
        if refusal is not None:
            raise serializers.ValidationError(refusal)
        return value


@extend_schema_field(OpenApiTypes.STR)
class ScopedRelatedField(serializers.Field):
    """A reference by id (or slug) to a row the requesting principal may see.

    The rows come from a principal-scoped selector, so another customer's id reads as
    "not found", exactly like the 404 of the endpoints.
    """

    default_error_messages = {
        "does_not_exist": "No {model} {value} is visible to you.",
        "invalid": "Expected an id{slug}.",
    }

    def __init__(
        self, *, selector: Callable[..., QuerySet], slug_field: str | None = None, **kwargs: Any
    ) -> None:
        self.selector = selector
        self.slug_field = slug_field
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Model:
        if not isinstance(data, str) or UNSTORABLE_TEXT.search(data) or len(data) > 200:
            self.fail("invalid", slug=" or slug" if self.slug_field else "")
        request = self.context.get("request")
        rows = self.selector(principal=getattr(request, "user", None))
        try:
            lookup = {"pk": uuid.UUID(data)}
        except ValueError:
            if self.slug_field is None:
                self.fail("invalid", slug="")
            lookup = {self.slug_field: data}
        found = rows.filter(**lookup).first()
        if found is None:
            self.fail("does_not_exist", model=rows.model._meta.verbose_name, value=data)
        return found

    def to_representation(self, value: Model) -> str:
        return str(value.pk)


# --- views ---------------------------------------------------------------------------------


class PopViewMixin:
    """What every POP API view shares: the schema class, JSON only, the body-size limit."""

    schema = PopAutoSchema()
    parser_classes = [LimitedJSONParser]
    #: A path run per agenda (pull, report): with DATABASE_PREPARED_STATEMENTS=hot its
    #: statements are prepared on the connection from their sixth run
    #: (core/prepared_statements.py). Never for lists or pages.
    prepares_statements = False

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if not self.prepares_statements:
            return super().dispatch(request, *args, **kwargs)
        with hot_path_statements():
            return super().dispatch(request, *args, **kwargs)

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        response._resource_closers.append(functools.partial(_let_go, self, request, response))
        return response

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > body_limit():
            raise PayloadTooLarge()


def _let_go(view: Any, request: Any, response: Any) -> None:
    """Once the answer is sent (the response closed), drop the references by which the
    request, the view and the response hold one another: DRF's request and its
    `parser_context`, the view's `request` and `response`, the response's
    `renderer_context`, and what the middleware hung on Django's request (the messages
    storage, `auser`, the CSP nonce), each of which refers back to it. Reference counting
    then frees them, with the parsed body and the answer, as the request ends. Left in cycles
    they waited for the cyclic collector: a web worker's threads keep requests alive across
    its young collections, so they were promoted and waited for full collections, which stop
    every thread of the worker (docs/decisions.md, "An API request lets go of itself")."""
    django_request = getattr(request, "_request", request)
    for name in ("_messages", "auser", "csp_nonce"):
        django_request.__dict__.pop(name, None)
    request.parser_context = None
    view.__dict__.pop("request", None)
    view.__dict__.pop("response", None)
    response.renderer_context = None


@contextmanager
def request_context(request: Request) -> Iterator[dict[str, Any]]:
    """A serializer context naming `request`, emptied when the block ends.

    A serializer and its fields refer to one another (each field names its parent), so the
    serializer is freed by the cyclic collector, not as the request ends; while its context
    names the request, the request waits with it — its body, its view, its user. For a
    serializer bound per request on a hot path (the bulk submit's items): validate inside the
    block, and only the serializer's own fields are left to the collector, whatever the size
    of the body (tests/api/test_cyclic_garbage.py)."""
    context: dict[str, Any] = {"request": request}
    try:
        yield context
    finally:
        context.clear()


class PopAPIView(PopViewMixin, views.APIView):
    """Base for API views that are not model viewsets (summaries, token exchange)."""


@csrf_exempt  # nothing to protect, and a CSRF refusal would be an HTML page
def api_not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """An /api/v1/ URL that names nothing: the same JSON 404 as a missing object.

    Without it an id the routes do not accept (`0..0`, an empty segment) would get Django's
    HTML page, which API clients cannot read.
    """
    return JsonResponse({"detail": "Not found."}, status=404)


class CustomerScopedViewSet(PopViewMixin, viewsets.GenericViewSet):
    """Base for customer-facing viewsets: rows come only from a principal-scoped selector.

    `parent_lookups` maps URL keyword arguments of nested routes to queryset fields
    (`{"customer_pk": "customer_id"}` for `customers/{customer_pk}/members/`).
    """

    selector: Callable[..., QuerySet]
    parent_lookups: dict[str, str] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: scope rows in its selector, not in get_queryset()")

    def get_queryset(self) -> QuerySet:
        if getattr(self, "swagger_fake_view", False):
            return self.selector(principal=SYSTEM).none()
        rows = self.selector(principal=self.request.user)
        try:
            return rows.filter(
                **{field: self.kwargs[kwarg] for kwarg, field in self.parent_lookups.items()}
            )
        except (DjangoValidationError, ValueError, TypeError) as error:
            raise Http404 from error


# --- filters -------------------------------------------------------------------------------


class UTCIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, handed to the database in UTC.

    PostgreSQL refuses offsets beyond ±15:59 that Python accepts (`+19:32`), and shifting a
    time near year 1 or 9999 can leave datetime's range: both are input errors, not 500s.
    """

    def to_python(self, value: Any) -> Any:
        try:
            parsed = super().to_python(value)
            return parsed.astimezone(UTC) if parsed is not None else None
        except OverflowError as error:
            raise DjangoValidationError("Date and time out of range.", code="invalid") from error


class UTCIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCIsoDateTimeField


class OwnedRowFilter(django_filters.FilterSet):
    """The filters every customer-owned row offers (docs/design.md §10)."""

    link_id = django_filters.CharFilter(help_text="Exact client-chosen grouping key.")
    cid = django_filters.CharFilter(help_text="Exact correlation id (X-POP-CID of the request).")
    created_after = UTCIsoDateTimeFilter(
        field_name="created_at", lookup_expr="gte", help_text="Created at or after (ISO 8601)."
    )
    created_before = UTCIsoDateTimeFilter(
        field_name="created_at", lookup_expr="lt", help_text="Created before (ISO 8601)."
    )


ID_PREFIX = re.compile(r"^[0-9a-fA-F-]{4,36}$")


def _id_prefix(queryset: QuerySet, name: str, value: str) -> QuerySet:
    """Rows whose id starts with `value` (hex, hyphens ignored), as a range of the primary
    key: an index range scan, never a text match over the table."""
    digits = value.replace("-", "").lower()
    if not value or len(digits) > 32:
        return queryset
    low = uuid.UUID(digits.ljust(32, "0"))
    high = uuid.UUID(digits.ljust(32, "f"))
    return queryset.filter(pk__gte=low, pk__lte=high)


def id_prefix_filter() -> django_filters.CharFilter:
    """`?id_prefix=e839d0e0`: the ids the pages and the CLI show, 4 or more hex digits."""
    return django_filters.CharFilter(
        method=_id_prefix,
        help_text="Ids starting with these hex digits (at least 4; hyphens ignored), as the "
        "pages show them.",
        validators=[RegexValidator(ID_PREFIX, "Give at least 4 hex digits of the id (0-9, a-f).")],
    )


def customer_filter() -> django_filters.UUIDFilter:
    return django_filters.UUIDFilter(field_name="customer_id", help_text="Customer id.")


class ServiceWritesMixin:
    """create/update/partial_update/destroy that validate shape, then call one service.

    `create_service(principal=, cid=, **validated_data)`, `update_service(principal=,
    <service_object>=row, **validated_data)` and `delete_service(principal=,
    <service_object>=row)`; the row comes from the scoped `get_object()` (foreign → 404).
    """

    create_service: Callable[..., Model]
    update_service: Callable[..., Model]
    delete_service: Callable[..., Any]
    service_object: str

    def create_arguments(self, validated_data: dict) -> dict:
        return validated_data

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        row = self.create_service(
            principal=request.user,
            cid=request.cid,
            **self.create_arguments(serializer.validated_data),
        )
        return Response(self.get_serializer(row).data, status=status.HTTP_201_CREATED)

    def update(
        self, request: Request, *args: Any, partial: bool = False, **kwargs: Any
    ) -> Response:
        row = self.get_object()
        serializer = self.get_serializer(row, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        row = self.update_service(
            principal=request.user, **{self.service_object: row}, **serializer.validated_data
        )
        return Response(self.get_serializer(row).data)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.update(request, *args, partial=True, **kwargs)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self.delete_service(principal=request.user, **{self.service_object: self.get_object()})
        return Response(status=status.HTTP_204_NO_CONTENT)
