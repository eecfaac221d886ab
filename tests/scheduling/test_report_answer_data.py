"""The report endpoint's answer is written by `report_answer_data`, not by the documented
serializer, and bodies are validated by one shared ReportSerializer (no fields copied per
request): both must give what the serializers give, byte for byte, and a body that is not an
object is still refused as a new serializer refuses it."""

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from agendas.models import Execution
from core.api import flatten_errors, shared_validator
from scheduling.api import puller_views
from scheduling.api.puller_serializers import (
    ReportAnswerSerializer,
    ReportSerializer,
    report_answer_data,
)
from scheduling.report import ReportAnswer

pytestmark = pytest.mark.django_db

render = JSONRenderer().render


def _post(api_client_for, submitter, pulled, body):
    return api_client_for(submitter).post(
        f"/api/v1/executions/{pulled.execution.pk}/report/",
        body,
        format="json",
        HTTP_X_POP_LEASE=str(pulled.execution.lease_token),
    )


@pytest.mark.parametrize(
    "answer",
    [
        ReportAnswer(abort=False, pause=False, lease_expires_at=timezone.now(), state="executing"),
        ReportAnswer(
            abort=True,
            pause=True,
            lease_expires_at=timezone.now() + timedelta(microseconds=7),
            state="paused",
            pause_now=True,
        ),
        ReportAnswer(abort=False, pause=False, lease_expires_at=None, state="succeeded"),
    ],
    ids=["running", "stop", "ended"],
)
def test_every_kind_of_answer_equals_the_serializers_byte_for_byte(answer):
    assert render(report_answer_data(answer)) == render(ReportAnswerSerializer(answer).data)


def test_an_answer_in_another_current_time_zone_equals_the_serializers():
    answer = ReportAnswer(
        abort=False, pause=False, lease_expires_at=timezone.now(), state="executing"
    )

    with timezone.override("Asia/Kolkata"):
        written = render(report_answer_data(answer))
        assert written == render(ReportAnswerSerializer(answer).data)
    assert b"+05:30" in written  # the lease's time in that zone, not in UTC


@pytest.mark.parametrize("output", [None, "%Y-%m-%d %H:%M"], ids=["datetime", "strftime"])
def test_an_answer_in_another_output_format_equals_the_serializers(settings, output):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DATETIME_FORMAT": output}
    answer = ReportAnswer(
        abort=False, pause=False, lease_expires_at=timezone.now(), state="executing"
    )

    assert render(report_answer_data(answer)) == render(ReportAnswerSerializer(answer).data)


def test_a_heartbeat_is_answered_as_the_serializers_answer_it_building_no_serializer(
    submitter, run_one, insight, api_client_for
):
    pulled = run_one(submitter, insight)
    shared_validator(ReportSerializer)  # built once per process, before any request
    built = mock.Mock(wraps=report_answer_data)
    fields_built = mock.Mock(wraps=serializers.Serializer.get_fields)

    with (
        mock.patch.object(puller_views, "report_answer_data", built),
        mock.patch.object(serializers.Serializer, "get_fields", fields_built),
    ):
        response = _post(api_client_for, submitter, pulled, {})

    assert response.status_code == 200
    assert fields_built.call_count == 0  # no serializer's fields copied for this request
    (answer,), _ = built.call_args
    assert response.content == render(ReportAnswerSerializer(answer).data)
    empty = ReportSerializer(data={})
    assert empty.is_valid() and empty.validated_data == {}  # what the view passes on
    execution = Execution.objects.get(pk=pulled.execution.pk)
    assert execution.last_report_at is not None and execution.outcome is None


@pytest.mark.parametrize("body", [[], "", 0, [{}]], ids=["list", "string", "number", "list-of"])
def test_a_body_that_is_not_an_object_is_still_refused_and_changes_nothing(
    submitter, run_one, insight, api_client_for, body
):
    pulled = run_one(submitter, insight)
    before = Execution.objects.get(pk=pulled.execution.pk)

    response = _post(api_client_for, submitter, pulled, body)

    assert response.status_code == 400, response.content
    refused = ReportSerializer(data=body)
    assert not refused.is_valid()
    assert response.json() == flatten_errors(refused.errors), response.json()
    after = Execution.objects.get(pk=pulled.execution.pk)
    assert (after.last_report_at, after.lease_expires_at) == (
        before.last_report_at,
        before.lease_expires_at,
    )
