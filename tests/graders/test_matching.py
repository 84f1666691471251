"""list_match and dict_match beyond the conformance vectors."""

from __future__ import annotations

import pytest

from rayeval.graders import get_grader
from rayeval.graders.matching import match_key


def eq(arg, role="gate", **extra):
    return {"predicate": {"op": "equals", "arg": arg}, "role": role, **extra}


def weight(table, role="additive", **extra):
    return {"predicate": {"op": "weighted_label", "table": table}, "role": role, **extra}


def row(key, **fields):
    return {"id": key, "fields": fields}


def list_match(items, ground_truth, **config):
    config = {"answer_field": "rows", "match_key": "id", "ground_truth": ground_truth, **config}
    return get_grader("list_match").evaluate_answer({"rows": items}, config)


def dict_match(member, ground_truth, **config):
    config = {"answer_field": "d", "ground_truth": ground_truth, **config}
    return get_grader("dict_match").evaluate_answer({"d": member}, config)


def is_config_error(result):
    return (
        result.passed is False
        and result.score == 0.0
        and result.score_max == 1.0
        and list(result.metrics) == ["configuration_error"]
    )


CAPACITY_ROWS = [row("A", s=weight({"Y": 3})), row("B", s=weight({"Y": 1})), row("C", s=weight({"Y": 2}))]


# --------------------------------------------------------------------------- match keys


def test_match_key_equivalence():
    assert match_key(1, False) == match_key(1.0, False) == match_key(True, False)
    assert match_key("1", False) != match_key(1, False)
    assert match_key({"a": [1], "b": 2}, False) == match_key({"b": 2.0, "a": [True]}, False)
    assert match_key(["a"], False) != match_key("a", False)
    assert match_key([["a", 1]], False) != match_key({"a": 1}, False)
    assert match_key(["B", "A"], True) == match_key(["A", "B"], True)
    assert match_key(["A", "B", "A"], True) == match_key(["A", "A", "B"], True)
    assert match_key(["B", "A", "A"], True) != match_key(["A", "B"], True)
    assert match_key(["A", 1], True) == match_key([True, "A"], True)  # mixed types need no ordering
    assert match_key({"A": 1}, True) != match_key(["A"], True)
    assert match_key("BA", True) != match_key("AB", True)  # only arrays are order-free


def test_bool_tuple_key_matches_numeric_row_key_but_string_does_not():
    ground_truth = [row(1, v=eq("Y", "additive"))]
    assert list_match([{"id": True, "v": "Y"}], ground_truth).score == 1.0
    assert list_match([{"id": "1", "v": "Y"}], ground_truth).passed is False


def test_object_keys_ignore_member_order():
    ground_truth = [row({"chr": "1", "pos": 5}, v=eq("Y", "additive"))]
    assert list_match([{"id": {"pos": 5.0, "chr": "1"}, "v": "Y"}], ground_truth).score == 1.0


def test_sort_normalization_counts_multiplicity():
    ground_truth = [row(["A", "A", "B"], v=eq("Y", "additive"))]
    assert list_match([{"id": ["B", "A", "A"], "v": "Y"}], ground_truth, match_key_normalize="sort").passed
    assert not list_match([{"id": ["A", "B"], "v": "Y"}], ground_truth, match_key_normalize="sort").passed


def test_sort_makes_permuted_ground_truth_keys_duplicates():
    ground_truth = [row(["A", "B"], v=eq("Y", "additive")), row(["B", "A"], v=eq("Y", "additive"))]
    assert is_config_error(list_match([], ground_truth, match_key_normalize="sort"))
    assert "configuration_error" not in list_match([], ground_truth).metrics


def test_numerically_equal_ground_truth_keys_are_duplicates():
    ground_truth = [row(1, v=eq("Y", "additive")), row(True, v=eq("Y", "additive"))]
    assert is_config_error(list_match([], ground_truth))


# --------------------------------------------------------------------------- k, dedupe, denominator


def test_k_denominator_is_the_k_largest_row_capacities():
    one = list_match([{"id": "C", "s": "Y"}], CAPACITY_ROWS, k=1)
    assert one.metrics["additive_score_denominator"] == 3.0 and one.score == pytest.approx(2 / 3)
    all_rows = list_match([{"id": "C", "s": "Y"}], CAPACITY_ROWS)
    assert all_rows.metrics["additive_score_denominator"] == 6.0 and all_rows.score == pytest.approx(1 / 3)
    best = list_match([{"id": "A", "s": "Y"}], CAPACITY_ROWS, k=1)
    assert (best.passed, best.score) == (True, 1.0)


