"""Puller endpoints (docs/design.md §6.3–§6.4): pull, report, batch report, generated operations.

Pulls are for a `worker`/`admin` member of the pool owner (or staff). Reports and generated
operations are authorized by the execution's lease token (`X-POP-Lease`), not by who sends
them (docs/design.md §10.3).
"""

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import CONFLICT_RESPONSE, ErrorSerializer, PopAPIView, validate_each
from core.compiled_validation import compiled_validator
from resourcepools.models import Insight
from resourcepools.selectors import insight_visible_get
from scheduling.api.puller_examples import (
    BATCH_REPORT_EXAMPLES,
    PULL_EXAMPLES,
    REPORT_EXAMPLES,
)
from scheduling.api.puller_serializers import (
    AddOperationsResponseSerializer,
    AddOperationsSerializer,
    BatchReportItemSerializer,
    BatchReportResponseSerializer,
    BatchReportSerializer,
    PullRequestSerializer,
    PullResponseSerializer,
    ReportAnswerSerializer,
    ReportSerializer,
    batch_report_response_data,
    pull_response_data,
    report_answer_data,
)
from scheduling.generated_operations import execution_add_operations
from scheduling.pull import insight_pull
from scheduling.report import BatchItemResult, execution_report, execution_report_batch

LEASE_HEADER = "X-POP-Lease"
LEASE_PARAMETER = OpenApiParameter(
    LEASE_HEADER,
    location=OpenApiParameter.HEADER,
    required=True,
    description="The execution's lease token, from the pull.",
)
LEASE_REFUSED = OpenApiResponse(ErrorSerializer, "Missing or wrong lease token.")
STALE = CONFLICT_RESPONSE


class InsightPullView(PopAPIView):
    """Lease up to `count` queued agendas, with the progress a retry resumes from.

    With `wait_seconds` the call waits for work up to that long and answers an empty list
    when none came. Two pullers never receive the same agenda.
    """

    prepares_statements = True

    @extend_schema(
        operation_id="insights_pull",
        tags=["pullers"],
        request=PullRequestSerializer,
        responses={200: PullResponseSerializer},
        summary="Lease queued agendas of an insight (long-poll with wait_seconds).",
        examples=PULL_EXAMPLES,
    )
    def post(self, request: Request, pk: str) -> Response:
        insight = _visible_insight(request, pk)
        fields = compiled_validator(PullRequestSerializer).run_validation(request.data)
        pulled = insight_pull(principal=request.user, insight=insight, **fields)
        return Response(pull_response_data(pulled))


class ExecutionReportView(PopAPIView):
    """Sparse progress and operation upserts; `state` ends the execution.

    Every report renews the lease. The answer's `abort`/`pause` tell the worker to stop. A
    report for an execution that is no longer current is 409 and changes nothing.
    """

    prepares_statements = True

    @extend_schema(
        operation_id="executions_report",
        tags=["pullers"],
        parameters=[LEASE_PARAMETER],
        request=ReportSerializer,
        responses={200: ReportAnswerSerializer, 403: LEASE_REFUSED, 409: STALE},
        summary="Report progress or the outcome of an execution; renews its lease.",
        examples=REPORT_EXAMPLES,
    )
    def post(self, request: Request, pk: str) -> Response:
        fields = compiled_validator(ReportSerializer).run_validation(request.data)
        answer = execution_report(
            execution_id=pk, lease_token=request.headers.get(LEASE_HEADER, ""), **fields
        )
        return Response(report_answer_data(answer))


class ExecutionReportBatchView(PopAPIView):
    """Up to 100 reports (`execution` + `lease_token` + report fields) in one transaction.

    Each report is applied on its own: one report's 400/403/404/409 never fails the others.
    """

    prepares_statements = True

    @extend_schema(
        operation_id="executions_report_batch",
        tags=["pullers"],
        request=BatchReportSerializer,
        responses={200: BatchReportResponseSerializer},
        summary="Up to 100 reports in one transaction, with a result per report.",
        examples=BATCH_REPORT_EXAMPLES,
    )
    def post(self, request: Request) -> Response:
        raws = compiled_validator(BatchReportSerializer).run_validation(request.data)["reports"]
        results: dict[int, dict[str, Any]] = {}
        valid: list[tuple[int, dict[str, Any]]] = []
        for index, (data, errors) in enumerate(
            validate_each(compiled_validator(BatchReportItemSerializer), raws)
        ):
            if errors is None:
                valid.append((index, data))
            else:
                results[index] = _invalid_item(raws[index], errors)
        outcomes = execution_report_batch(reports=[data for _, data in valid])
        for (index, _), outcome in zip(valid, outcomes, strict=True):
            results[index] = _item_result(outcome)
        ordered = [results[index] for index in range(len(results))]
        return Response(batch_report_response_data(ordered))


class ExecutionOperationsView(PopAPIView):
    """Append operations generated while running; they can then be reported like the others."""

    @extend_schema(
        operation_id="executions_add_operations",
        tags=["pullers"],
        parameters=[LEASE_PARAMETER],
        request=AddOperationsSerializer,
        responses={201: AddOperationsResponseSerializer, 403: LEASE_REFUSED, 409: STALE},
        summary="Append generated operations to the running agenda (POP updateAgenda).",
    )
    def post(self, request: Request, pk: str) -> Response:
        payload = AddOperationsSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        operations = execution_add_operations(
            execution_id=pk,
            lease_token=request.headers.get(LEASE_HEADER, ""),
            operations=payload.validated_data["operations"],
        )
        return Response(
            AddOperationsResponseSerializer({"operations": operations}).data,
            status=status.HTTP_201_CREATED,
        )


def _visible_insight(request: Request, pk: str) -> Insight:
    insight = insight_visible_get(principal=request.user, insight_id=pk)
    if insight is None:
        raise Http404("No such insight.")
    return insight


def _invalid_item(raw: dict, errors: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "execution": str(raw.get("execution")) if raw.get("execution") else None,
        "ok": False,
        "status": 400,
        "detail": "invalid report",
        "errors": errors,
    }


def _item_result(outcome: BatchItemResult) -> dict[str, Any]:
    result: dict[str, Any] = {
        "execution": str(outcome.execution),
        "ok": outcome.status == 200,
        "status": outcome.status,
    }
    if outcome.answer is not None:
        result.update(
            abort=outcome.answer.abort,
            pause=outcome.answer.pause,
            pause_now=outcome.answer.pause_now,
            lease_expires_at=outcome.answer.lease_expires_at,
            state=outcome.answer.state,
        )
    else:
        result["detail"] = outcome.detail
        if outcome.errors:
            result["errors"] = outcome.errors
        if outcome.current_state:
            result["current_state"] = outcome.current_state
    return result
