"""all_of / composite and average_of beyond the conformance vectors."""

from __future__ import annotations

import pytest

from rayeval.graders import (
    GRADER_REGISTRY,
    Grader,
    GraderResult,
    get_grader,
    register_grader,
)
from rayeval.graders.composite import MAX_NESTING, child_label

ANSWER = {"x": 1, "y": "up", "flag": False, "q": "WEAK", "z": ["a", "b"]}
EQ = {"op": "equals", "arg": 1}


def gate(field, arg, name=None, **extra):
    leaf = {"answer_field": field, "predicate": {"op": "equals", "arg": arg}, "role": "gate", **extra}
    if name is not None:
        leaf["name"] = name
    return leaf


def hard_fail(field, arg, name=None, **extra):
    return {**gate(field, arg, name, **extra), "role": "hard_fail"}


def typed(type_name, config, **outer):
    return {"type": type_name, "config": config, **outer}


def all_of(children, answer=ANSWER, **config):
    return get_grader("all_of").evaluate_answer(answer, {"children": children, **config})


def average_of(children, answer=ANSWER, **config):
    return get_grader("average_of").evaluate_answer(answer, {"children": children, **config})


def is_config_error(result):
    return result.passed is False and result.score == 0.0 and bool(result.metrics.get("configuration_error"))


@pytest.fixture
def temporary_grader():
    """Register a throwaway grader type for one test."""
    added = []

    def add(name, cls):
        register_grader(name)(cls)
        added.append(name)

    yield add
    for name in added:
        GRADER_REGISTRY.unregister(name)


# --------------------------------------------------------------------------- labels


def test_child_label_rules():
    assert child_label(0, "gy") == "children[0]"
    assert child_label(1, gate("x", 1)) == "children[1]"
    assert child_label(1, gate("x", 1, name=7)) == "7"
    assert child_label(2, typed("predicate_leaf", gate("x", 1), name="outer")) == "children[2].predicate_leaf"
    assert child_label(2, typed("predicate_leaf", gate("x", 1, name="inner"), name="outer")) == "inner"
    assert child_label(2, typed("predicate_leaf", "not-an-object", name="outer")) == "outer"
    assert child_label(3, typed("all_of", {}, name="nested")) == "nested"
    assert child_label(3, typed("all_of", {})) == "children[3].all_of"
    assert child_label(4, {"config": {}}) == "children[4].unknown"
    assert child_label(4, {"type": "", "config": {}}) == "children[4].unknown"
    assert child_label(5, {"type": "all_of", "predicate": EQ, "name": "typed-wins"}) == "typed-wins"


def test_default_labels_take_part_in_uniqueness():
    result = all_of([gate("x", 1, name="children[1]"), gate("y", "up")])
    assert is_config_error(result)
    assert result.metrics == {"configuration_error": result.metrics["configuration_error"]}


def test_stringified_names_collide():
    assert is_config_error(average_of([gate("x", 1, name=5), gate("y", "up", name="5")]))


def test_typed_child_default_label_collides_with_a_named_leaf():
    children = [gate("x", 1, name="children[1].all_of"), typed("all_of", {"children": [gate("y", "up")]})]
    assert is_config_error(all_of(children))


# --------------------------------------------------------------------------- all_of rules


@pytest.mark.parametrize(
    "extra",
    [{"pass_rule": None}, {"pass_rule": "ALL"}, {"min_passing_children": None}, {"score_threshold": None}],
)
def test_all_of_rejects_rule_keys_even_when_null(extra):
    result = all_of([gate("x", 1)], **extra)
    assert is_config_error(result)
    assert result.metrics["scoring_count"] == 1  # a late error: the children were evaluated


def test_all_of_ignores_points_and_child_scores():
    result = all_of([gate("x", 1, points=0), gate("y", "up", points="lots")])
    assert (result.passed, result.score, result.score_max) == (True, 1.0, 1.0)
    weak = {
        "answer_field": "q",
        "predicate": {"op": "weighted_label", "table": {"STRONG": 2, "WEAK": 1}},
        "role": "gate",
        "name": "wl",
    }
    result = all_of([weak])
    assert (result.passed, result.score) == (True, 1.0)
    assert result.metrics["scoring_total_score"] == 1.0 and result.metrics["score_denominator"] == 2.0
    assert result.field_scores == {"wl": 1.0}


