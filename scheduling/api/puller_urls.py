"""Puller-facing routes (pull, report, generated operations): docs/design.md §6.3–§6.4."""

from django.urls import path

from scheduling.api.puller_views import (
    ExecutionOperationsView,
    ExecutionReportBatchView,
    ExecutionReportView,
    InsightPullView,
)

urlpatterns = [
    path("insights/<uuid:pk>/pull/", InsightPullView.as_view(), name="insight-pull"),
    path("executions/report/", ExecutionReportBatchView.as_view(), name="execution-report-batch"),
    path("executions/<uuid:pk>/report/", ExecutionReportView.as_view(), name="execution-report"),
    path(
        "executions/<uuid:pk>/operations/",
        ExecutionOperationsView.as_view(),
        name="execution-operations",
    ),
]
