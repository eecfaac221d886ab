from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import count

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.fairness import (
    ReadyCandidate,
    pick,
    pick_fifo,
    pick_round_robin,
    pick_weighted_fair,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def agenda(customer, number, *, minute=None, priority=5):
    return ReadyCandidate(
        agenda_id=f"{customer}{number}",
        customer_id=customer,
        priority=priority,
        added_at=T0 + timedelta(minutes=number if minute is None else minute),
    )


def backlog(**sizes):
    """Each customer's ready agendas, oldest first: backlog(A=2) -> {"A": [A1, A2]}."""
    return {
        customer: [agenda(customer, number) for number in range(1, size + 1)]
        for customer, size in sizes.items()
    }


def ids(picked):
    return [candidate.agenda_id for candidate in picked]


def remaining(candidates, picked):
    taken = set(picked)
    return {
        customer: [item for item in items if item not in taken]
        for customer, items in candidates.items()
        if any(item not in taken for item in items)
    }


# --- fifo -----------------------------------------------------------------------------


def test_fifo_picks_the_oldest_across_customers():
    candidates = {
        "A": [agenda("A", 1, minute=1), agenda("A", 2, minute=4)],
        "B": [agenda("B", 1, minute=2), agenda("B", 2, minute=3)],
    }

    assert ids(pick_fifo(candidates, 3)) == ["A1", "B1", "B2"]
    assert ids(pick_fifo(candidates, 10)) == ["A1", "B1", "B2", "A2"]


def test_fifo_breaks_added_at_ties_by_priority_then_agenda_id():
    candidates = {
        "A": [agenda("A", 2, minute=0, priority=5)],
        "B": [agenda("B", 1, minute=0, priority=7)],
        "C": [agenda("C", 1, minute=0, priority=5)],
    }

    assert ids(pick_fifo(candidates, 3)) == ["B1", "A2", "C1"]


def test_fifo_keeps_priority_order_within_a_customer():
    urgent = ReadyCandidate("A-urgent", "A", 9, T0 + timedelta(minutes=5))
    routine = ReadyCandidate("A-routine", "A", 1, T0 + timedelta(minutes=1))
    other = ReadyCandidate("B1", "B", 5, T0 + timedelta(minutes=3))

    picked = pick_fifo({"A": [urgent, routine], "B": [other]}, 3)

    assert ids(picked) == ["B1", "A-urgent", "A-routine"]


def test_fifo_respects_truncated_candidate_lists():
    candidates = {"A": [agenda("A", 1)], "B": backlog(B=3)["B"]}

    assert ids(pick_fifo(candidates, 10)) == ["A1", "B1", "B2", "B3"]


def test_fifo_with_no_room_or_no_work_picks_nothing():
    assert pick_fifo(backlog(A=3), 0) == []
    assert pick_fifo(backlog(A=3), -1) == []
    assert pick_fifo({"A": [], "B": []}, 5) == []
    assert pick_fifo({}, 5) == []


def test_fifo_orders_integer_agenda_ids_numerically_on_ties():
    candidates = {
        1: [ReadyCandidate(10, 1, 5, T0)],
        2: [ReadyCandidate(9, 2, 5, T0)],
    }

    assert ids(pick_fifo(candidates, 2)) == [9, 10]


# --- round robin ----------------------------------------------------------------------


def test_round_robin_pop_example_serves_the_cursor_first_and_keeps_the_rest_owed():
    candidates = backlog(A=1, B=1, C=1)

    picked, pending = pick_round_robin(
        candidates, 2, pending_customer_ids=["A", "B", "C"], all_customer_ids=["A", "B", "C"]
    )

    assert ids(picked) == ["A1", "B1"]
    assert pending == ["C"]

    left = remaining(candidates, picked)
    picked, pending = pick_round_robin(
        left, 2, pending_customer_ids=pending, all_customer_ids=list(left)
    )

    assert ids(picked) == ["C1"]
    assert pending == ["C"]


def test_round_robin_pop_example_schedules_everything_and_keeps_an_idle_customer_owed():
    candidates = backlog(A=6, B=4, C=9)

    picked, pending = pick_round_robin(
        candidates, 19, pending_customer_ids=["D"], all_customer_ids=["A", "B", "C"]
    )

    assert ids(picked) == [
        *("A1", "B1", "C1", "A2", "B2", "C2", "A3", "B3", "C3", "A4", "B4", "C4"),
        *("A5", "C5", "A6", "C6", "C7", "C8", "C9"),
    ]
    assert pending == ["D"]


def test_round_robin_with_an_empty_cursor_starts_from_every_customer_with_work():
    picked, pending = pick_round_robin(
        backlog(A=3, B=3, C=3), 2, pending_customer_ids=[], all_customer_ids=["A", "B", "C"]
    )

    assert ids(picked) == ["A1", "B1"]
    assert pending == ["C"]


def test_round_robin_second_pass_leaves_owed_only_those_it_could_not_serve():
    candidates = backlog(A=3, B=1, C=0)

    picked, pending = pick_round_robin(
        candidates, 4, pending_customer_ids=["B"], all_customer_ids=["A", "B", "C"]
    )

    assert ids(picked) == ["B1", "A1", "A2", "A3"]
    assert pending == ["B", "C"]


def test_round_robin_room_one_fills_rotate_through_customers():
    candidates = backlog(A=5, B=5, C=5)
    pending: list = []
    order = []
    for _ in range(6):
        picked, pending = pick_round_robin(
            candidates, 1, pending_customer_ids=pending, all_customer_ids=list(candidates)
        )
        order += ids(picked)
        candidates = remaining(candidates, picked)

    assert order == ["A1", "B1", "C1", "A2", "B2", "C2"]


def test_round_robin_keeps_priority_order_within_a_customer():
    urgent = ReadyCandidate("A-urgent", "A", 9, T0 + timedelta(minutes=5))
    routine = ReadyCandidate("A-routine", "A", 1, T0)

    picked, _ = pick_round_robin(
        {"A": [urgent, routine], "B": backlog(B=1)["B"]},
        3,
        pending_customer_ids=[],
        all_customer_ids=["A", "B"],
    )

    assert ids(picked) == ["A-urgent", "B1", "A-routine"]


def test_round_robin_respects_truncated_candidate_lists():
    candidates = {"A": backlog(A=1)["A"], "B": backlog(B=5)["B"], "C": []}

    picked, pending = pick_round_robin(
        candidates, 4, pending_customer_ids=["C", "A"], all_customer_ids=["A", "B", "C"]
    )

    assert ids(picked) == ["A1", "B1", "B2", "B3"]
    assert pending == ["A", "C"]


def test_round_robin_with_no_room_picks_nothing_and_keeps_the_cursor():
    picked, pending = pick_round_robin(
        backlog(A=2), 0, pending_customer_ids=["B", "A"], all_customer_ids=["A"]
    )

    assert picked == []
    assert pending == ["B", "A"]


def test_round_robin_with_no_customers_picks_nothing():
    assert pick_round_robin({}, 5, pending_customer_ids=[], all_customer_ids=[]) == ([], [])


def test_round_robin_matches_customer_ids_stored_as_text():
    candidates = {1: [agenda("1-", 1)], 2: [agenda("2-", 1)]}

    picked, pending = pick_round_robin(
        candidates, 1, pending_customer_ids=["2", "1"], all_customer_ids=[1, 2]
    )

    assert ids(picked) == ["2-1"]
    assert pending == ["1"]


# --- weighted fair --------------------------------------------------------------------


def unlimited_fills(weights, *, fills, room):
    """Run `fills` fills of `room` over an endless backlog; return picks per customer."""
    numbers = count()
    deficits: dict = {}
    taken: Counter = Counter()
    for _ in range(fills):
        candidates = {
            customer: [ReadyCandidate(next(numbers), customer, 5, T0) for _ in range(room)]
            for customer in weights
        }
        picked, deficits = pick_weighted_fair(candidates, room, weights=weights, deficits=deficits)
        assert len(picked) == room
        taken.update(candidate.customer_id for candidate in picked)
    return taken


def test_weighted_shares_converge_to_weights_over_many_small_fills():
    weights = {"A": 1, "B": 2, "C": 4}

    taken = unlimited_fills(weights, fills=1000, room=10)

    assert sum(taken.values()) == 10_000
    for customer, weight in weights.items():
        expected = 10_000 * weight / 7
        assert abs(taken[customer] - expected) <= 0.05 * expected
        # Round accounting is exact: no customer drifts by more than one round's credit.
        assert abs(taken[customer] - expected) <= 4


def test_weighted_round_cut_short_by_room_is_finished_by_the_next_fills():
    weights = {"A": 1, "B": 2, "C": 4}

    assert unlimited_fills(weights, fills=7, room=1) == {"A": 1, "B": 2, "C": 4}
    assert unlimited_fills(weights, fills=7, room=3) == {"A": 3, "B": 6, "C": 12}


def test_weighted_one_fill_interleaves_credit_holders():
    picked, deficits = pick_weighted_fair(
        backlog(A=9, B=9), 5, weights={"A": 1, "B": 3}, deficits={}
    )

    assert ids(picked) == ["A1", "B1", "B2", "B3", "A2"]
    assert deficits == {"B": 3.0}


def test_weighted_carries_unspent_credit_to_the_next_fill():
    picked, deficits = pick_weighted_fair(
        backlog(A=9, B=9), 2, weights={"A": 2, "B": 2}, deficits={}
    )

    assert ids(picked) == ["A1", "B1"]
    assert deficits == {"A": 1.0, "B": 1.0}

    picked, deficits = pick_weighted_fair(
        {"A": backlog(A=9)["A"][1:], "B": backlog(B=9)["B"][1:]},
        3,
        weights={"A": 2, "B": 2},
        deficits=deficits,
    )

    assert ids(picked) == ["A2", "B2", "A3"]
    assert deficits == {"A": 1.0, "B": 2.0}


def test_weighted_customer_without_candidates_forfeits_its_credit():
    picked, deficits = pick_weighted_fair(
        {"B": backlog(B=9)["B"], "C": []},
        3,
        weights={"B": 1, "C": 3},
        deficits={"B": 1.0, "C": 7.0, "gone": 5.0},
    )

    assert ids(picked) == ["B1", "B2", "B3"]
    assert deficits == {}


def test_weighted_emptied_list_keeps_its_credit_until_a_fill_finds_no_candidates():
    picked, deficits = pick_weighted_fair(
        {"A": backlog(A=2)["A"], "B": backlog(B=9)["B"]},
        6,
        weights={"A": 10, "B": 1},
        deficits={},
    )

    assert ids(picked) == ["A1", "B1", "A2", "B2", "B3", "B4"]
    assert deficits == {"A": 8.0}

    picked, deficits = pick_weighted_fair(
        {"B": backlog(B=9)["B"][4:]}, 1, weights={"A": 10, "B": 1}, deficits=deficits
    )

    assert ids(picked) == ["B5"]
    assert deficits == {}


def test_weighted_truncated_list_does_not_lose_the_rest_of_the_round():
    first, deficits = pick_weighted_fair(
        {"A": backlog(A=1)["A"], "B": backlog(B=1)["B"]}, 1, weights={"A": 1, "B": 4}, deficits={}
    )
    second, deficits = pick_weighted_fair(
        {"A": backlog(A=2)["A"][1:], "B": backlog(B=1)["B"]},
        1,
        weights={"A": 1, "B": 4},
        deficits=deficits,
    )

    assert ids(first + second) == ["A1", "B1"]
    assert deficits == {"B": 3.0}


def test_weighted_missing_weight_counts_as_one():
    picked, _ = pick_weighted_fair(backlog(A=5, B=5), 4, weights={"B": 3}, deficits={})

    assert ids(picked) == ["A1", "B1", "B2", "B3"]


def test_weighted_keeps_priority_order_within_a_customer():
    urgent = ReadyCandidate("A-urgent", "A", 9, T0 + timedelta(minutes=5))
    routine = ReadyCandidate("A-routine", "A", 1, T0)

    picked, _ = pick_weighted_fair({"A": [urgent, routine]}, 2, weights={"A": 1}, deficits={})

    assert ids(picked) == ["A-urgent", "A-routine"]


def test_weighted_with_no_room_picks_nothing_and_keeps_deficits():
    picked, deficits = pick_weighted_fair(backlog(A=3), 0, weights={"A": 1}, deficits={"A": 0.5})

    assert picked == []
    assert deficits == {"A": 0.5}


def test_weighted_rejects_a_non_positive_weight():
    with pytest.raises(ValueError, match="weights must be > 0"):
        pick_weighted_fair(backlog(A=1), 1, weights={"A": 0}, deficits={})


def test_weighted_stores_deficits_under_text_customer_ids():
    candidates = {7: [ReadyCandidate(1, 7, 5, T0), ReadyCandidate(2, 7, 5, T0)]}

    picked, deficits = pick_weighted_fair(candidates, 1, weights={7: 3}, deficits={})

    assert ids(picked) == [1]
    assert deficits == {"7": 2.0}


# --- dispatcher -----------------------------------------------------------------------


def test_pick_fifo_leaves_the_state_as_it_was():
    state = {"pending_customer_ids": ["B"], "deficits": {"A": 1.0}}

    picked, new_state = pick("fifo", backlog(A=1, B=1), 1, state=state, weights={})

    assert ids(picked) == ["A1"]
    assert new_state == state
    assert new_state is not state


def test_pick_round_robin_stores_the_cursor_as_text_and_keeps_other_state():
    candidates = {1: [agenda("1-", 1)], 2: [agenda("2-", 1)], 3: [agenda("3-", 1)]}

    picked, new_state = pick(
        "round_robin", candidates, 2, state={"deficits": {"x": 1.0}}, weights={}
    )

    assert ids(picked) == ["1-1", "2-1"]
    assert new_state == {"deficits": {"x": 1.0}, "pending_customer_ids": ["3"]}

    picked, new_state = pick("round_robin", {3: [agenda("3-", 1)]}, 1, state=new_state, weights={})

    assert ids(picked) == ["3-1"]
    assert new_state["pending_customer_ids"] == []


def test_pick_weighted_fair_threads_the_deficits_through_state():
    picked, new_state = pick(
        "weighted_fair", backlog(A=5, B=5), 2, state={}, weights={"A": 1, "B": 3}
    )

    assert ids(picked) == ["A1", "B1"]
    assert new_state == {"deficits": {"B": 2.0}}


def test_pick_rejects_an_unknown_algorithm():
    with pytest.raises(ValueError, match="Unknown scheduling algorithm 'lottery'"):
        pick("lottery", backlog(A=1), 1, state={}, weights={})


# --- properties -----------------------------------------------------------------------

CUSTOMERS = ["A", "B", "C", "D", "E"]


@st.composite
def fills(draw):
    sizes = draw(st.dictionaries(st.sampled_from(CUSTOMERS), st.integers(0, 6)))
    candidates = backlog(**sizes)
    room = draw(st.integers(0, 25))
    pending = draw(st.lists(st.sampled_from([*CUSTOMERS, "Z"]), unique=True))
    return candidates, room, pending


def assert_fair_shape(candidates, room, picked):
    total = sum(len(items) for items in candidates.values())
    assert len(picked) == min(max(room, 0), total)
    assert len(set(picked)) == len(picked)
    for customer, items in candidates.items():
        mine = [candidate for candidate in picked if candidate.customer_id == customer]
        assert mine == items[: len(mine)]


@given(fills())
def test_round_robin_picks_a_prefix_of_each_customer_up_to_room_without_repeats(fill):
    candidates, room, pending = fill

    picked, new_pending = pick_round_robin(
        candidates, room, pending_customer_ids=pending, all_customer_ids=sorted(candidates)
    )

    assert_fair_shape(candidates, room, picked)
    assert len(set(new_pending)) == len(new_pending)
    assert set(new_pending) <= set(candidates) | set(pending)


@given(fills())
def test_fifo_picks_a_prefix_of_each_customer_up_to_room_without_repeats(fill):
    candidates, room, _ = fill

    assert_fair_shape(candidates, room, pick_fifo(candidates, room))


@given(fills(), st.dictionaries(st.sampled_from(CUSTOMERS), st.integers(1, 5)))
def test_weighted_picks_a_prefix_of_each_customer_up_to_room_without_repeats(fill, weights):
    candidates, room, _ = fill

    picked, deficits = pick_weighted_fair(candidates, room, weights=weights, deficits={})

    assert_fair_shape(candidates, room, picked)
    for customer, credit in deficits.items():
        assert candidates[customer] != []
        assert 0 < credit <= weights.get(customer, 1)
