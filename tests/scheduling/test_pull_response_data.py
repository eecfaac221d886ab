"""The pull's answer is written by `pull_response_data`, not by the documented serializer:
the two must give the same JSON, byte for byte, for fresh pulls and for retries."""

import pytest
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from scheduling.api.puller_serializers import PullResponseSerializer, pull_response_data
from tests.scheduling.test_generated_operations_retry import generate_then_fail

pytestmark = pytest.mark.django_db

failed_on_chunk_2 = pytest.fixture(generate_then_fail, name="failed_on_chunk_2")


def _both(pulled) -> tuple[bytes, bytes]:
    render = JSONRenderer().render
    return render(pull_response_data(pulled)), render(
        PullResponseSerializer({"agendas": pulled}).data
    )


def test_fast_pull_answer_equals_the_serializer_for_fresh_and_retried_agendas(
    failed_on_chunk_2, submitter, submit_agenda, insight, fill, pull
):
    retried = failed_on_chunk_2()  # failed once, back to ready with generated operations
    fresh = submit_agenda(submitter, link_id="L-1", external_id="x-7", params={"a": [1, 2]})
    fill(insight)

    pulled = pull(insight, count=5)

    assert {item.agenda.pk for item in pulled} == {retried.pk, fresh.pk}
    fast, documented = _both(pulled)
    assert fast == documented
    assert b'"chunk-2"' in fast and b'"is_generated":true' in fast  # the retry's progress is in


def test_fast_pull_answer_in_another_current_time_zone_equals_the_serializer(
    submitter, submit_agenda, insight, fill, pull
):
    submit_agenda(submitter)
    fill(insight)
    pulled = pull(insight, count=1)

    with timezone.override("Asia/Kolkata"):
        fast, documented = _both(pulled)
    assert fast == documented
    assert fast.count(b"+05:30") == 2  # its creation and its lease, in that zone


def test_fast_pull_answer_of_an_empty_pull_equals_the_serializer(insight, pull):
    pulled = pull(insight, count=5)

    assert pulled == []
    assert _both(pulled) == (b'{"agendas":[]}', b'{"agendas":[]}')
