"""The predicate language and the root predicate_leaf grader, beyond the conformance vectors."""

from __future__ import annotations

import math

import pytest

from rayeval.graders import get_grader
from rayeval.graders.predicate import (
    PredicateEvaluationError,
    evaluate,
    parse_path,
    predicate_error,
    resolve_path,
    score_capacity,
)


def nots(count: int, inner: dict) -> dict:
    node = inner
    for _ in range(count):
        node = {"op": "not", "arg": node}
    return node


def leaf(answer, **config):
    return get_grader("predicate_leaf").evaluate_answer(answer, config)


EQ1 = {"op": "equals", "arg": 1}


# --------------------------------------------------------------------------- static validation


def test_depth_sixteen_nots_is_valid_seventeen_is_not():
    assert predicate_error(nots(16, EQ1)) is None
    assert "deeper than 16" in predicate_error(nots(17, EQ1))
    # 16 nots around equals(1): an even number of negations keeps the verdict.
    assert leaf({"x": 1}, predicate=nots(16, EQ1), role="gate", answer_field="x").passed is True
    deep = leaf({"x": 1}, predicate=nots(17, EQ1), role="gate", answer_field="x")
    assert deep.metrics["configuration_error"] and deep.score_max == 1.0


def test_depth_counts_through_every_combinator():
    body = nots(14, EQ1)  # depth 0 any, 1 and, 2..15 not, 16 equals
    assert predicate_error({"op": "any", "path": "$", "body": {"op": "and", "args": [body]}}) is None
    assert predicate_error({"op": "any", "path": "$", "body": {"op": "and", "args": [nots(1, body)]}})


@pytest.mark.parametrize(
    "node",
    [
        None,
        "equals",
        [EQ1],
        {"arg": 1},
        {"op": "gt", "arg": 1},
        {"op": "Equals", "arg": 1},
        {"op": ["equals"], "arg": 1},
        {"op": "in", "args": []},
        {"op": "in", "args": "ab"},
        {"op": "unordered_set_eq", "expected": [["a"]]},
        {"op": "unordered_set_eq", "expected": [{"a": 1}]},
        {"op": "or", "args": [EQ1, "not-a-node"]},
        {"op": "not"},
        {"op": "field", "name": 3, "body": EQ1},
        {"op": "field", "name": "a"},
        {"op": "any", "path": "$", "body": {"op": "bogus"}},
        {"op": "jaccard", "possible_sets": []},
        {"op": "jaccard", "possible_sets": [["a", ["b"]]]},
        {"op": "jaccard", "possible_sets": [3]},
        {"op": "jaccard_ge", "possible_sets": [["a"]], "threshold": True},
        {"op": "jaccard_ge", "possible_sets": [["a"]], "threshold": -0.1},
        {"op": "jaccard_ge", "possible_sets": [["a"]], "threshold": "0.5"},
        {"op": "f1", "expected": "a"},
        {"op": "weighted_label", "table": {"A": True}},
        {"op": "weighted_label", "table": {"A": "1"}},
        {"op": "weighted_label", "table": {"A": 1}, "default": None},
        {"op": "weighted_label", "table": {"A": 1}, "default": False},
        {"op": "weighted_label", "table": {"A": 10**400}},
    ],
)
def test_invalid_predicates_are_reported_not_raised(node):
    assert isinstance(predicate_error(node), str)


@pytest.mark.parametrize(
    "node",
    [
        {"op": "equals", "arg": None, "extra": {"ignored": True}},
        {"op": "in", "args": [[1], {"a": 1}, None]},
        {"op": "unordered_set_eq", "expected": []},
        {"op": "jaccard", "possible_sets": ["solo", [], [1, True, None]]},
        {"op": "jaccard_ge", "possible_sets": [["a"]], "threshold": 0},
        {"op": "jaccard_ge", "possible_sets": [["a"]], "threshold": 1},
        {"op": "weighted_label", "table": {}},
        {"op": "weighted_label", "table": {"A": -2.5}, "default": 0.5},
    ],
)
def test_valid_predicates(node):
    assert predicate_error(node) is None


# --------------------------------------------------------------------------- JSONPath subset


@pytest.mark.parametrize(
    ("path", "tokens"),
    [("$", ()), ("$.a", ("a",)), ("$[*]", (None,)), ("$.a_1[*].B2", ("a_1", None, "B2")), ("$[*][*]", (None, None))],
)
def test_valid_paths(path, tokens):
    assert parse_path(path) == tokens


@pytest.mark.parametrize(
    "path", ["", "a", ".a", "$[0]", "$..a", "$['a']", "$.x-y", "$.0", "$.", "$ ", "$.a\n", "$.é", "$[*", "$.a.*"]
)
def test_invalid_paths(path):
    assert parse_path(path) is None


