"""A bulk submit's answer is written by `bulk_agenda_data`, not by the documented
`AgendaBulkAgendaSerializer`: the two must give the same JSON, byte for byte."""

from unittest import mock

import pytest
from rest_framework.renderers import JSONRenderer

from agendas.api import views
from agendas.api.serializers import AgendaBulkAgendaSerializer
from agendas.models import Agenda

pytestmark = pytest.mark.django_db

render = JSONRenderer().render


def _documented(results: list) -> bytes:
    return render(
        {
            "results": [
                AgendaBulkAgendaSerializer(result).data
                if isinstance(result, Agenda)
                else {"errors": result}
                for result in results
            ]
        }
    )


def test_a_mixed_bulk_answer_equals_the_serializers_byte_for_byte(
    submitter, submit_agenda, operations, insight, api_client_for
):
    earlier = submit_agenda(submitter, link_id="first", idempotency_key="kept")
    built = mock.Mock(wraps=views.bulk_results)

    with mock.patch.object(views, "bulk_results", built):
        response = api_client_for(submitter).post(
            "/api/v1/agendas/bulk/",
            {
                "agendas": [
                    {"operations": operations, "link_id": 'l-ü " \\', "external_id": "é-1"},
                    {"operations": [{"name": "x", "type": "log", "depends_on": ["nope"]}]},
                    {"operations": operations, "idempotency_key": "kept"},  # the earlier one
                    {"operations": operations, "idempotency_key": "new", "priority": 9},
                    {"operations": operations, "after": {"agendas": [str(earlier.pk)]}},  # waits
                    "not an object",
                ]
            },
            format="json",
        )

    assert response.status_code == 200, response.content
    (results,), _ = built.call_args
    kinds = [type(result).__name__ for result in results]
    assert kinds == ["Agenda", "dict", "Agenda", "Agenda", "Agenda", "dict"]
    assert results[2].pk == earlier.pk
    assert {result.progress.state for result in results if isinstance(result, Agenda)} == {
        "ready",
        "pending",
    }
    assert response.content == _documented(results)
