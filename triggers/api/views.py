"""triggers/: CRUD for a customer's admins (read for its members), rotate-secret, firings; and
the token-less fire endpoint, whose credential is the HMAC signature (docs/design.md §5.4)."""

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, status
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import (
    CustomerScopedViewSet,
    ErrorSerializer,
    Pagination,
    PopAPIView,
    ServiceWritesMixin,
    unstorable_text_problem,
)
from core.parsers import JSONTooDeep, json_loads_limited
from core.principals import SYSTEM
from core.throttling import WindowCountThrottle
from triggers.api.examples import FIRE_EXAMPLES, TRIGGER_EXAMPLES
from triggers.api.serializers import (
    FireAnswerSerializer,
    TriggerFiringSerializer,
    TriggerSerializer,
    TriggerWithSecretSerializer,
)
from triggers.firing import DUPLICATE, REPLAYED, trigger_fire, trigger_fire_refused
from triggers.models import TriggerFiring
from triggers.selectors import trigger_firings_of, trigger_list, trigger_to_fire
from triggers.services import (
    trigger_create,
    trigger_delete,
    trigger_rotate_secret,
    trigger_update,
)
from triggers.signing import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    BadSignature,
    signature_check,
    signature_digest,
)

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY = 255
Status = TriggerFiring.Status


class FiringPages(Pagination):
    """Offset pages only: a trigger keeps at most POP_TRIGGER_FIRINGS_KEPT firings."""

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        if self.cursor_query_param in request.query_params:
            raise exceptions.ValidationError({"cursor": ["Firings page by limit and offset."]})
        return super().paginate_queryset(queryset, request, view)


@extend_schema(tags=["triggers"])
class TriggerViewSet(
    ServiceWritesMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet
):
    """Inbound triggers: the customer's admin writes; its members read. The secret is shown
    once, in the create and rotate-secret answers."""

    selector = staticmethod(trigger_list)
    serializer_class = TriggerSerializer
    ordering_fields = ["name", "created_at"]
    ordering = ["name"]
    create_service = staticmethod(trigger_create)
    update_service = staticmethod(trigger_update)
    delete_service = staticmethod(trigger_delete)
    service_object = "trigger"

    def get_serializer_class(self) -> type[TriggerSerializer]:
        if self.action == "create":
            return TriggerWithSecretSerializer
        return TriggerSerializer

    @extend_schema(
        request=TriggerSerializer,
        responses={201: TriggerWithSecretSerializer},
        summary="Create a trigger; the answer holds its secret, shown this once.",
        examples=TRIGGER_EXAMPLES,
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().create(request, *args, **kwargs)

    @extend_schema(
        request=None,
        responses={200: TriggerWithSecretSerializer},
        summary="Give the trigger a new secret (shown this once); the old one stops working.",
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, pk: str) -> Response:
        trigger = trigger_rotate_secret(principal=request.user, trigger=self.get_object())
        return Response(TriggerWithSecretSerializer(trigger, context={"request": request}).data)

    @extend_schema(
        responses={200: TriggerFiringSerializer(many=True)},
        summary="The trigger's firings, newest first: status, reason, agenda, event excerpt.",
    )
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=FiringPages)
    def firings(self, request: Request, pk: str) -> Response:
        firings = trigger_firings_of(principal=request.user, trigger=self.get_object())
        page = self.paginate_queryset(firings)
        return self.get_paginated_response(TriggerFiringSerializer(page, many=True).data)