def test_path_resolution_drops_wrong_shapes_and_flattens_one_level():
    root = {"items": [{"name": "a"}, {"nm": "b"}, "str", [{"name": "nested"}], {"name": None}]}
    assert resolve_path(parse_path("$.items[*].name"), root) == ["a", None]
    assert resolve_path(parse_path("$.items[*]"), root)[3] == [{"name": "nested"}]
    assert resolve_path(parse_path("$[*]"), {"a": 1}) == []
    assert resolve_path(parse_path("$"), 7) == [7]


# --------------------------------------------------------------------------- evaluation


@pytest.mark.parametrize(
    ("arg", "value", "expected"),
    [
        (5, " 5 ", True),
        (1000, "1e3", True),
        (1000, "1_000", True),
        (0.5, ".5", True),
        (5, "nan", False),
        (5, "-inf", False),
        (5, "", False),
        (True, "1", False),
        (True, 1.0, True),
        (False, 0, True),
        (0, False, True),
        ("5", 5.0, False),
        (None, "null", False),
        ([1, 2], [1.0, True + 1], True),
        ([1, 2], [2, 1], False),
        ({"a": [1]}, {"a": [True]}, True),
    ],
)
def test_equals_semantics(arg, value, expected):
    assert evaluate({"op": "equals", "arg": arg}, value) is expected


@pytest.mark.parametrize(
    ("args", "value", "expected"),
    [
        ([1, 2, 3], " 3 ", True),
        (["3"], "3.0", False),
        ([True], "1", False),
        ([1], True, True),
        (["a", 2.5], "2.50", True),
        ([[1.0]], [1], True),
        ([{"k": 1}], {"k": 1.0}, True),
        ([None], "None", False),
    ],
)
def test_in_semantics(args, value, expected):
    assert evaluate({"op": "in", "args": args}, value) is expected


@pytest.mark.parametrize("value", [3, 2.5, True, None, {"a": 1}, [["a"]], [{"a": 1}]])
def test_set_conversion_errors(value):
    with pytest.raises(PredicateEvaluationError):
        evaluate({"op": "unordered_set_eq", "expected": ["a"]}, value)
    with pytest.raises(PredicateEvaluationError):
        evaluate({"op": "f1", "expected": ["a"]}, value)
    with pytest.raises(PredicateEvaluationError):
        evaluate({"op": "jaccard", "possible_sets": ["a"]}, value)


def test_sets_merge_numeric_equivalents():
    assert evaluate({"op": "unordered_set_eq", "expected": [1, 0]}, [True, 1.0, False]) is True
    assert evaluate({"op": "jaccard", "possible_sets": [[1, 2]]}, [1.0, True]) == 0.5


def test_and_or_short_circuit_past_an_erroring_arg():
    bad = {"op": "unordered_set_eq", "expected": ["a"]}  # raises on a number
    assert evaluate({"op": "or", "args": [EQ1, bad]}, 1) is True
    assert evaluate({"op": "and", "args": [{"op": "equals", "arg": 2}, bad]}, 1) is False
    with pytest.raises(PredicateEvaluationError):
        evaluate({"op": "and", "args": [EQ1, bad]}, 1)


def test_quantifiers_are_never_vacuously_true():
    for op in ("any", "every", "none"):
        assert evaluate({"op": op, "path": "$[*]", "body": EQ1}, []) is False
        assert evaluate({"op": op, "path": "$.missing[*]", "body": EQ1}, {}) is False
    assert evaluate({"op": "every", "path": "$[*]", "body": EQ1}, [1, 1.0, True]) is True
    assert evaluate({"op": "none", "path": "$[*]", "body": EQ1}, [2, 3]) is True


def test_scalar_ops_nested_under_boolean_ops_use_truthiness():
    weighted = {"op": "weighted_label", "table": {"BAD": -1}}
    assert evaluate({"op": "and", "args": [weighted]}, "BAD") is True
    assert evaluate({"op": "and", "args": [weighted]}, "OTHER") is False
    half = {"op": "field", "name": "s", "body": {"op": "f1", "expected": ["a", "b"]}}
    assert evaluate(half, {"s": ["a"]}) == pytest.approx(2 / 3)
    assert evaluate(half, {"t": ["a"]}) is False
    assert evaluate(half, ["a"]) is False


