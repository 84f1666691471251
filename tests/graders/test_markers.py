"""marker_gene_precision_recall and marker_gene_separation beyond the conformance vectors."""

from __future__ import annotations

import pytest

from rayeval.graders import get_grader

PER_CELLTYPE = {"T": ["CD3E", "CD4"], "B": ["MS4A1", "CD19"], "NK": ["NKG7", "GNLY"]}
CELLTYPE_KEYS = {
    "pass",
    "recall",
    "num_predicted",
    "num_unique_predicted",
    "expected_count",
    "cardinality_pass",
    "num_canonical",
    "true_positives",
    "false_negatives",
}


def markers(answer, config):
    return get_grader("marker_gene_precision_recall").evaluate_answer(answer, config)


def separation(answer, config):
    return get_grader("marker_gene_separation").evaluate_answer(answer, config)


def is_config_error(result) -> bool:
    return list(result.metrics) == ["configuration_error"] and result.passed is False and result.score == 0.0


# ---- marker_gene_precision_recall: config --------------------------------------------------


@pytest.mark.parametrize("config", [None, ["CD3E"], "CD3E"])
def test_non_dict_config_is_a_configuration_error(config) -> None:
    assert is_config_error(markers({"top_marker_genes": ["CD3E"]}, config))


@pytest.mark.parametrize("expected_count", [4.0, "4", True, -1])
def test_expected_count_rejections(expected_count) -> None:
    result = markers({"top_marker_genes": ["CD3E"]}, {"canonical_markers": ["CD3E"], "expected_count": expected_count})
    assert is_config_error(result)


@pytest.mark.parametrize("required", [1, 2, None, True])
def test_min_celltypes_passing_with_list_canonical_is_a_configuration_error(required) -> None:
    config = {"canonical_markers": ["CD3E", "CD4"], "scoring": {"pass_thresholds": {"min_celltypes_passing": required}}}
    assert is_config_error(markers({"top_marker_genes": ["CD3E", "CD4"]}, config))


@pytest.mark.parametrize("required", [4, 1.0, True, None, "2"])
def test_min_celltypes_passing_must_be_an_int_within_the_cell_type_count(required) -> None:
    config = {"canonical_markers": PER_CELLTYPE, "scoring": {"pass_thresholds": {"min_celltypes_passing": required}}}
    assert is_config_error(markers({"top_marker_genes": {}}, config))


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"ground_truth_labels": None},
        {"canonical_markers": {}},
        {"canonical_markers": {" ": ["CD3E"]}},
        {"canonical_markers": {"T": []}},
        {"canonical_markers": {"T": "CD3E"}},
        {"canonical_markers": {"T": ["CD3E", "  "]}},
        {"canonical_markers": "CD3E"},
        {"canonical_markers": ["CD3E"], "scoring": None},
        {"canonical_markers": ["CD3E"], "scoring": {"pass_thresholds": None}},
        {"canonical_markers": ["CD3E"], "scoring": {"pass_thresholds": {"precision_at_k": None}}},
        {"canonical_markers": ["CD3E"], "scoring": {"pass_thresholds": {"min_recall_per_celltype": 1.5}}},
        {"canonical_markers": ["CD3E"], "answer_field": None},
    ],
)
def test_config_errors_precede_answer_problems(config) -> None:
    assert is_config_error(markers("not a dict", config))


# ---- marker_gene_precision_recall: flat mode -------------------------------------------------


def test_non_dict_answer_is_an_agent_failure() -> None:
    result = markers(["CD3E"], {"canonical_markers": ["CD3E"]})
    assert result.passed is False and result.metrics == {} and result.agent_answer is None


def test_duplicates_dilute_precision_without_expected_count() -> None:
    result = markers(
        {"top_marker_genes": ["A", "A", "B", "B"]},
        {"canonical_markers": ["A", "B"], "scoring": {"pass_thresholds": {"precision_at_k": 0.5}}},
    )
    assert result.passed is True
    assert result.metrics["k"] == 4
    assert result.metrics["precision_at_k"] == 0.5
    assert result.metrics["recall_at_k"] == 1.0
    assert result.metrics["num_true_positives"] == 2
    assert result.metrics["num_false_positives"] == 0
    assert result.metrics["submitted_count"] == 4 and result.metrics["unique_count"] == 2


