"""`agendas/actions/`: abort, pause, resume or rerun every agenda a filter matches (or a list
of ids) — a dry run answers the counts, otherwise a job does it in batches and is read here
while it runs (docs/design.md §7.4)."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response

from agendas.api.action_serializers import (
    ACTION_EXAMPLES,
    AgendaActionJobSerializer,
    AgendaActionPreviewSerializer,
    AgendaActionRequestSerializer,
)
from agendas.bulk_actions import agenda_action_preview, agenda_action_selection, agenda_action_start
from agendas.selectors import agenda_action_job_list
from core.api import CustomerScopedViewSet


@extend_schema(tags=["agendas"])
class AgendaActionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet):
    """Actions on a set of agendas, and the jobs that carry them out (yours; staff: all)."""

    selector = staticmethod(agenda_action_job_list)
    serializer_class = AgendaActionJobSerializer
    filter_backends: list = []

    @extend_schema(
        request=AgendaActionRequestSerializer,
        responses={200: AgendaActionPreviewSerializer, 202: AgendaActionJobSerializer},
        summary="Act on every agenda a filter (or list of ids) matches: a dry run counts (200), "
        "otherwise a job runs in batches (202; read it at agendas/actions/{id}/).",
        examples=ACTION_EXAMPLES,
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = AgendaActionRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        asked = payload.validated_data
        selection = agenda_action_selection(filter=asked.get("filter"), ids=asked.get("ids"))
        arguments = {
            "principal": request.user,
            "action": asked["action"],
            "selection": selection,
            "mode": asked.get("mode", ""),
        }
        if asked["dry_run"]:
            preview = agenda_action_preview(**arguments)
            return Response(
                {
                    "dry_run": True,
                    "action": asked["action"],
                    "matched": preview.matched,
                    "would_change": preview.would_change,
                }
            )
        job = agenda_action_start(**arguments)
        return Response(AgendaActionJobSerializer(job).data, status=status.HTTP_202_ACCEPTED)
