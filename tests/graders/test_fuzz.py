"""Property tests: whatever JSON a grader is given, it returns a well-formed result."""

from __future__ import annotations

import json
import math
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayeval.graders import GRADER_REGISTRY, GraderResult, get_grader
from tests.conftest import read_jsonl, shared_path

VECTORS = read_jsonl(shared_path("conformance", "graders.jsonl"))
TYPES = sorted(GRADER_REGISTRY)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", " ", "1_000", "nan", "inf", "$", "$.a[*]", "gate", "hard_fail", "additive", "A", "1.0"]),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.text(max_size=8), children, max_size=5),
    ),
    max_leaves=25,
)


def assert_well_formed(result: Any) -> None:
    assert isinstance(result, GraderResult)
    assert isinstance(result.passed, bool)
    assert isinstance(result.metrics, dict)
    assert isinstance(result.score, float) and isinstance(result.score_max, float)
    assert 0.0 <= result.normalized_score() <= 1.0
    if "configuration_error" in result.metrics:
        assert result.passed is False and result.score == 0.0
        assert isinstance(result.metrics["configuration_error"], str) and result.metrics["configuration_error"]
    # a result must survive the trip into a stored row
    json.loads(result.to_json())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grader_type=st.sampled_from(TYPES), answer=json_values, config=json_values)
def test_arbitrary_json_never_raises(grader_type: str, answer: Any, config: Any) -> None:
    assert_well_formed(get_grader(grader_type).evaluate_answer(answer, config))


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, prefix + (index,))
    return found


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _replace(value[head], rest, new)
    return copy


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    vector=st.sampled_from(VECTORS),
    side=st.sampled_from(["answer", "config"]),
    pick=st.integers(min_value=0, max_value=10**6),
    new=json_values,
)
def test_mutated_vectors_never_raise(vector: dict, side: str, pick: int, new: Any) -> None:
    """Replacing one subtree of a real vector reaches deep code paths random JSON never would."""
    target = vector[side]
    paths = _paths(target)
    mutated = _replace(target, paths[pick % len(paths)], new)
    answer, config = (mutated, vector["config"]) if side == "answer" else (vector["answer"], mutated)
    assert_well_formed(get_grader(vector["type"]).evaluate_answer(answer, config))


def _as_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)  # NaN as NaN: equal to itself here


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vector=st.sampled_from(VECTORS), other=st.sampled_from(VECTORS), answer=json_values)
def test_no_answer_changes_the_config_a_later_grading_uses(vector: dict, other: dict, answer: Any) -> None:
    """A process that grades in process keeps an eval's grader entries for every later
    grading, of any unit: answers (random, or another vector's) must leave the config as it was."""
    config = json.loads(json.dumps(vector["config"]))
    before = _as_text(config)
    for given_answer in (answer, other["answer"], vector["answer"]):
        get_grader(vector["type"]).evaluate_answer(given_answer, config)
    assert _as_text(config) == before


def test_deep_nesting_is_a_result_not_a_crash() -> None:
    config: dict = {"children": [{"predicate": {"op": "equals", "arg": 1}, "role": "gate", "answer_field": "x"}]}
    for _ in range(2000):
        config = {"children": [{"type": "all_of", "config": config}]}
    result = get_grader("all_of").evaluate_answer({"x": 1}, config)
    assert_well_formed(result)
    assert result.passed is False


def test_non_finite_scores_normalise_to_zero() -> None:
    rng = random.Random(7)
    for _ in range(50):
        score = rng.choice([math.nan, math.inf, -math.inf, 2.0, -1.0])
        result = GraderResult(passed=False, score=score, score_max=rng.choice([0.0, 1.0, math.inf, -1.0]))
        assert 0.0 <= result.normalized_score() <= 1.0
