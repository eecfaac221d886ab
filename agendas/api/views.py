"""Agendas, their progress and executions, templates, progress summary (docs/design.md §5–§9,
§10)."""

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agendas.api.examples import BULK_EXAMPLES, SUBMIT_EXAMPLES, TEMPLATE_RUN_EXAMPLES
from agendas.api.filters import (
    AgendaFilter,
    AgendaProgressFilter,
    AgendaTemplateFilter,
    OperationProgressFilter,
)
from agendas.api.serializers import (
    AgendaBulkItemSerializer,
    AgendaBulkResponseSerializer,
    AgendaBulkSerializer,
    AgendaDetailSerializer,
    AgendaPauseSerializer,
    AgendaProgressSerializer,
    AgendaRerunSerializer,
    AgendaSerializer,
    AgendaSubmitSerializer,
    AgendaTemplateSerializer,
    ExecutionSerializer,
    OperationProgressSerializer,
    ProgressSummaryQuerySerializer,
    ProgressSummarySerializer,
    TemplatePreviewResponseSerializer,
    TemplatePreviewSerializer,
    TemplateRunSerializer,
    bulk_agenda_data,
)
from agendas.api.template_version_serializers import (
    TemplateVersionDetailSerializer,
    TemplateVersionDiffQuerySerializer,
    TemplateVersionDiffSerializer,
    TemplateVersionSerializer,
)
from agendas.models import Agenda, AgendaTemplateVersion
from agendas.selectors import (
    agenda_list,
    agenda_progress_in_states,
    agenda_progress_list,
    agenda_template_list,
    execution_list,
    operation_progress_list,
    progress_summary,
)
from agendas.services import (
    agenda_abort,
    agenda_pause,
    agenda_rerun,
    agenda_resume,
    agenda_submit,
    agendas_submit_many,
)
from agendas.template_services import (
    agenda_template_create,
    agenda_template_delete,
    agenda_template_preview,
    agenda_template_run,
    agenda_template_update,
)
from agendas.template_versions import (
    MAX_VERSION_NUMBER,
    template_version_get,
    template_version_list,
    versions_diff,
)
from core.api import (
    CONFLICT_RESPONSE,
    CustomerScopedViewSet,
    ErrorSerializer,
    Pagination,
    PopAPIView,
    ServiceWritesMixin,
    request_context,
    validate_each,
)
from core.compiled_validation import compiled_validator

IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="A repeat with the same key returns the first agenda (200) instead of a copy.",
)


def idempotency_key(request: Request) -> str | None:
    """The Idempotency-Key header, checked like a field (400 naming the header)."""
    value = request.headers.get(IDEMPOTENCY_HEADER)
    if value is None:
        return None
    field = serializers.CharField(max_length=255)
    try:
        return field.run_validation(value)
    except serializers.ValidationError as error:
        raise serializers.ValidationError({IDEMPOTENCY_HEADER: error.detail}) from error


def agenda_detail(request: Request, agenda: Agenda) -> dict:
    """The agenda as the detail endpoint shows it, read back through the scoped selector."""
    fresh = agenda_list(principal=request.user).get(pk=agenda.pk)
    return AgendaDetailSerializer(fresh, context={"request": request}).data


def bulk_results(results: list[Agenda | dict]) -> list[dict]:
    """Bulk results in order: the agenda, slim and as written (`AgendaBulkAgendaSerializer`'s
    fields, `bulk_agenda_data`), or the item's errors."""
    return [
        bulk_agenda_data(result) if isinstance(result, Agenda) else {"errors": result}
        for result in results
    ]


# Query parameters of the agenda list that a count of progress rows honours (the filters
# validated them before the page is counted).
PROGRESS_COUNTABLE = frozenset({"state", "customer", "limit", "offset", "ordering", "format"})