def test_f1_and_jaccard_edge_cases():
    assert evaluate({"op": "f1", "expected": []}, []) == 1.0
    assert evaluate({"op": "f1", "expected": []}, ["a"]) == 0.0
    assert evaluate({"op": "f1", "expected": ["a"]}, []) == 0.0
    assert evaluate({"op": "f1", "expected": ["a"]}, ["b"]) == 0.0
    assert evaluate({"op": "f1", "expected": ["a", "b", "c", "d"]}, ["a", "x"]) == pytest.approx(1 / 3)
    assert evaluate({"op": "jaccard", "possible_sets": [[]]}, []) == 1.0
    assert evaluate({"op": "jaccard_ge", "possible_sets": ["a", ["a", "b"]], "threshold": 1}, "a") is True


def test_weighted_label_lookup_is_exact_and_string_only():
    node = {"op": "weighted_label", "table": {"1": 2, "True": 3, "A": 4}, "default": -0.5}
    assert evaluate(node, "A") == 4.0
    assert evaluate(node, "a") == -0.5
    assert evaluate(node, 1) == -0.5
    assert evaluate(node, True) == -0.5
    assert evaluate(node, None) == -0.5
    assert evaluate({"op": "weighted_label", "table": {}}, "A") == 0.0
    with pytest.raises(PredicateEvaluationError):
        evaluate(node, {"A": 1})


# --------------------------------------------------------------------------- capacity (2.3)


@pytest.mark.parametrize(
    ("predicate", "capacity"),
    [
        ({"op": "weighted_label", "table": {"A": 1}, "default": 3}, 3.0),
        ({"op": "weighted_label", "table": {"A": 0, "B": -1}}, 0.0),
        ({"op": "weighted_label", "table": [["A", 2]]}, 0.0),
        ({"op": "weighted_label", "table": [["A", 2]], "default": 0.5}, 0.5),
        ({"op": "weighted_label", "table": {"A": True, "B": 2}}, 2.0),
        ({"op": "weighted_label", "table": {"A": True}}, 0.0),
        ({"op": "weighted_label", "table": {"A": 10**400, "B": 1}, "default": None}, 1.0),
        ({"op": "not", "arg": {"op": "weighted_label", "table": {"A": 5}}}, 1.0),
        ({"op": "f1", "expected": ["a"]}, 1.0),
        ({"op": "bogus"}, 1.0),
        (None, 1.0),
        ("weighted_label", 1.0),
    ],
)
def test_score_capacity(predicate, capacity):
    assert score_capacity(predicate) == capacity


# --------------------------------------------------------------------------- root predicate_leaf


def test_non_object_config_is_a_configuration_error_with_score_max_one():
    for config in ([], "x", None, 3):
        result = get_grader("predicate_leaf").evaluate_answer({"x": 1}, config)
        assert result.passed is False and result.score == 0.0 and result.score_max == 1.0
        assert result.metrics["configuration_error"]


def test_non_object_answers():
    assert leaf(5, predicate={"op": "equals", "arg": 5}, role="gate").passed is True
    missing = leaf(5, predicate={"op": "equals", "arg": 5}, role="gate", answer_field="x")
    assert missing.passed is False and missing.metrics["missing_answer_field"] is True
    assert "configuration_error" not in missing.metrics
    collected = leaf(
        [{"g": "A"}, {"g": "B"}],
        predicate={"op": "unordered_set_eq", "expected": ["A", "B"]},
        role="gate",
        answer_field="$[*].g",
    )
    assert collected.passed is True


def test_configuration_errors_keep_the_predicate_capacity():
    strong = {"op": "weighted_label", "table": {"STRONG": 2}}
    additive = leaf({"x": "STRONG"}, predicate=strong, role="additive", answer_field="x")
    assert additive.metrics["configuration_error"] and additive.score_max == 2.0 and additive.score == 0.0
    mixed = leaf({"x": "B"}, predicate={"op": "weighted_label", "table": {"A": True, "B": 2}}, role="gate")
    assert mixed.metrics["configuration_error"] and mixed.score_max == 2.0
    no_role = leaf({"x": "STRONG"}, predicate=strong, answer_field="x")
    assert no_role.metrics["configuration_error"] and no_role.score_max == 2.0
    bad_field = leaf({"x": "STRONG"}, predicate=strong, role="gate", answer_field="")
    assert bad_field.metrics["configuration_error"] and bad_field.score_max == 2.0
    zero = leaf({"x": "A"}, predicate={"op": "weighted_label", "table": {"A": 0}}, role="gate")
    assert "no positive score capacity" in zero.metrics["configuration_error"] and zero.score_max == 0.0


@pytest.mark.parametrize("answer_field", ["", 5, ["x"], {"x": 1}, True, "$x", "$.a[0]"])
def test_bad_answer_field_is_a_configuration_error(answer_field):
    result = leaf({"x": 1}, predicate=EQ1, role="gate", answer_field=answer_field)
    assert result.metrics["configuration_error"]


