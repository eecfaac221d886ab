"""A new instance built by `unsaved_instance` (core/unsaved_instances.py) is the instance
`Model(**fields)` builds: the same attributes and values, the same state, a relation given as
an instance checked and cached, a fresh value from every callable default; anything it does not
build plainly goes through `Model(**fields)` itself."""

import uuid

import pytest
from django.db.models import signals

from agendas.models import Agenda, AgendaProgress
from core.unsaved_instances import unsaved_instance

pytestmark = pytest.mark.django_db

# Defaults drawn at random (uuid4) differ between any two instances, however built.
RANDOM = {"id"}


def _comparable(instance) -> dict:
    return {
        name: value
        for name, value in vars(instance).items()
        if name != "_state" and name not in RANDOM
    }


def test_an_agenda_equals_the_one_its_model_builds_its_customer_cached(customer, insight):
    fields = {
        "customer": customer,
        "insight_id": insight.pk,
        "operations": [{"name": "probe", "type": "mediainfo"}],
        "params": {"a": 1},
        "priority": 7,
    }

    built, expected = unsaved_instance(Agenda, **fields), Agenda(**fields)

    assert list(vars(built)) == list(vars(expected))  # the same attributes, in field order
    assert _comparable(built) == _comparable(expected)
    assert isinstance(built.pk, uuid.UUID) and built.pk != expected.pk
    assert (built._state.adding, built._state.db) == (expected._state.adding, expected._state.db)
    assert built._state.fields_cache == {"customer": customer}
    assert built.customer is customer and built.customer_id == customer.pk


def test_a_progress_by_ids_equals_the_one_its_model_builds(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    fields = {
        "agenda_id": agenda.pk,
        "customer_id": agenda.customer_id,
        "link_id": agenda.link_id,
        "cid": agenda.cid,
        "state": AgendaProgress.State.READY,
        "message": "",
        "run_after": None,
        "do_not_run": False,
    }

    built, expected = unsaved_instance(AgendaProgress, **fields), AgendaProgress(**fields)

    assert list(vars(built)) == list(vars(expected))
    assert _comparable(built) == _comparable(expected)
    assert built._state.adding is True and built._state.db is None
    assert built.agenda == agenda  # the relation resolves from its id, as for the model's own


def test_each_instance_gets_a_fresh_value_from_a_callable_default(customer, insight):
    first = unsaved_instance(Agenda, customer=customer, insight_id=insight.pk, operations=[])
    second = unsaved_instance(Agenda, customer=customer, insight_id=insight.pk, operations=[])

    assert first.params == second.params == {}
    assert first.params is not second.params
    assert first.labels is not second.labels
    assert first.pk != second.pk


def test_a_relation_of_the_wrong_type_is_refused_as_the_model_refuses_it(customer, insight):
    with pytest.raises(ValueError) as refused:
        unsaved_instance(Agenda, customer=insight, insight_id=insight.pk, operations=[])
    with pytest.raises(ValueError) as expected:
        Agenda(customer=insight, insight_id=insight.pk, operations=[])

    assert str(refused.value) == str(expected.value)


def test_an_unknown_keyword_is_refused_as_the_model_refuses_it(customer):
    with pytest.raises(TypeError) as refused:
        unsaved_instance(Agenda, customer=customer, colour="red")
    with pytest.raises(TypeError) as expected:
        Agenda(customer=customer, colour="red")

    assert str(refused.value) == str(expected.value)


def test_a_one_to_one_given_as_an_instance_goes_through_the_model_and_caches_both_ways(
    submitter, submit_agenda
):
    agenda = submit_agenda(submitter)

    built = unsaved_instance(AgendaProgress, agenda=agenda, customer_id=agenda.customer_id)

    assert built.agenda is agenda
    assert agenda.progress is built  # the reverse cache that only the descriptor sets


def test_a_relation_given_both_ways_is_built_as_the_model_builds_it(customer, other_customer):
    fields = {"customer": customer, "customer_id": other_customer.pk, "operations": []}

    built, expected = unsaved_instance(Agenda, **fields), Agenda(**fields)

    assert built.customer_id == expected.customer_id == other_customer.pk  # the id set last
    assert _comparable(built) == _comparable(expected)


def test_a_model_with_an_init_receiver_is_built_by_its_model(customer, insight):
    from core import unsaved_instances

    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    unsaved_instances._plan.cache_clear()
    signals.post_init.connect(receiver, sender=Agenda)
    try:
        built = unsaved_instance(Agenda, customer=customer, insight_id=insight.pk, operations=[])
    finally:
        signals.post_init.disconnect(receiver, sender=Agenda)
        unsaved_instances._plan.cache_clear()

    assert seen == [built]