def test_all_of_metrics_for_failures():
    result = all_of([gate("x", 1, name="ok"), gate("y", "down", name="bad"), hard_fail("flag", False, name="hf")])
    assert result.passed is False and result.score == 0.0
    assert result.metrics["failed_children"] == ["bad"]
    assert result.metrics["hard_fail_triggered"] == ["hf"]
    assert result.metrics["scoring_count"] == 2 and result.metrics["scoring_passed"] == 1
    assert result.metrics["type"] == "all_of" and result.metrics["pass_rule"] == "all"
    assert "configuration_error" not in result.metrics


def test_composite_alias_reports_all_of():
    result = get_grader("composite").evaluate_answer(ANSWER, {"children": [gate("x", 1)]})
    assert result.passed is True and result.metrics["type"] == "all_of"


def test_only_misconfigured_positive_children_reports_misconfiguration_first():
    result = all_of([gate("x", 1, role="additive"), hard_fail("flag", True)])
    assert is_config_error(result)
    assert result.metrics["configuration_error"].startswith("misconfigured children")
    assert result.metrics["misconfigured_children"] == ["children[0]"]
    only_vetoes = all_of([hard_fail("flag", True)])
    assert only_vetoes.metrics["configuration_error"] == "no positive required children"


@pytest.mark.parametrize("grader", ["all_of", "average_of"])
@pytest.mark.parametrize("config", [None, [], "children", {"children": None}, {"children": {"a": 1}}, {}])
def test_bad_configs(grader, config):
    result = get_grader(grader).evaluate_answer(ANSWER, config)
    assert is_config_error(result) and result.score_max == 1.0
    assert list(result.metrics) == ["configuration_error"]


@pytest.mark.parametrize("grader", ["all_of", "average_of"])
def test_non_object_answer_is_graded_like_the_reference(grader):
    """Checked against the reference: a root-bound leaf sees the whole value; keyed leaves see MISSING."""
    whole = {"children": [{"predicate": {"op": "equals", "arg": 5}, "role": "gate"}]}
    result = get_grader(grader).evaluate_answer(5, whole)
    assert (result.passed, result.score, result.score_max) == (True, 1.0, 1.0)
    keyed = {"children": [{"predicate": {"op": "equals", "arg": 5}, "role": "gate", "answer_field": "x"}]}
    result = get_grader(grader).evaluate_answer("x", keyed)
    assert (result.passed, result.score) == (False, 0.0) and "configuration_error" not in result.metrics


# --------------------------------------------------------------------------- child classification


@pytest.mark.parametrize("grader", ["all_of", "average_of"])
@pytest.mark.parametrize(
    "bad_child",
    [
        gate("x", 1, role="bonus"),
        gate("x", 1, role=None),
        {"answer_field": "x", "predicate": EQ},
        typed("all_of", {"children": [gate("y", "up")]}, role=None),
        {"type": None, "config": {}},
        {"type": 3, "config": {}},
        typed("all_of", "not-an-object"),
        typed("no_such_grader", {}),
        typed("predicate_leaf", gate("y", "up", role="veto")),
        {"role": "gate", "config": {}},
    ],
)
def test_invalid_children_make_the_composite_a_configuration_error(grader, bad_child):
    result = get_grader(grader).evaluate_answer(ANSWER, {"children": [gate("x", 1, name="ok"), bad_child]})
    assert is_config_error(result)
    assert result.metrics["misconfigured_children"] == [child_label(1, bad_child)]


def test_typed_child_with_both_type_and_predicate_ignores_the_predicate():
    child = {"type": "all_of", "predicate": {"op": "bogus"}, "config": {"children": [gate("y", "up")]}}
    assert all_of([child]).passed is True


def test_additive_leaves_score_only_in_average_of():
    additive_typed = typed("predicate_leaf", gate("y", "up", role="additive"))
    assert is_config_error(all_of([gate("x", 1), additive_typed]))
    result = average_of([gate("x", 1), additive_typed])
    assert (result.passed, result.score) == (True, 1.0)


