from datetime import UTC, datetime, timedelta

from resourcepools.mapping import InsightCandidate, choose_insight, insight_matches

T0 = datetime(2024, 1, 1, tzinfo=UTC)

OPERATIONS = [
    {"name": "Probe", "type": "mediaInfo", "params": {"profile": "HD", "retries": 3}},
    {"name": "encode", "type": "ffmpeg"},
]


def insight(name, mappers, *, order=0, age_days=0, id_=None):
    return InsightCandidate(
        id=id_ or f"id-{name}",
        name=name,
        order=order,
        created_at=T0 - timedelta(days=age_days),
        mappers=mappers,
    )


def matches(mappers, *, operations=OPERATIONS, params=None):
    return insight_matches(insight("x", mappers), operations=operations, params=params or {})


def test_operation_type_matches_case_insensitively():
    assert matches({"operation_type": ["MEDIAINFO"]}) is True
    assert matches({"operation_type": ["transcode"]}) is False


def test_operation_name_matches_case_insensitively():
    assert matches({"operation_name": ["probe"]}) is True
    assert matches({"operation_name": ["Encode "]}) is True
    assert matches({"operation_name": ["package"]}) is False


def test_param_matches_agenda_params():
    assert matches({"param": ["Region=EU"]}, params={"region": "eu"}) is True
    assert matches({"param": ["region=us"]}, params={"region": "eu"}) is False


def test_param_matches_any_operation_params_with_stringified_values():
    assert matches({"param": ["profile=hd"]}) is True
    assert matches({"param": ["retries=3"]}) is True
    assert matches({"param": ["retries=4"]}) is False


def test_param_stringifies_booleans_and_null_as_json():
    params = {"urgent": True, "region": None}

    assert matches({"param": ["urgent=true"]}, params=params) is True
    assert matches({"param": ["region=null"]}, params=params) is True
    assert matches({"param": ["urgent=True"]}, params={"urgent": "false"}) is False


def test_any_mapper_of_an_insight_is_enough():
    mappers = {"operation_type": ["transcode"], "operation_name": ["encode"]}

    assert matches(mappers) is True


def test_a_list_of_mapper_objects_matches_when_any_object_matches():
    mappers = [{"operation_type": ["transcode"]}, {"param": ["profile=hd"]}]

    assert matches(mappers) is True
    assert matches([{"operation_type": ["transcode"]}, "junk"]) is False


def test_pop_mapper_spellings_are_accepted():
    assert matches({"operationType": ["mediainfo"]}) is True
    assert matches({"OperationName": ["probe"]}) is True
    assert matches({"paramMap": ["profile=hd"]}) is True


def test_unknown_mapper_names_are_ignored():
    assert matches({"customer": ["probe"], "operation_type": ["ffmpeg"]}) is True
    assert matches({"customer": ["probe"]}) is False


def test_an_insight_without_mappers_never_matches():
    assert matches(None) is False
    assert matches({}) is False
    assert matches([]) is False
    assert matches({"operation_type": []}) is False


def test_a_single_string_value_is_treated_as_a_one_item_list():
    assert matches({"operation_type": "ffmpeg"}) is True


def test_choose_insight_returns_none_when_nothing_matches():
    candidates = [insight("a", {"operation_type": ["transcode"]}), insight("b", None)]

    assert choose_insight(candidates, operations=OPERATIONS, params={}) is None
    assert choose_insight([], operations=OPERATIONS, params={}) is None


def test_choose_insight_prefers_lowest_order_then_oldest_then_id():
    fits = {"operation_type": ["ffmpeg"]}
    late = insight("late", fits, order=2, age_days=100)
    young = insight("young", fits, order=1, age_days=1, id_="id-a")
    old = insight("old", fits, order=1, age_days=5, id_="id-z")
    twin = insight("twin", fits, order=1, age_days=5, id_="id-b")
    other = insight("other", {"operation_type": ["nope"]}, order=0)

    chosen = choose_insight([late, young, old, twin, other], operations=OPERATIONS, params={})

    assert chosen == twin


def test_default_insight_wins_among_matches_by_name_or_id_case_insensitively():
    fits = {"operation_type": ["ffmpeg"]}
    first = insight("First", fits, order=0)
    preferred = insight("GPU", fits, order=5, id_="5d3c")

    by_name = choose_insight(
        [first, preferred], operations=OPERATIONS, params={}, default_insight="gpu"
    )
    by_id = choose_insight(
        [first, preferred], operations=OPERATIONS, params={}, default_insight="5D3C"
    )

    assert by_name == preferred
    assert by_id == preferred


def test_default_insight_that_does_not_match_falls_back_to_the_first_match():
    first = insight("First", {"operation_type": ["ffmpeg"]}, order=0)
    gpu = insight("GPU", {"operation_type": ["nope"]}, order=1)
    second = insight("Second", {"operation_type": ["ffmpeg"]}, order=1)

    chosen = choose_insight(
        [second, gpu, first], operations=OPERATIONS, params={}, default_insight="GPU"
    )

    assert chosen == first


def test_choose_insight_uses_agenda_params_for_param_mappers():
    europe = insight("eu", {"param": ["region=eu"]}, order=0)
    anywhere = insight("any", {"operation_type": ["ffmpeg"]}, order=1)

    assert choose_insight([anywhere, europe], operations=OPERATIONS, params={"region": "EU"}) == (
        europe
    )
    assert choose_insight([anywhere, europe], operations=OPERATIONS, params={"region": "us"}) == (
        anywhere
    )