@extend_schema(tags=["agendas"])
class AgendaViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet):
    """Agendas: submit (one or in bulk), read with progress, rerun, abort, pause, resume."""

    selector = staticmethod(agenda_list)
    serializer_class = AgendaSerializer
    filterset_class = AgendaFilter
    # Only orderings an index serves, for staff and for a customer (docs/design.md §10.4).
    ordering_fields = ["created_at", "priority"]
    ordering = ["-created_at"]

    def count_queryset(self, queryset: QuerySet[Agenda]) -> QuerySet:
        """What an offset page counts: with no filter but `state` (and `customer`), the
        progress rows in those states (core/pagination.py); else the page's own rows."""
        params = self.request.query_params
        if "state" not in params or set(params) - PROGRESS_COUNTABLE:
            return queryset
        return agenda_progress_in_states(
            principal=self.request.user,
            states=params.getlist("state"),
            customer_id=params.get("customer") or None,
        )

    def get_serializer_class(self) -> type[AgendaSerializer]:
        # One agenda also says why it waits; a list leaves that out (a read per row).
        return AgendaDetailSerializer if self.action == "retrieve" else AgendaSerializer

    @extend_schema(
        request=AgendaSubmitSerializer,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={201: AgendaDetailSerializer, 200: AgendaDetailSerializer},
        summary="Submit an agenda (201); a repeated Idempotency-Key returns the first (200).",
        examples=SUBMIT_EXAMPLES,
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = AgendaSubmitSerializer(data=request.data, context={"request": request})
        payload.is_valid(raise_exception=True)
        agenda, created = agenda_submit(
            principal=request.user,
            cid=request.cid,
            idempotency_key=idempotency_key(request),
            **payload.validated_data,
        )
        status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(agenda_detail(request, agenda), status=status_code)

    @extend_schema(
        request=AgendaBulkSerializer,
        responses={200: AgendaBulkResponseSerializer},
        summary="Submit up to 1000 agendas; each succeeds or fails on its own.",
        examples=BULK_EXAMPLES,
    )
    @action(detail=False, methods=["post"], filter_backends=[])
    def bulk(self, request: Request) -> Response:
        items = compiled_validator(AgendaBulkSerializer).run_validation(request.data)["agendas"]
        with request_context(request) as context:
            checked = validate_each(
                compiled_validator(AgendaBulkItemSerializer).bound(
                    AgendaBulkItemSerializer(context=context)
                ),
                items,
            )
        valid = [data for data, errors in checked if errors is None]
        submitted = iter(agendas_submit_many(principal=request.user, items=valid, cid=request.cid))
        results = [next(submitted) if errors is None else errors for _, errors in checked]
        return Response({"results": bulk_results(results)})

    @extend_schema(
        request=AgendaRerunSerializer,
        responses={200: AgendaDetailSerializer, 409: CONFLICT_RESPONSE},
        summary="Run a finished, paused or held agenda again.",
    )
    @action(detail=True, methods=["post"])
    def rerun(self, request: Request, pk: str) -> Response:
        payload = AgendaRerunSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        agenda = self.get_object()
        agenda_rerun(principal=request.user, agenda=agenda, **payload.validated_data)
        return Response(agenda_detail(request, agenda))

    @extend_schema(
        request=None,
        responses={200: AgendaDetailSerializer, 409: CONFLICT_RESPONSE},
        summary="Abort; an executing agenda is stopped by its worker at its next report.",
    )
    @action(detail=True, methods=["post"])
    def abort(self, request: Request, pk: str) -> Response:
        agenda = self.get_object()
        agenda_abort(principal=request.user, agenda=agenda)
        return Response(agenda_detail(request, agenda))

    @extend_schema(
        request=AgendaPauseSerializer,
        responses={200: AgendaDetailSerializer, 409: CONFLICT_RESPONSE},
        summary="Pause; an executing agenda pauses after its running operations (mode now: at "
        "once, keeping their progress).",
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str) -> Response:
        payload = AgendaPauseSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        agenda = self.get_object()
        agenda_pause(principal=request.user, agenda=agenda, **payload.validated_data)
        return Response(agenda_detail(request, agenda))

    @extend_schema(
        request=None,
        responses={200: AgendaDetailSerializer, 409: CONFLICT_RESPONSE},
        summary="Resume a paused agenda.",
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        agenda = self.get_object()
        agenda_resume(principal=request.user, agenda=agenda)
        return Response(agenda_detail(request, agenda))

    @extend_schema(
        responses={200: ExecutionSerializer(many=True)},
        summary="The agenda's attempts, oldest first.",
    )
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=Pagination)
    def executions(self, request: Request, pk: str) -> Response:
        attempts = execution_list(principal=request.user).filter(agenda=self.get_object())
        page = self.paginate_queryset(attempts.order_by("number"))
        return self.get_paginated_response(ExecutionSerializer(page, many=True).data)


@extend_schema(tags=["progress"])
class AgendaProgressViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet
):
    """The mutable state of agendas, with their operations."""

    selector = staticmethod(agenda_progress_list)
    serializer_class = AgendaProgressSerializer
    filterset_class = AgendaProgressFilter
    ordering_fields = ["created_at"]  # the one an index serves over a long history
    ordering = ["-created_at"]


@extend_schema(tags=["progress"])
class OperationProgressViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet
):
    """The progress of single operations."""

    selector = staticmethod(operation_progress_list)
    serializer_class = OperationProgressSerializer
    filterset_class = OperationProgressFilter
    ordering_fields = ["created_at"]  # the one an index serves over a long history
    ordering = ["-created_at", "position"]