def test_unmatched_duplicate_and_non_object_items_use_up_k_slots():
    items = ["junk", {"id": "A", "s": "Y"}, {"id": "A", "s": "Y"}, {"id": "Z"}, {"id": "B", "s": "Y"}]
    result = list_match(items, CAPACITY_ROWS, k=4)
    assert result.metrics["n_tuples_evaluated"] == 4
    assert result.metrics["additive_score"] == 3.0 and result.metrics["additive_score_denominator"] == 6.0
    assert "B.s" not in result.field_scores and result.field_scores == {"A.s": 3.0}


def test_deduplication_happens_before_truncation():
    items = [{"id": "A", "s": "Y", "g": 1}, {"id": "B", "s": "Y", "g": 1}, {"id": "C", "s": "Y", "g": 2}]
    result = list_match(items, CAPACITY_ROWS, deduplicate_by="g", k=2)
    assert result.metrics["n_tuples_evaluated"] == 2
    assert set(result.field_scores) == {"A.s", "C.s"}
    assert result.metrics["additive_score"] == 5.0 and result.score == pytest.approx(1.0)


def test_deduplication_treats_absent_members_as_one_null_value_and_keeps_non_objects():
    items = [{"id": "B", "s": "Y"}, {"id": "A", "s": "Y"}, 7, {"id": "C", "s": "Y", "g": None}]
    result = list_match(items, CAPACITY_ROWS, deduplicate_by="g")
    assert result.metrics["n_tuples_evaluated"] == 2
    assert result.field_scores == {"B.s": 1.0}


def test_duplicate_tuple_is_ignored_so_the_first_occurrence_counts():
    items = [{"id": "A", "s": "N"}, {"id": "A", "s": "Y"}]
    result = list_match(items, CAPACITY_ROWS)
    assert result.metrics["additive_score"] == 0.0 and result.field_scores == {"A.s": 0.0}
    assert result.passed is True  # one row matched, no veto, defaults


# --------------------------------------------------------------------------- list_match verdicts


def test_gates_only_list_passes_with_zero_score_max():
    ground_truth = [row("a", d=eq("up")), row("b", d=eq("down"))]
    result = list_match([{"id": "a", "d": "wrong"}], ground_truth)
    assert (result.passed, result.score, result.score_max) == (True, 0.0, 0.0)
    assert result.metrics["tuple_pass_count"] == 0


def test_k_rows_without_additive_capacity_give_zero_score_max():
    ground_truth = [row("a", d=eq("up"), s=weight({"Y": 1})), row("b", d=eq("up")), row("c", d=eq("up"))]
    assert list_match([{"id": "b", "d": "up"}], ground_truth, k=1).score_max == 1.0
    assert list_match([{"id": "b", "d": "up"}], ground_truth, k=2).metrics["additive_score_denominator"] == 1.0


def test_veto_zeroes_the_score_and_labels_the_tuple_field():
    ground_truth = [row("a", s=weight({"Y": 1}), toxic=eq(True, "hard_fail"))]
    result = list_match([{"id": "a", "s": "Y", "toxic": True}], ground_truth)
    assert (result.passed, result.score, result.score_max) == (False, 0.0, 1.0)
    assert result.metrics["hard_fail_triggered"] == ["a.toxic"]
    assert result.metrics["additive_score"] == 1.0


def test_negative_additive_scores_are_clamped_only_at_the_end():
    ground_truth = [row("a", s=weight({"BAD": -3, "GOOD": 2})), row("b", s=weight({"BAD": -3, "GOOD": 2}))]
    result = list_match([{"id": "a", "s": "BAD"}, {"id": "b", "s": "GOOD"}], ground_truth)
    assert result.metrics["additive_score"] == -1.0 and result.score == 0.0
    assert result.passed is False  # -1 is below the default additive_score_min of 0
    strict = list_match([{"id": "a", "s": "GOOD"}], ground_truth, additive_score_min=2.5)
    assert (strict.passed, strict.score) == (False, 0.5)