def test_hard_fail_with_configuration_error_is_misconfigured_and_unavailable():
    broken = {"answer_field": "flag", "predicate": {"op": "in", "args": []}, "role": "hard_fail", "name": "hf"}
    for grader in (all_of, average_of):
        result = grader([gate("x", 1), broken])
        assert is_config_error(result)
        assert result.metrics["hard_fail_unavailable"] == ["hf"]
        assert result.metrics["misconfigured_children"] == ["hf"]
        assert result.metrics["hard_fail_triggered"] == []


def test_hard_fail_triggers_on_missing_and_invalid_values():
    missing = hard_fail("absent", True, name="m")
    invalid = {"answer_field": "x", "predicate": {"op": "f1", "expected": ["a"]}, "role": "hard_fail", "name": "i"}
    result = average_of([gate("x", 1), missing, invalid])
    assert (result.passed, result.score) == (False, 0.0)
    assert result.metrics["hard_fail_triggered"] == ["m", "i"]
    assert "configuration_error" not in result.metrics


def test_nested_hard_fail_is_propagated_with_the_child_label():
    inner = typed("all_of", {"children": [gate("x", 1), hard_fail("flag", False, name="hf")]}, name="inner")
    result = average_of([gate("y", "up"), inner])
    assert (result.passed, result.score) == (False, 0.0)
    assert result.metrics["hard_fail_triggered"] == [{"child": "inner", "children": ["hf"]}]
    outer = all_of([gate("y", "up"), typed("average_of", {"children": [gate("y", "up"), inner]}, name="mid")])
    assert outer.metrics["hard_fail_triggered"] == [
        {"child": "mid", "children": [{"child": "inner", "children": ["hf"]}]}
    ]


def test_nested_dict_match_veto_zeroes_average_of_even_when_the_pass_rule_holds():
    dict_child = typed(
        "dict_match",
        {"answer_field": "d", "ground_truth": {"p": gate(None, "up"), "tox": hard_fail(None, True)}},
        name="dm",
    )
    answer = {"x": 1, "d": {"p": "up", "tox": True}}
    result = average_of([gate("x", 1), dict_child], answer=answer, pass_rule="min_passing", min_passing_children=0)
    assert (result.passed, result.score) == (False, 0.0)
    assert result.metrics["hard_fail_triggered"] == [{"child": "dm", "children": ["tox"]}]


# --------------------------------------------------------------------------- system errors


def unhashable_leaf(name):
    return {"answer_field": "x", "name": name, "predicate": {"op": "equals", "arg": 1}, "role": "gate"}


@pytest.mark.parametrize("grader", ["all_of", "average_of"])
@pytest.mark.parametrize("name", [["unhashable"], {"a": 1}])
def test_unhashable_leaf_name_at_top_level_is_a_grader_error(grader, name):
    result = get_grader(grader).evaluate_answer(ANSWER, {"children": [unhashable_leaf(name)]})
    assert (result.passed, result.score, result.score_max) == (False, 0.0, 1.0)
    assert "TypeError" in result.metrics["grader_error"]


def test_unhashable_name_in_a_typed_predicate_leaf_also_crashes():
    result = all_of([typed("predicate_leaf", unhashable_leaf(["n"]))])
    assert "grader_error" in result.metrics


def test_nested_system_error_is_recorded_not_a_configuration_error():
    inner = typed("all_of", {"children": [unhashable_leaf(["u"])]}, name="inner")
    result = all_of([gate("x", 1), inner])
    assert result.passed is False
    assert result.metrics["grader_system_error"] is True
    assert result.metrics["system_error_children"] == ["inner"]
    assert result.metrics["failed_children"] == []  # system-error children are not "failed"
    assert result.metrics["scoring_passed"] == 1
    assert "configuration_error" not in result.metrics


def test_system_error_excluded_from_total_but_kept_in_denominator():
    inner = typed("all_of", {"children": [unhashable_leaf(["u"])]}, name="inner")
    result = average_of([gate("x", 1), inner])
    assert (result.passed, result.score) == (False, 0.0)
    assert result.metrics["scoring_total_score"] == 1.0
    assert result.metrics["score_denominator"] == 2.0