def test_expected_count_truncates_scored_genes_and_reports_casing() -> None:
    result = markers(
        {"top_marker_genes": ["cd3e", "X1", "CD4"]},
        {"canonical_markers": ["CD3E", "CD4", "CD8A"], "expected_count": 2},
    )
    assert result.passed is False
    assert result.metrics == {
        "k": 2,
        "precision_at_k": 0.5,
        "recall_at_k": 1 / 3,
        "precision_threshold": 0.60,
        "recall_threshold": 0.50,
        "true_positives": ["cd3e"],
        "false_positives": ["X1"],
        "false_negatives": ["CD4", "CD8A"],
        "num_true_positives": 1,
        "num_false_positives": 1,
        "num_false_negatives": 2,
        "num_canonical_markers": 3,
        "submitted_count": 3,
        "unique_count": 3,
        "expected_count": 2,
        "cardinality_pass": False,
        "precision_pass": False,
        "recall_pass": False,
        "answer_field_used": "top_marker_genes",
    }


def test_per_celltype_canonical_with_matching_answer_field_scores_one_cell_type_flat() -> None:
    result = markers({"T": ["cd3e", "CD4"]}, {"canonical_markers": PER_CELLTYPE, "answer_field": "T"})
    assert result.passed is True
    assert result.metrics["num_canonical_markers"] == 2
    assert result.metrics["answer_field_used"] == "T"
    assert result.metrics["precision_at_k"] == 1.0


def test_per_celltype_canonical_against_flat_list_fails_without_matching_key() -> None:
    result = markers({"top_marker_genes": ["CD3E", "CD4"]}, {"canonical_markers": PER_CELLTYPE})
    assert result.passed is False and result.metrics == {}


def test_ground_truth_labels_are_used_only_when_canonical_markers_is_absent() -> None:
    config = {"ground_truth_labels": ["X"], "canonical_markers": ["CD3E"]}
    assert markers({"top_marker_genes": ["CD3E"]}, config).passed is True


@pytest.mark.parametrize("genes", [["CD3E", None], ["CD3E", 3], ["CD3E", ""], None, {"CD3E": 1}])
def test_malformed_flat_answer_is_an_agent_failure(genes) -> None:
    result = markers({"top_marker_genes": genes}, {"canonical_markers": ["CD3E"]})
    assert result.passed is False and result.score == 0.0
    assert "configuration_error" not in result.metrics


# ---- marker_gene_precision_recall: per-cell-type mode ---------------------------------------


def test_missing_and_malformed_cell_types_fail_only_themselves() -> None:
    answer = {"top_marker_genes": {"T": ["CD3E", "CD4"], "B": ["CD19", " "], "Extra": ["X"]}}
    result = markers(answer, {"canonical_markers": PER_CELLTYPE})
    per = result.metrics["per_celltype"]
    assert result.passed is False
    assert result.metrics["celltypes_passing"] == 1
    assert result.metrics["total_celltypes"] == 3
    assert result.metrics["min_celltypes_passing"] == 3
    assert result.metrics["min_recall_per_celltype"] == 0.5
    assert result.metrics["answer_field_used"] == "top_marker_genes"
    assert set(per) == {"T", "B", "NK"}
    assert set(per["T"]) == CELLTYPE_KEYS and per["T"]["pass"] is True and per["T"]["recall"] == 1.0
    assert set(per["B"]) == {"pass", "recall", "error"} and per["B"]["pass"] is False and per["B"]["recall"] == 0.0
    assert per["NK"]["pass"] is False and per["NK"]["num_predicted"] == 0
    assert per["NK"]["false_negatives"] == ["GNLY", "NKG7"]


@pytest.mark.parametrize("value", [None, "CD19", [1], [None], {"CD19": 1}])
def test_malformed_cell_type_entry_carries_an_error(value) -> None:
    answer = {"top_marker_genes": {"T": ["CD3E"], "B": value, "NK": ["NKG7"]}}
    config = {"canonical_markers": PER_CELLTYPE, "scoring": {"pass_thresholds": {"min_celltypes_passing": 2}}}
    result = markers(answer, config)
    assert result.passed is True
    assert result.metrics["per_celltype"]["B"]["pass"] is False
    assert "error" in result.metrics["per_celltype"]["B"]


