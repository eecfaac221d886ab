"""One item serializer shared by every request and thread (core/api.py `shared_validator`)
validates as a new instance per request does, and builds nothing while it is shared."""

import copy
import threading
import uuid

from core.api import shared_validator, validate_each
from scheduling.api.puller_serializers import BatchReportItemSerializer

GOOD = {
    "execution": str(uuid.uuid4()),
    "lease_token": "t",
    "state": "succeeded",
    "operations": [
        {"name": "probe", "state": "succeeded", "result": {"ok": True}, "diagnostics": []}
    ],
}
ITEMS = [
    GOOD,
    {"execution": "not-a-uuid", "lease_token": "t"},
    {**GOOD, "operations": [{"name": "probe", "percent_complete": 101}]},
    {**GOOD, "operations": [{"state": "succeeded"}], "diagnostics": [{"code": "x"}]},
    {**GOOD, "state": "exploded"},
    GOOD,
]


def test_the_shared_instance_validates_as_a_new_instance_does_good_and_bad_items_alike():
    fresh = validate_each(BatchReportItemSerializer(), copy.deepcopy(ITEMS))

    shared = validate_each(shared_validator(BatchReportItemSerializer), copy.deepcopy(ITEMS))
    again = validate_each(shared_validator(BatchReportItemSerializer), copy.deepcopy(ITEMS))

    assert shared == fresh == again
    assert [errors is None for _, errors in shared] == [True, False, False, False, False, True]


def test_one_instance_per_class_its_fields_and_nested_fields_built_before_it_is_shared():
    validator = shared_validator(BatchReportItemSerializer)

    assert shared_validator(BatchReportItemSerializer) is validator
    assert "fields" in vars(validator)
    operations = validator.fields["operations"].child
    assert "fields" in vars(operations)
    assert "fields" in vars(operations.fields["diagnostics"].child)
    assert "fields" in vars(validator.fields["diagnostics"].child)


def test_threads_sharing_it_each_get_their_own_items_answers():
    validator = shared_validator(BatchReportItemSerializer)
    expected = validate_each(BatchReportItemSerializer(), copy.deepcopy(ITEMS))
    found: list[object] = []
    start = threading.Barrier(8)

    def validate() -> None:
        start.wait()
        for _ in range(50):
            found.append(validate_each(validator, copy.deepcopy(ITEMS)))

    threads = [threading.Thread(target=validate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(found) == 400
    assert all(result == expected for result in found)