def test_leaf_answer_field_is_validated_but_not_used_for_binding():
    ground_truth = [row("a", v=eq("Y", "additive", answer_field="elsewhere"))]
    assert list_match([{"id": "a", "v": "Y"}], ground_truth).score == 1.0
    bad_path = [row("a", v=eq("Y", "additive", answer_field="$.v[0]"))]
    assert is_config_error(list_match([{"id": "a", "v": "Y"}], bad_path))


def test_list_match_metrics():
    result = list_match([{"id": "A", "s": "Y"}], CAPACITY_ROWS, k=2, tuple_pass_min=1)
    assert result.metrics == {
        "k": 2,
        "tuple_pass_count": 1,
        "tuple_pass_min": 1,
        "additive_score": 3.0,
        "additive_score_min": 0,
        "additive_score_denominator": 5.0,
        "n_tuples_evaluated": 1,
        "hard_fail_triggered": [],
    }
    nothing = list_match([{"id": "Z"}], CAPACITY_ROWS)
    assert nothing.passed is False and nothing.metrics["composite_error"]


@pytest.mark.parametrize("answer", [{"rows": None}, {}, {"rows": "a,b"}, [], "rows", None])
def test_malformed_answers_are_plain_failures(answer):
    config = {"answer_field": "rows", "match_key": "id", "ground_truth": [row("a", d=eq("up"))]}
    result = get_grader("list_match").evaluate_answer(answer, config)
    assert (result.passed, result.score, result.score_max) == (False, 0.0, 1.0)
    assert list(result.metrics) == ["error"]


@pytest.mark.parametrize(
    "config",
    [
        {"k": 0},
        {"k": True},
        {"k": 1.0},
        {"k": -1},
        {"tuple_pass_min": True},
        {"tuple_pass_min": 1.0},
        {"tuple_pass_min": None},
        {"tuple_pass_min": 2, "k": 1},
        {"tuple_pass_min": 4},
        {"additive_score_min": True},
        {"additive_score_min": None},
        {"additive_score_min": "1"},
        {"deduplicate_by": 3},
        {"per_tuple_rule": None},
        {"match_key": None},
        {"answer_field": ["rows"]},
        {"ground_truth": []},
        {"ground_truth": {"a": {}}},
        {"ground_truth": [row("a", d=eq("up", role="bonus"))]},
        {"ground_truth": [row("a", d="up")]},
        {"ground_truth": [{"id": "a", "fields": []}]},
        {"ground_truth": [{"id": "a"}]},
        {"ground_truth": [row("a", d=weight({"Y": 0}))]},
        {"ground_truth": [row("a", d=eq("up", threshold="x", predicate={"op": "f1", "expected": ["a"]}))]},
    ],
)
def test_list_match_configuration_errors(config):
    assert is_config_error(list_match([], **{"ground_truth": CAPACITY_ROWS, **config}))


def test_list_match_accepts_boundary_settings():
    result = list_match(
        [{"id": "A", "s": "Y"}],
        CAPACITY_ROWS,
        k=None,
        deduplicate_by=None,
        tuple_pass_min=3,
        additive_score_min=0.0,
        match_key_normalize="anything",
    )
    assert "configuration_error" not in result.metrics
    assert result.passed is False  # 1 < tuple_pass_min
    assert result.score == 0.5


def test_null_ground_truth_key_is_allowed_and_matches_a_keyless_tuple():
    ground_truth = [row(None, v=eq("Y", "additive")), row("b", v=eq("Y", "additive"))]
    result = list_match([{"v": "Y"}, {"id": None, "v": "N"}], ground_truth)
    assert result.field_scores == {"None.v": 1.0} and result.score == 0.5


def test_non_object_config():
    result = get_grader("list_match").evaluate_answer({"rows": []}, ["answer_field"])
    assert is_config_error(result)


# --------------------------------------------------------------------------- dict_match


def test_gate_capacity_counts_in_the_denominator():
    ground_truth = {"s": weight({"HIGH": 2, "MID": 1}, role="gate"), "t": eq(1)}
    result = dict_match({"s": "HIGH", "t": 1}, ground_truth)
    assert (result.passed, result.score) == (True, 1.0)
    assert result.metrics["score_denominator"] == 3.0 and result.metrics["raw_score"] == 3.0


def test_hard_fail_capacity_is_zero_and_missing_key_fires_no_veto():
    ground_truth = {"bad": eq("yes", "hard_fail"), "t": eq(1)}
    result = dict_match({"t": 1}, ground_truth)
    assert (result.passed, result.score) == (False, 1.0)
    assert result.metrics["score_denominator"] == 1.0
    assert result.metrics["hard_fail_triggered"] == [] and result.metrics["failing_keys"] == ["bad"]
    assert result.field_scores == {"bad": 0.0, "t": 1.0}