@extend_schema(
    tags=["progress"],
    parameters=[ProgressSummaryQuerySerializer],
    responses={
        200: ProgressSummarySerializer,
        404: OpenApiResponse(ErrorSerializer, "No visible agenda has this link id."),
    },
    summary="The combined state of every agenda sharing a link_id (docs/design.md §9).",
)
class ProgressSummaryView(PopAPIView):
    def get(self, request: Request) -> Response:
        query = ProgressSummaryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        link_id = query.validated_data["link_id"]
        summary = progress_summary(
            principal=request.user,
            link_id=link_id,
            limit=query.validated_data["limit"],
            offset=query.validated_data["offset"],
        )
        if not summary["total"]:
            # Unknown, or only another customer's: a 404 either way, never "complete at 0 %".
            raise Http404(f"No visible agendas with link id {link_id!r}.")
        return Response(ProgressSummarySerializer(summary).data)


def templates_with_sharing(*, principal: Any) -> QuerySet:
    """agenda_template_list, with the sharing list loaded for the owners' view of it and the
    newest version's number (one index probe per row, inside the list's query)."""
    newest = (
        AgendaTemplateVersion.objects.filter(template=OuterRef("pk"))
        .order_by("-number")
        .values("number")[:1]
    )
    return (
        agenda_template_list(principal=principal)
        .prefetch_related("allowed_customers")
        .annotate(latest_version=Subquery(newest))
    )


@extend_schema(tags=["templates"])
class AgendaTemplateViewSet(
    ServiceWritesMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet
):
    """Agenda templates: own, global and shared ones are readable; the owner's admin writes."""

    selector = staticmethod(templates_with_sharing)
    serializer_class = AgendaTemplateSerializer
    filterset_class = AgendaTemplateFilter
    ordering_fields = ["name", "created_at"]
    ordering = ["name"]
    create_service = staticmethod(agenda_template_create)
    update_service = staticmethod(agenda_template_update)
    delete_service = staticmethod(agenda_template_delete)
    service_object = "template"

    @extend_schema(
        request=TemplateRunSerializer,
        responses={201: AgendaDetailSerializer},
        summary="Expand the template with a payload and submit the agenda.",
        examples=TEMPLATE_RUN_EXAMPLES,
    )
    @action(detail=True, methods=["post"])
    def run(self, request: Request, pk: str) -> Response:
        payload = TemplateRunSerializer(data=request.data, context={"request": request})
        payload.is_valid(raise_exception=True)
        agenda, _ = agenda_template_run(
            principal=request.user,
            template=self.get_object(),
            cid=request.cid,
            **payload.validated_data,
        )
        return Response(agenda_detail(request, agenda), status=status.HTTP_201_CREATED)

    @extend_schema(
        request=TemplatePreviewSerializer,
        responses={200: TemplatePreviewResponseSerializer},
        summary="The agenda a run would submit, without submitting it.",
    )
    @action(detail=True, methods=["post"])
    def preview(self, request: Request, pk: str) -> Response:
        payload = TemplatePreviewSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        preview = agenda_template_preview(
            principal=request.user, template=self.get_object(), **payload.validated_data
        )
        return Response(preview._asdict())

    # Versions: whoever reads the template reads them (docs/design.md §5.3).

    @extend_schema(
        responses={200: TemplateVersionSerializer(many=True)},
        summary="The template's versions, newest first.",
    )
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=Pagination)
    def versions(self, request: Request, pk: str) -> Response:
        template = self.get_object()
        rows = template_version_list(template=template).defer(
            "agenda", "static_parameters", "payload_schema"
        )
        page = self.paginate_queryset(rows)
        context = {"request": request, "template": template}
        return self.get_paginated_response(
            TemplateVersionSerializer(page, many=True, context=context).data
        )

    @extend_schema(
        responses={200: TemplateVersionDetailSerializer},
        summary="One version of the template, with what a run of it expands.",
    )
    @action(
        detail=True,
        methods=["get"],
        url_path=r"versions/(?P<number>[0-9]{1,10})",
        url_name="version-detail",
        filter_backends=[],
    )
    def version_detail(self, request: Request, pk: str, number: str) -> Response:
        template = self.get_object()
        try:
            if int(number) > MAX_VERSION_NUMBER:
                raise DjangoValidationError("out of range")  # never a number: no query for it
            version = template_version_get(template=template, number=int(number))
        except DjangoValidationError as error:
            raise Http404(f"Template {template.pk} has no version {number}.") from error
        context = {"request": request, "template": template}
        return Response(TemplateVersionDetailSerializer(version, context=context).data)

    @extend_schema(
        parameters=[TemplateVersionDiffQuerySerializer],
        responses={200: TemplateVersionDiffSerializer},
        summary="What changed between two versions of the template, as a unified diff.",
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="versions/diff",
        url_name="versions-diff",
        filter_backends=[],
    )
    def diff_versions(self, request: Request, pk: str) -> Response:
        template = self.get_object()
        query = TemplateVersionDiffQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        old, new = (
            template_version_get(template=template, number=query.validated_data[side], field=side)
            for side in ("from", "to")
        )
        diff = versions_diff(old, new)
        return Response(
            {"from": diff.old, "to": diff.new, "changed": diff.changed, "diff": diff.unified}
        )