class TriggerFireThrottle(WindowCountThrottle):
    """Signed firings per trigger (POP_THROTTLE_TRIGGER_FIRE). Checked by the view once the
    signature holds, so unsigned requests (bounded by the address throttle) neither spend a
    trigger's budget nor make a cache key for an id that names nothing."""

    scope = "trigger_fire"

    def get_cache_key(self, request: Request, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": str(view.trigger_id)}


class TriggerFireAddressThrottle(WindowCountThrottle):
    """Firings per client address, across triggers (POP_THROTTLE_TRIGGER_FIRE_ADDRESS)."""

    scope = "trigger_fire_address"

    def get_cache_key(self, request: Request, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


SIGNING_PARAMETERS = [
    OpenApiParameter(
        TIMESTAMP_HEADER,
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        required=True,
        description="Unix seconds; refused (401) more than 300 s from the server's clock.",
    ),
    OpenApiParameter(
        SIGNATURE_HEADER,
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        required=True,
        description="`sha256=<hex>`: HMAC-SHA256 keyed with the trigger's secret over the "
        "bytes `<timestamp>.` followed by the raw body.",
    ),
    OpenApiParameter(
        IDEMPOTENCY_HEADER,
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        description="At most 255 characters: a repeat on the same trigger answers the first "
        "firing (200 duplicate) and submits nothing.",
    ),
]


class TriggerFireView(PopAPIView):
    """`POST /api/v1/triggers/{trigger_id}/fire/`: the protocol of docs/design.md §5.4."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [TriggerFireAddressThrottle]  # and TriggerFireThrottle, in post()

    def get_authenticate_header(self, request: Request) -> str:
        # Makes a refused signature a 401 (DRF answers 403 when no scheme is named).
        return f'HMAC-SHA256 header="{SIGNATURE_HEADER}"'

    @extend_schema(
        tags=["triggers"],
        operation_id="triggers_fire",
        request={"application/json": OpenApiTypes.OBJECT},
        parameters=SIGNING_PARAMETERS,
        responses={
            201: FireAnswerSerializer,
            200: FireAnswerSerializer,
            401: OpenApiResponse(
                ErrorSerializer, "Missing, stale or wrong signature, or a replayed request."
            ),
        },
        summary="Fire a trigger with a signed event (no token: the HMAC signature is the key).",
        examples=FIRE_EXAMPLES,
    )
    def post(self, request: Request, trigger_id: str) -> Response:
        trigger = trigger_to_fire(trigger_id)
        if trigger is None:
            raise exceptions.NotFound()
        body = request.body  # bounded: PopViewMixin refused a longer Content-Length (413)
        try:
            signature_check(
                secret=trigger.secret,
                timestamp=request.headers.get(TIMESTAMP_HEADER),
                given=request.headers.get(SIGNATURE_HEADER),
                body=body,
            )
        except BadSignature as error:
            raise exceptions.AuthenticationFailed(str(error)) from error
        self.trigger_id = trigger.pk
        per_trigger = TriggerFireThrottle()
        if not per_trigger.allow_request(request, self):
            self.throttled(request, per_trigger.wait())
        # The signature authenticated the trigger, which acts as the scheduler does for cron
        # runs: the audit trail names "system" (with this request's address), not "anonymous".
        request.user = SYSTEM
        signed = {
            "trigger": trigger,
            "cid": getattr(request, "cid", ""),
            "signature_digest": signature_digest(request.headers[SIGNATURE_HEADER]),
        }
        key, key_problem = _idempotency_key(request)
        event, event_problem = _event(body)
        if key_problem or event_problem:
            outcome = trigger_fire_refused(
                body=body, errors=key_problem | event_problem, idempotency_key=key, **signed
            )
        else:
            outcome = trigger_fire(event=event, idempotency_key=key, **signed)
        firing = outcome.firing
        if outcome.status == REPLAYED:
            raise exceptions.AuthenticationFailed(
                "This signed request was replayed: it was accepted before with another "
                f"{IDEMPOTENCY_HEADER} (sign each request afresh)."
            )
        if outcome.status == Status.REFUSED:
            raise exceptions.ValidationError(outcome.errors)
        if outcome.status == Status.SKIPPED:
            answer = {"status": "skipped", "firing": firing.pk, "reason": firing.reason}
            return Response(answer)
        answer = {"status": outcome.status, "firing": firing.pk, "agenda": firing.agenda_id}
        code = status.HTTP_200_OK if outcome.status == DUPLICATE else status.HTTP_201_CREATED
        return Response(answer, status=code)


def _event(body: bytes) -> tuple[dict, dict[str, list[str]]]:
    """The body as a JSON object, or why not (nesting bounded by POP_MAX_JSON_DEPTH)."""
    try:
        event = json_loads_limited(body.decode("utf-8"))
    except (UnicodeDecodeError, JSONTooDeep, ValueError) as error:
        message = str(error) if isinstance(error, JSONTooDeep) else "The body is not JSON."
        return {}, {"event": [message]}
    if not isinstance(event, dict):
        return {}, {"event": ["Expected a JSON object."]}
    return event, {}


def _idempotency_key(request: Request) -> tuple[str, dict[str, list[str]]]:
    """The header's key, or "" and why it cannot be one."""
    value = request.headers.get(IDEMPOTENCY_HEADER) or ""
    if len(value) > MAX_IDEMPOTENCY_KEY:
        problem = f"At most {MAX_IDEMPOTENCY_KEY} characters."
    else:
        problem = unstorable_text_problem(value) or (
            "Printable characters only." if any(ord(c) < 32 for c in value) else None
        )
    if problem:
        return "", {IDEMPOTENCY_HEADER: [problem]}
    return value, {}