def test_all_keys_required_is_inert():
    ground_truth = {"a": eq(1), "b": eq(2)}
    strict = dict_match({"a": 1}, ground_truth, all_keys_required=True)
    lenient = dict_match({"a": 1}, ground_truth, all_keys_required=False)
    assert (strict.passed, strict.score) == (lenient.passed, lenient.score) == (False, 0.5)
    assert lenient.metrics["all_keys_required_ignored"] is True
    assert "all_keys_required_ignored" not in strict.metrics


def test_object_shape_non_object_member_makes_every_field_missing():
    ground_truth = {"g": {"fields": {"d": eq("up"), "toxic": eq(True, "hard_fail")}}}
    result = dict_match({"g": "up"}, ground_truth)
    assert (result.passed, result.score) == (False, 0.0)
    assert result.metrics["hard_fail_triggered"] == ["g.toxic"]
    assert result.field_scores == {"g.d": 0.0, "g.toxic": 0.0}


def test_object_shape_rules():
    ground_truth = {"g": {"fields": {"d": eq("up"), "e": eq("x", "additive"), "toxic": eq(True, "hard_fail")}}}
    member = {"g": {"d": "up", "e": "y", "toxic": False}}
    default_rule = dict_match(member, ground_truth)
    assert (default_rule.passed, default_rule.score) == (True, 0.5)
    strict = dict_match(member, ground_truth, per_entry_rule="all_pass")
    assert (strict.passed, strict.score) == (False, 0.5) and strict.metrics["failing_keys"] == ["g"]
    vetoed = dict_match({"g": {"d": "up", "e": "x", "toxic": True}}, ground_truth, per_entry_rule="all_pass")
    assert (vetoed.passed, vetoed.score) == (False, 0.0) and vetoed.metrics["failing_keys"] == ["g"]


def test_scalar_additive_boolean_miss_fails_the_entry():
    result = dict_match({"a": 1, "b": "no"}, {"a": eq(1), "b": eq("yes", "additive")})
    assert (result.passed, result.score) == (False, 0.5)
    assert result.metrics["entries_passed"] == 1 and result.metrics["failing_keys"] == ["b"]


def test_extra_answer_keys_are_ignored():
    result = dict_match({"a": 1, "zzz": 2}, {"a": eq(1)})
    assert (result.passed, result.score) == (True, 1.0)
    assert result.metrics == {
        "entries_total": 1,
        "entries_passed": 1,
        "raw_score": 1.0,
        "score_denominator": 1.0,
        "hard_fail_triggered": [],
        "failing_keys": [],
    }


@pytest.mark.parametrize("answer", [{"d": None}, {"d": [1]}, {}, "d", None])
def test_dict_match_malformed_answers(answer):
    config = {"answer_field": "d", "ground_truth": {"a": eq(1)}}
    result = get_grader("dict_match").evaluate_answer(answer, config)
    assert (result.passed, result.score, result.score_max) == (False, 0.0, 1.0)
    assert list(result.metrics) == ["error"]


@pytest.mark.parametrize(
    "config",
    [
        {"answer_field": None},
        {"answer_field": 3},
        {"per_entry_rule": None},
        {"per_entry_rule": 1},
        {"all_keys_required": None},
        {"all_keys_required": 1},
        {"ground_truth": None},
        {"ground_truth": {"a": "x"}},
        {"ground_truth": {"a": {"role": "gate"}}},
        {"ground_truth": {"a": {"fields": {"f": "x"}}}},
        {"ground_truth": {"a": {"fields": ["f"]}}},
        {"ground_truth": {"a": {"fields": {"f": eq(1, "hard_fail")}}}},
        {"ground_truth": {"a": eq(1, answer_field="")}},
        {"ground_truth": {"a": weight({"A": 0}, role="gate")}},
    ],
)
def test_dict_match_configuration_errors(config):
    full = {"answer_field": "d", "ground_truth": {"a": eq(1)}, **config}
    assert is_config_error(get_grader("dict_match").evaluate_answer({"d": {"a": 1}}, full))


def test_dict_match_non_object_config():
    assert is_config_error(get_grader("dict_match").evaluate_answer({"d": {}}, "config"))
