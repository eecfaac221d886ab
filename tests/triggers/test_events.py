"""Reading an event, no database: filters, payload mappings, event ids, excerpts, signatures."""

import hashlib
import hmac

import pytest

from popclient.triggers import encode_event, sign, signed_headers
from tests.triggers.sample_events import s3_event
from triggers.events import (
    EventRefused,
    event_id,
    excerpt,
    filter_miss,
    filter_problems,
    mapping_problems,
    nonfinite_problem,
    payload_mapped,
)
from triggers.signing import BadSignature, signature_check

EVENT = s3_event(key="incoming/a b.mov", sequencer="0A1")


def test_a_mapping_takes_values_by_bare_pointer_or_by_event_reference():
    mapping = {
        "path": "@</Records/0/s3/object/key>",
        "url": "s3://@<event::/Records/0/s3/bucket/name>/@</Records/0/s3/object/key>",
        "record": "@</Records/0>",
        "missing": "@</Records/0/s3/object/size?0>",
        "whole": "@<event>",
    }

    payload = payload_mapped(mapping, EVENT)

    assert payload["path"] == "incoming/a b.mov"
    assert payload["url"] == "s3://ingest/incoming/a b.mov"
    assert payload["record"] == EVENT["Records"][0]
    assert payload["missing"] == "0"
    assert payload["whole"] == EVENT


def test_a_pointer_the_event_lacks_is_refused_naming_the_pointer():
    with pytest.raises(EventRefused) as refused:
        payload_mapped({"a": "@</Records/1/s3>", "b": "x-@</Records/0/s3>"}, EVENT)

    assert refused.value.errors == {
        "/Records/1/s3": ["Not found in the event."],
        "/Records/0/s3": ["An object or array cannot be put inside longer text."],
    }


def test_a_mapping_may_name_only_the_event():
    assert mapping_problems({"a": "@</x>", "b": "@<event::/y>"}) == {}
    assert list(mapping_problems({"a": "@<pop.payload::/x>"})) == ["payload_mapping"]
    assert list(mapping_problems({"a": "x" * 20_000})) == ["payload_mapping"]


def test_filters_match_by_equality_or_prefix_and_say_why_they_miss():
    created = [{"pointer": "/Records/0/eventName", "prefix": "ObjectCreated:"}]
    bucket = [{"pointer": "/Records/0/s3/bucket/name", "equals": "other"}]

    assert filter_miss(created, EVENT) is None
    assert filter_miss(bucket, EVENT) == '/Records/0/s3/bucket/name is "ingest", not "other".'
    assert filter_miss([{"pointer": "/nope", "equals": 1}], EVENT) == "/nope is not in the event."
    assert filter_miss([{"pointer": "/n", "equals": 1}], {"n": True}) is not None
    assert filter_miss([{"pointer": "/n", "equals": 1}], {"n": 1.0}) is None


def test_a_malformed_filter_is_named_by_its_index():
    assert filter_problems({"pointer": "/a"}) == {
        "filter": ["Expected a list of {pointer, equals | prefix} objects."]
    }
    assert list(filter_problems([{"pointer": "/a", "prefix": 3}])) == ["filter.0.prefix"]
    assert list(filter_problems([{"pointer": "/a"}])) == ["filter.0"]
    assert list(filter_problems([{"pointer": "/a", "equals": {"x": 1}}])) == ["filter.0.equals"]


def test_an_event_id_is_text_at_its_pointer_or_nothing():
    assert event_id("/Records/0/s3/object/sequencer", EVENT) == "0A1"
    assert event_id("/n", {"n": 12}) == "12"
    assert event_id("/n", {"n": {"x": 1}}) == ""
    assert event_id("/missing", EVENT) == ""
    assert event_id("", EVENT) == ""
    assert event_id("/n", {"n": "x" * 255}) == "x" * 255


def test_event_ids_longer_than_255_characters_are_kept_as_their_sha256_and_never_collide():
    common = "x" * 255
    first, second = event_id("/n", {"n": common + "a"}), event_id("/n", {"n": common + "b"})

    assert first == "sha256:" + hashlib.sha256((common + "a").encode()).hexdigest()
    assert second == "sha256:" + hashlib.sha256((common + "b").encode()).hexdigest()
    assert first != second


def test_a_mapping_with_more_than_200_references_is_refused_naming_the_mapping():
    assert mapping_problems({f"k{n}": "@</b>" for n in range(200)}) == {}
    assert mapping_problems({f"k{n}": "@</b>" for n in range(201)}) == {
        "payload_mapping": ["At most 200 references (got 201)."]
    }


def test_a_mapped_payload_larger_than_the_limit_is_refused_before_it_is_built():
    mapping = {f"k{n}": "@</b>" for n in range(20)}

    with pytest.raises(EventRefused) as refused:
        payload_mapped(mapping, {"b": "x" * 1000}, limit=10_000)

    assert list(refused.value.errors) == ["payload_mapping"]
    assert "more than 10000 bytes" in refused.value.errors["payload_mapping"][0]
    assert payload_mapped(mapping, {"b": "x" * 100}, limit=10_000) == {
        f"k{n}": "x" * 100 for n in range(20)
    }


@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_an_event_holding_a_non_finite_number_has_a_problem(number):
    assert nonfinite_problem({"a": [1, {"b": number}]}) is not None
    assert nonfinite_problem({"a": [1, {"b": 1e308}]}) is None


def test_an_excerpt_keeps_small_events_whole_and_cuts_large_ones():
    assert excerpt(EVENT, 4096).event == EVENT
    cut = excerpt({"a": "é" * 3000}, 100)
    assert cut.truncated and len(cut.event["excerpt"].encode()) <= 100


def test_the_client_signature_is_the_one_the_server_checks():
    body = encode_event(EVENT)
    headers = signed_headers("s3cret", body, now=1_800_000_000, idempotency_key="k")
    expected = hmac.new(b"s3cret", b"1800000000." + body, hashlib.sha256).hexdigest()

    assert headers["X-POP-Signature"] == sign("s3cret", body, "1800000000") == f"sha256={expected}"
    assert (headers["X-POP-Timestamp"], headers["Idempotency-Key"]) == ("1800000000", "k")
    signature_check(
        secret="s3cret",
        timestamp="1800000000",
        given=headers["X-POP-Signature"],
        body=body,
        now=1_800_000_299,
    )
    for timestamp, given, now in [
        ("1800000000", headers["X-POP-Signature"], 1_800_000_301),
        ("1800000000", "sha256=" + "0" * 64, 1_800_000_000),
        ("1800000000", "sha256=ü", 1_800_000_000),
        ("-5", headers["X-POP-Signature"], 1_800_000_000),
        ("1" * 40, headers["X-POP-Signature"], 1_800_000_000),
        (None, headers["X-POP-Signature"], 1_800_000_000),
    ]:
        with pytest.raises(BadSignature):
            signature_check(secret="s3cret", timestamp=timestamp, given=given, body=body, now=now)