def test_empty_unhashable_name_is_falsy_and_harmless():
    result = all_of([unhashable_leaf([])])
    assert result.passed is True and result.field_scores == {"children[0]": 1.0}


def test_plugin_exception_and_bad_results(temporary_grader):
    class Raising(Grader):
        def evaluate_answer(self, answer, config):  # overrides the safety net on purpose
            raise RuntimeError("boom")

    class NotFinite(Grader):
        def _evaluate(self, answer, config):
            return GraderResult(passed=True, score=float("nan"), score_max=1.0)

    class ZeroCapacity(Grader):
        def _evaluate(self, answer, config):
            return GraderResult(passed=True, score=0.0, score_max=0.0)

    temporary_grader("test_raising", Raising)
    temporary_grader("test_not_finite", NotFinite)
    temporary_grader("test_zero_capacity", ZeroCapacity)

    raising = all_of([gate("x", 1), typed("test_raising", {}, name="r")])
    assert raising.passed is False and raising.metrics["system_error_children"] == ["r"]
    assert "configuration_error" not in raising.metrics

    not_finite = average_of([gate("x", 1), typed("test_not_finite", {}, name="n")])
    assert is_config_error(not_finite) and not_finite.metrics["misconfigured_children"] == ["n"]

    assert all_of([gate("x", 1), typed("test_zero_capacity", {})]).passed is True
    assert is_config_error(average_of([gate("x", 1), typed("test_zero_capacity", {})]))


def test_deep_nesting_returns_a_result():
    def nest(levels, grader):
        config = {"children": [gate("x", 1)]}
        for _ in range(levels - 1):
            config = {"children": [typed(grader, config)]}
        return config

    for grader in ("all_of", "average_of"):
        assert get_grader(grader).evaluate_answer(ANSWER, nest(MAX_NESTING, grader)).passed is True
        too_deep = get_grader(grader).evaluate_answer(ANSWER, nest(MAX_NESTING + 1, grader))
        assert (too_deep.passed, too_deep.score) == (False, 0.0)
        assert too_deep.metrics["grader_system_error"] is True
        very_deep = get_grader(grader).evaluate_answer(ANSWER, nest(5 * MAX_NESTING, grader))
        assert very_deep.passed is False


# --------------------------------------------------------------------------- average_of points


@pytest.mark.parametrize("points", [0, -1, "2", True, None, float("inf"), [1]])
def test_bad_points(points):
    result = average_of([gate("x", 1), gate("y", "up", points=points)])
    assert is_config_error(result) and result.metrics["misconfigured_children"] == ["children[1]"]


def test_points_on_any_hard_fail_child_is_an_error():
    assert is_config_error(average_of([gate("x", 1), hard_fail("flag", True, points=1)]))
    typed_veto = typed("predicate_leaf", hard_fail("flag", True), points=2)
    assert is_config_error(average_of([gate("x", 1), typed_veto]))


def test_points_rescale_typed_children_and_weighted_leaves():
    partial = typed("average_of", {"children": [gate("x", 1), gate("y", "down")]}, points=4, name="nested")
    weighted = {
        "answer_field": "q",
        "predicate": {"op": "weighted_label", "table": {"STRONG": 2, "WEAK": 1}},
        "role": "additive",
        "points": 1.5,
        "name": "wl",
    }
    result = average_of([partial, weighted])
    # nested: 0.5 of 4 = 2; weighted: WEAK is 1/2 of 1.5 = 0.75; (2 + 0.75) / 5.5
    assert result.field_scores == {"nested": 2.0, "wl": 0.75}
    assert result.metrics["scoring_total_score"] == 2.75 and result.metrics["score_denominator"] == 5.5
    assert result.score == pytest.approx(0.5)
    assert result.passed is False  # the nested average_of failed its own "all" rule


