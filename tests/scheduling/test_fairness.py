from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.fairness import (
    FAIR_SHARE,
    ROUND_ROBIN,
    WEIGHTED_FAIR,
    Lane,
    ReadyCandidate,
    lane_charge,
    pick_fifo,
    serve_lanes,
    turn_key,
    within_allowance,
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


# --- lanes: round robin, weighted fair, fair share -----------------------------------------


def lanes(*specs, charge=1.0):
    """lanes(("A", 0, 3), ...) -> Lane(customer "A", served 0, may take 3, charge)."""
    return [Lane(customer, served, take, charge) for customer, served, take in specs]


def test_each_turn_goes_to_the_least_served_lane_ties_to_the_lowest_customer_id():
    turns = serve_lanes(lanes(("B", 0, 5), ("A", 0, 5), ("C", 1, 5)), 5)

    assert turns.order == [1, 0, 1, 0, 2]  # A, B (served 0), then A, B, C at 1
    assert turns.counts == [2, 2, 1]
    assert turns.served == [2, 2, 2]
    assert turns.frontier == 1


def test_a_lane_that_may_take_nothing_gets_no_turn_and_a_full_lane_stops_at_its_limit():
    turns = serve_lanes(lanes(("A", 0, 0), ("B", 0, 1), ("C", 0, 9)), 4)

    assert turns.counts == [0, 1, 3]


def test_serving_stops_at_the_horizon_when_unread_lanes_may_be_owed_the_turn():
    read = lanes(("A", 0, 9), ("B", 1, 9))

    turns = serve_lanes(read, 5, horizon=turn_key(1, "B"))

    # A is served at 0 and at 1 (≤ B's key at 1? "A" < "B": yes), then B at 1; A at 2 would
    # pass the first unread lane, which is at least (1, "B").
    assert turns.order == [0, 0, 1]
    assert turns.stopped_at_horizon is True


def test_serving_reports_the_horizon_when_every_read_lane_is_done():
    turns = serve_lanes(lanes(("A", 0, 1)), 5, horizon=turn_key(0, "A"))

    assert turns.counts == [1]
    assert turns.stopped_at_horizon is True


def test_no_room_or_no_lanes_gives_no_turn():
    assert serve_lanes(lanes(("A", 0, 3)), 0).order == []
    assert serve_lanes([], 5).order == []
    assert serve_lanes([], 5).frontier is None


def test_charges_are_one_a_turn_one_over_weight_and_seconds_times_inflation_over_weight():
    assert lane_charge(ROUND_ROBIN, weight=3, cost_seconds=60, inflation=8) == 1.0
    assert lane_charge(WEIGHTED_FAIR, weight=4, cost_seconds=60, inflation=8) == 0.25
    assert lane_charge(FAIR_SHARE, weight=4, cost_seconds=60, inflation=8) == 120.0


def test_lane_charge_refuses_a_non_positive_weight_and_fifo():
    with pytest.raises(ValueError, match="weights must be > 0"):
        lane_charge(WEIGHTED_FAIR, weight=0, cost_seconds=1, inflation=1)
    with pytest.raises(ValueError, match="does not serve lanes"):
        lane_charge("fifo", weight=1, cost_seconds=1, inflation=1)


def serve_in_pages(all_lanes, room, page):
    """Serve as the fill does: read lanes `page` at a time in turn order, read more while the
    turns stop at the horizon; return (customer, count) of each turn given."""
    ordered = sorted(all_lanes, key=lambda lane: turn_key(lane.served, lane.customer_id))
    read = 0
    while True:
        read = min(len(ordered), read + page)
        horizon = (
            None
            if read == len(ordered)
            else turn_key(ordered[read - 1].served, ordered[read - 1].customer_id)
        )
        turns = serve_lanes(ordered[:read], room, horizon=horizon)
        if turns.stopped_at_horizon and read < len(ordered):
            continue
        return [ordered[index].customer_id for index in turns.order]


@st.composite
def lane_sets(draw):
    customers = draw(st.lists(st.sampled_from("ABCDEFGHIJ"), unique=True, min_size=1))
    served = draw(st.lists(st.integers(0, 3), min_size=len(customers), max_size=len(customers)))
    takes = draw(st.lists(st.integers(0, 6), min_size=len(customers), max_size=len(customers)))
    return lanes(*zip(customers, served, takes, strict=True))


@given(lane_sets(), st.integers(0, 30), st.integers(1, 4))
def test_reading_lanes_a_page_at_a_time_gives_the_turns_reading_them_all_gives(
    all_lanes, room, page
):
    everything = sorted(all_lanes, key=lambda lane: turn_key(lane.served, lane.customer_id))
    at_once = [everything[index].customer_id for index in serve_lanes(everything, room).order]

    assert serve_in_pages(all_lanes, room, page) == at_once


@given(
    st.lists(
        st.tuples(st.sampled_from("ABCDE"), st.integers(1, 8)),
        min_size=1,
        max_size=5,
        unique_by=lambda item: item[0],
    ),
    st.lists(st.integers(1, 7), min_size=1, max_size=12),
)
def test_round_robin_never_serves_a_customer_twice_while_another_with_work_is_owed_a_turn(
    backlogs, rooms
):
    """Fills of any sizes over customers with any backlogs, lanes starting level: at every
    turn, the customer served has had no more turns than any customer still holding work."""
    served = {customer: 0.0 for customer, _ in backlogs}
    left = dict(backlogs)
    for room in rooms:
        current = lanes(*[(c, served[c], left[c]) for c, _ in backlogs])
        turns = serve_lanes(current, room)
        given = {customer: 0 for customer in served}
        for index in turns.order:
            customer = current[index].customer_id
            owed = [c for c in served if left[c] - given[c] > 0]
            assert served[customer] + given[customer] <= min(served[c] + given[c] for c in owed)
            given[customer] += 1
        for customer, count in given.items():
            served[customer] += count
            left[customer] -= count


@given(st.integers(1, 5), st.integers(1, 5), st.lists(st.integers(1, 9), min_size=40, max_size=60))
def test_weighted_fair_turn_shares_converge_to_the_weights(weight_a, weight_b, rooms):
    weights = {"A": weight_a, "B": weight_b}
    served = {"A": 0.0, "B": 0.0}
    turns_of = {"A": 0, "B": 0}
    for room in rooms:
        current = [
            Lane(
                c,
                served[c],
                99,
                lane_charge(WEIGHTED_FAIR, weight=weights[c], cost_seconds=1, inflation=1),
            )
            for c in "AB"
        ]
        turns = serve_lanes(current, room)
        for index, lane in enumerate(current):
            served[lane.customer_id] = turns.served[index]
            turns_of[lane.customer_id] += turns.counts[index]
    total = sum(turns_of.values())
    # Within one turn of each customer's weight share, whatever the fill sizes were.
    assert abs(turns_of["A"] - total * weight_a / (weight_a + weight_b)) <= max(weights.values())


def simulate_fair_share(costs, weights, *, workers, executions, half_life=3600.0):
    """A farm with `workers` slots and a queue of one, on a simulated clock: each customer
    always has work whose executions take `costs[c]` seconds (declared, so charged at queue
    time and corrected to the same at the end). Returns each customer's execution seconds."""
    import heapq

    served = dict.fromkeys(costs, 0.0)
    used = dict.fromkeys(costs, 0.0)
    running: list[tuple[float, str]] = []
    now, started = 0.0, 0
    while started < executions:
        while len(running) < workers and started < executions:
            inflation = 2.0 ** (now / half_life)
            current = [
                Lane(
                    c,
                    served[c],
                    1,
                    lane_charge(
                        FAIR_SHARE, weight=weights[c], cost_seconds=costs[c], inflation=inflation
                    ),
                )
                for c in costs
            ]
            turns = serve_lanes(current, 1)
            customer = current[turns.order[0]].customer_id
            served[customer] = turns.served[turns.order[0]]
            heapq.heappush(running, (now + costs[customer], customer))
            started += 1
        now, customer = heapq.heappop(running)
        used[customer] += costs[customer]
    return used


@pytest.mark.parametrize(
    ("weights", "share_a"), [({"A": 1, "B": 1}, 0.5), ({"A": 1, "B": 3}, 0.25)]
)
def test_fair_share_time_shares_converge_to_the_weights_however_long_the_work(weights, share_a):
    used = simulate_fair_share({"A": 60.0, "B": 1.0}, weights, workers=4, executions=4000)

    assert used["A"] / (used["A"] + used["B"]) == pytest.approx(share_a, abs=0.05)


@given(st.floats(0.5, 120), st.floats(0.5, 120), st.integers(1, 4), st.integers(1, 4))
def test_fair_share_time_shares_converge_to_the_weights_for_any_costs(
    cost_a, cost_b, weight_a, weight_b
):
    used = simulate_fair_share(
        {"A": cost_a, "B": cost_b}, {"A": weight_a, "B": weight_b}, workers=2, executions=3000
    )

    share = used["A"] / (used["A"] + used["B"])
    assert share == pytest.approx(weight_a / (weight_a + weight_b), abs=0.05)


def test_round_robin_on_the_same_work_gives_the_long_work_nearly_all_the_time():
    """The control: counting turns, the customer whose work is 60× longer takes ~98%."""
    costs = {"A": 60.0, "B": 1.0}
    served, used = {"A": 0.0, "B": 0.0}, {"A": 0.0, "B": 0.0}
    for _ in range(1000):
        turns = serve_lanes(lanes(("A", served["A"], 1), ("B", served["B"], 1)), 1)
        customer = "AB"[turns.order[0]]
        served[customer] += 1
        used[customer] += costs[customer]

    assert used["A"] / (used["A"] + used["B"]) > 0.95


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
def test_fifo_picks_a_prefix_of_each_customer_up_to_room_without_repeats(fill):
    candidates, room, _ = fill

    assert_fair_shape(candidates, room, pick_fifo(candidates, room))


def test_within_allowance_keeps_each_limited_customers_first_picks_and_every_other_pick():
    picks = [agenda("A", 1), agenda("B", 1), agenda("A", 2), agenda("C", 1), agenda("A", 3)]
    allowance = {"A": 2, "C": 0}

    kept = within_allowance(picks, allowance)

    assert [pick.agenda_id for pick in kept] == ["A1", "B1", "A2"]
    assert allowance == {"A": 2, "C": 0}  # the caller's counts are left as they were