@pytest.mark.parametrize("threshold", [True, "0.5", None, -0.01, float("inf"), [0.5]])
def test_scalar_threshold_validation(threshold):
    result = leaf(
        {"x": ["a"]}, predicate={"op": "f1", "expected": ["a"]}, role="gate", answer_field="x", threshold=threshold
    )
    assert result.metrics["configuration_error"]


def test_scalar_threshold_above_one_is_allowed_but_unreachable_for_f1():
    result = leaf({"x": ["a"]}, predicate={"op": "f1", "expected": ["a"]}, role="gate", answer_field="x", threshold=1.5)
    assert "configuration_error" not in result.metrics
    assert result.passed is False and result.score == 1.0


def test_boolean_op_ignores_any_threshold():
    result = leaf({"x": 1}, predicate=EQ1, role="gate", answer_field="x", threshold={"weird": []})
    assert result.passed is True and result.metrics["threshold"] is None


def test_role_table_at_the_root():
    risk = {"op": "weighted_label", "table": {"HIGH": 1}}
    untriggered = leaf({"r": "LOW"}, predicate=risk, role="hard_fail", answer_field="r")
    assert (untriggered.passed, untriggered.score, untriggered.score_max) == (True, 0.0, 1.0)
    f1 = {"op": "f1", "expected": ["a", "b", "c"]}
    triggered = leaf({"z": ["a", "b"]}, predicate=f1, role="hard_fail", answer_field="z", threshold=0.5)
    assert triggered.passed is False and triggered.score == pytest.approx(0.8)
    clean = leaf({"x": 2}, predicate=EQ1, role="hard_fail", answer_field="x")
    assert (clean.passed, clean.score) == (True, 1.0)
    negative = {"op": "weighted_label", "table": {"BAD": -1, "GOOD": 1}}
    gate = leaf({"q": "BAD"}, predicate=negative, role="gate", answer_field="q", threshold=0)
    assert (gate.passed, gate.score, gate.score_max) == (False, -1.0, 1.0)
    assert gate.normalized_score() == 0.0


def test_weak_label_passes_default_threshold_below_capacity():
    table = {"op": "weighted_label", "table": {"STRONG": 2, "WEAK": 1}}
    result = leaf({"q": "WEAK"}, predicate=table, role="gate", answer_field="q")
    assert (result.passed, result.score, result.score_max) == (True, 1.0, 2.0)
    assert result.normalized_score() == 0.5


def test_missing_versus_null_at_the_root():
    not_five = {"op": "not", "arg": {"op": "equals", "arg": 5}}
    absent = leaf({"y": 1}, predicate=not_five, role="hard_fail", answer_field="x")
    assert absent.passed is False and absent.score == 0.0  # fails closed, even as a veto
    assert absent.metrics == {
        "op": "not",
        "role": "hard_fail",
        "answer_field": "x",
        "name": None,
        "missing_answer_field": True,
    }
    present = leaf({"x": None}, predicate=not_five, role="gate", answer_field="x")
    assert present.passed is True
    wildcard = leaf({}, predicate={"op": "equals", "arg": []}, role="gate", answer_field="$.rows[*]")
    assert wildcard.passed is True


def test_success_and_invalid_answer_metrics():
    result = leaf({"a.b": 1}, predicate=EQ1, role="gate", answer_field="a.b", name="dotted")
    assert result.metrics == {
        "op": "equals",
        "role": "gate",
        "raw_result": True,
        "is_scalar": False,
        "threshold": None,
        "answer_field": "a.b",
        "name": "dotted",
        "score_max": 1.0,
    }
    assert result.field_scores == {"a.b": 1.0}
    whole = leaf(
        {"s": ["a"]}, predicate={"op": "field", "name": "s", "body": {"op": "f1", "expected": ["a"]}}, role="gate"
    )
    assert whole.field_scores == {"<root>": 1.0} and whole.metrics["raw_result"] == 1.0
    invalid = leaf({"x": 3}, predicate={"op": "f1", "expected": ["a"]}, role="gate", answer_field="x", name="n")
    assert set(invalid.metrics) == {"invalid_answer", "name"} and invalid.metrics["name"] == "n"
    assert invalid.passed is False and invalid.score == 0.0 and "configuration_error" not in invalid.metrics


def test_root_leaf_tolerates_unhashable_name():
    result = leaf({"x": 1}, predicate=EQ1, role="gate", answer_field="x", name=["not", "hashable"])
    assert result.passed is True and result.metrics["name"] == ["not", "hashable"]
    assert "grader_error" not in result.metrics


def test_scores_are_plain_floats():
    result = leaf({"q": "A"}, predicate={"op": "weighted_label", "table": {"A": 3}}, role="gate", answer_field="q")
    assert isinstance(result.score, float) and result.score == 3.0
    assert math.isclose(result.normalized_score(), 1.0)
