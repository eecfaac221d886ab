"""The batch report's answer is written by `batch_report_response_data`, not by the documented
serializer: the two must give the same JSON, byte for byte, for every kind of result."""

from unittest import mock

import pytest
from django.utils import timezone
from rest_framework.exceptions import ErrorDetail
from rest_framework.renderers import JSONRenderer

from scheduling.api import puller_views
from scheduling.api.puller_serializers import (
    BatchReportResponseSerializer,
    batch_report_response_data,
)

pytestmark = pytest.mark.django_db

render = JSONRenderer().render


def _documented(results: list[dict]) -> bytes:
    return render(BatchReportResponseSerializer({"results": results}).data)


def test_a_mixed_batchs_answer_equals_the_serializers_byte_for_byte(
    submitter, submit_agenda, insight, fill, pull, report, api_client_for
):
    for _ in range(5):
        submit_agenda(submitter)
    fill(insight)
    ok, progressed, finished, foreign, bad = pull(insight, count=5)
    report(finished, state="succeeded")
    built = mock.Mock(wraps=batch_report_response_data)

    with mock.patch.object(puller_views, "batch_report_response_data", built):
        response = api_client_for(submitter).post(
            "/api/v1/executions/report/",
            {
                "reports": [
                    {
                        "execution": str(ok.execution.pk),
                        "lease_token": str(ok.execution.lease_token),
                        "state": "succeeded",
                    },
                    {
                        "execution": str(progressed.execution.pk),
                        "lease_token": str(progressed.execution.lease_token),
                        "percent_complete": 40,
                        "message": "halfway",
                    },
                    {
                        "execution": str(finished.execution.pk),
                        "lease_token": str(finished.execution.lease_token),
                        "state": "failed",
                    },
                    {
                        "execution": str(foreign.execution.pk),
                        "lease_token": "not-the-token",
                    },
                    {
                        "execution": str(bad.execution.pk),
                        "lease_token": str(bad.execution.lease_token),
                        "operations": [{"name": "ghost"}],
                    },
                    {"execution": "not-a-uuid", "percent_complete": "lots"},
                    {"lease_token": "no execution at all"},
                ]
            },
            format="json",
        )

    assert response.status_code == 200
    (results,), _ = built.call_args
    assert [result["status"] for result in results] == [200, 200, 409, 403, 400, 400, 400]
    assert response.content == _documented(results)
    assert b'"lease_expires_at":null' in response.content  # a refused item's, as documented


def test_hand_made_results_with_every_optional_key_equal_the_serializers():
    now = timezone.now()
    results = [
        {"execution": None, "ok": False, "status": 400, "detail": "invalid report"},
        {
            "execution": "e-1",
            "ok": True,
            "status": 200,
            "abort": True,
            "pause": False,
            "pause_now": False,
            "lease_expires_at": now,
            "state": "executing",
        },
        {
            "execution": "e-2",
            "ok": False,
            "status": 400,
            "detail": "invalid report",
            "errors": {
                "operations": [ErrorDetail("This field is required.", code="required")],
                "state": ["bad", None],
                "gone": None,
            },
        },
        {"execution": "e-3", "ok": False, "status": 409, "detail": "stale", "current_state": "x"},
        {"ok": 0, "status": 404, "lease_expires_at": None},
    ]

    assert render(batch_report_response_data(results)) == _documented(results)