def test_missing_cell_types_pass_with_zero_min_recall() -> None:
    config = {"canonical_markers": PER_CELLTYPE, "scoring": {"pass_thresholds": {"min_recall_per_celltype": 0}}}
    result = markers({"top_marker_genes": {}}, config)
    assert result.passed is True and result.metrics["celltypes_passing"] == 3


def test_expected_count_is_checked_and_truncates_per_cell_type() -> None:
    answer = {"top_marker_genes": {"T": ["X", "CD3E"], "B": ["X", "CD19", "MS4A1"], "NK": ["NKG7", "Y"]}}
    config = {"canonical_markers": PER_CELLTYPE, "expected_count": 2}
    per = markers(answer, config).metrics["per_celltype"]
    assert per["T"]["recall"] == 0.5 and per["T"]["pass"] is True and per["T"]["true_positives"] == ["CD3E"]
    assert per["B"]["cardinality_pass"] is False and per["B"]["pass"] is False
    assert per["B"]["recall"] == 0.5 and per["B"]["false_negatives"] == ["MS4A1"]  # third gene not scored
    assert per["NK"]["expected_count"] == 2 and per["NK"]["pass"] is True


# ---- marker_gene_separation ----------------------------------------------------------------

STATS = [{"gene": "A", "auroc": 0.95}, {"gene": "a", "auroc": 1}, {"gene": "C", "auroc": 0.5, "p": 0.01}]


def test_separation_metrics_and_case_sensitive_gene_names() -> None:
    result = separation({"mean_auroc": 0.9, "per_gene_stats": STATS}, {})
    assert result.passed is False  # 2/3 high < 0.70
    assert result.metrics == {
        "num_genes": 3,
        "mean_auroc_agent": 0.9,
        "mean_auroc_computed": (0.95 + 1.0 + 0.5) / 3,
        "mean_auroc_threshold": 0.85,
        "fraction_high": 2 / 3,
        "fraction_high_threshold": 0.70,
        "per_gene_cutoff": 0.80,
        "num_high_auroc_genes": 2,
        "num_low_auroc_genes": 1,
        "high_auroc_genes": ["A", "a"],
        "low_auroc_genes": ["C"],
        "mean_auroc_pass": True,
        "fraction_high_pass": False,
        "per_gene_aurocs": {"A": 0.95, "a": 1.0, "C": 0.5},
    }
    assert type(result.metrics["per_gene_aurocs"]["a"]) is float


def test_separation_trusts_reported_mean_over_computed() -> None:
    stats = [{"gene": "A", "auroc": 0.5}, {"gene": "B", "auroc": 0.5}]
    config = {"scoring": {"pass_thresholds": {"fraction_high": 0}}}
    assert separation({"mean_auroc": 0.9, "per_gene_stats": stats}, config).passed is True


@pytest.mark.parametrize(
    "answer",
    [
        None,
        {"mean_auroc": True, "per_gene_stats": STATS},
        {"mean_auroc": "0.9", "per_gene_stats": STATS},
        {"mean_auroc": 0.9, "per_gene_stats": []},
        {"mean_auroc": 0.9, "per_gene_stats": [{"gene": "A", "auroc": 0.9}, {"gene": "A", "auroc": 0.8}]},
        {"mean_auroc": 0.9, "per_gene_stats": [{"gene": "A"}]},
        {"mean_auroc": 0.9, "per_gene_stats": [{"gene": "A", "auroc": True}]},
        {"mean_auroc": 0.9, "per_gene_stats": [{"gene": "A", "auroc": 10**400}]},
    ],
)
def test_separation_agent_failures(answer) -> None:
    result = separation(answer, {})
    assert result.passed is False and result.score == 0.0
    assert result.metrics == {}


@pytest.mark.parametrize(
    "config",
    [
        None,
        {"scoring": None},
        {"scoring": {"pass_thresholds": None}},
        {"scoring": {"pass_thresholds": {"mean_auroc": None}}},
        {"scoring": {"pass_thresholds": {"fraction_high": 1.01}}},
    ],
)
def test_separation_config_errors(config) -> None:
    assert is_config_error(separation({"mean_auroc": 0.9, "per_gene_stats": STATS}, config))