def test_negative_child_scores_pull_siblings_down():
    weighted = {
        "answer_field": "q",
        "predicate": {"op": "weighted_label", "table": {"BAD": -1, "GOOD": 2}},
        "role": "additive",
    }
    result = average_of([gate("x", 1), weighted], answer={"x": 1, "q": "BAD"})
    assert result.metrics["scoring_total_score"] == 0.0 and result.metrics["score_denominator"] == 3.0
    assert (result.passed, result.score) == (True, 0.0)
    worse = {**weighted, "predicate": {"op": "weighted_label", "table": {"BAD": -5, "GOOD": 2}}}
    clamped = average_of([gate("x", 1), worse], answer={"x": 1, "q": "BAD"})
    assert clamped.score == 0.0 and clamped.metrics["scoring_total_score"] == -4.0


# --------------------------------------------------------------------------- average_of pass rules


@pytest.mark.parametrize(
    "rule",
    [
        {"pass_rule": None},
        {"pass_rule": "any"},
        {"pass_rule": "all", "min_passing_children": None},
        {"pass_rule": "min_passing"},
        {"pass_rule": "min_passing", "min_passing_children": None},
        {"pass_rule": "min_passing", "min_passing_children": 1.0},
        {"pass_rule": "min_passing", "min_passing_children": True},
        {"pass_rule": "min_passing", "min_passing_children": 1, "score_threshold": None},
        {"pass_rule": "score_threshold"},
        {"pass_rule": "score_threshold", "score_threshold": None},
        {"pass_rule": "score_threshold", "score_threshold": True},
        {"pass_rule": "score_threshold", "score_threshold": -0.5},
        {"pass_rule": "score_threshold", "score_threshold": 1, "min_passing_children": None},
    ],
)
def test_pass_rule_configuration_errors(rule):
    result = average_of([gate("x", 1), gate("y", "up")], **rule)
    assert is_config_error(result)
    assert result.metrics["pass_rule"] == str(rule["pass_rule"])


def test_min_passing_bounds_use_valid_scoring_children_only():
    children = [gate("x", 1), gate("y", "down"), hard_fail("flag", True)]
    at_count = average_of(children, pass_rule="min_passing", min_passing_children=2)
    assert "configuration_error" not in at_count.metrics
    assert (at_count.passed, at_count.score) == (False, 0.5)
    one = average_of(children, pass_rule="min_passing", min_passing_children=1)
    assert (one.passed, one.score) == (True, 0.5)
    assert is_config_error(average_of(children, pass_rule="min_passing", min_passing_children=3))


def test_score_threshold_uses_the_raw_total():
    weighted = {
        "answer_field": "q",
        "predicate": {"op": "weighted_label", "table": {"STRONG": 4, "WEAK": 3}},
        "role": "additive",
    }
    # total 1 + 3 = 4 over 5: passes a threshold of 4 although the normalized score is 0.8
    result = average_of([gate("x", 1), weighted], pass_rule="score_threshold", score_threshold=4)
    assert (result.passed, result.score) == (True, pytest.approx(0.8))
    higher = average_of([gate("x", 1), weighted], pass_rule="score_threshold", score_threshold=4.01)
    assert (higher.passed, higher.score) == (False, pytest.approx(0.8))


def test_configuration_error_order_in_average_of():
    misconfigured = average_of([gate("x", 1, role="bonus")], pass_rule=None)
    assert misconfigured.metrics["configuration_error"].startswith("misconfigured children")
    vetoes_only = average_of([hard_fail("flag", True)], pass_rule=None)
    assert vetoes_only.metrics["configuration_error"] == "no scoring children"
    empty = average_of([])
    assert empty.metrics["configuration_error"] == "no scoring children"


def test_average_of_metrics_and_field_scores():
    result = average_of([gate("x", 1, name="a"), gate("y", "down", name="b"), hard_fail("flag", True, name="h")])
    assert result.metrics == {
        "type": "average_of",
        "pass_rule": "all",
        "scoring_count": 2,
        "scoring_passed": 1,
        "scoring_total_score": 1.0,
        "score_denominator": 2.0,
        "failed_children": ["b"],
        "hard_fail_triggered": [],
    }
    assert result.field_scores == {"a": 1.0, "b": 0.0}
    assert (result.passed, result.score, result.score_max) == (False, 0.5, 1.0)
