"""Marker-gene graders: overlap with canonical markers, and reported AUROC separation.

Gene names match case-insensitively (Unicode lower) but are never trimmed, so
``" CD3E"`` is a different gene from ``"CD3E"``, as in the reference.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._common import (
    InvalidConfig,
    RejectedAnswer,
    binary_result,
    cardinality_holds,
    is_nonblank_str,
    is_number_in,
    missing_field,
    read_answer_field,
    read_expected_count,
    read_object,
    read_thresholds,
    read_thresholds_at,
    required_member,
)
from .base import Grader
from .registry import register_grader
from .result import GraderResult

DEFAULT_ANSWER_FIELD = "top_marker_genes"
PRECISION_RECALL_THRESHOLDS = (
    ("precision_at_k", 0.60, 0.0, 1.0),
    ("recall_at_k", 0.50, 0.0, 1.0),
    ("min_recall_per_celltype", None, 0.0, 1.0),  # falls back to recall_at_k
)
SEPARATION_THRESHOLDS = (
    ("mean_auroc", 0.85, 0.0, 1.0),
    ("fraction_high", 0.70, 0.0, 1.0),
    ("per_gene_cutoff", 0.80, 0.0, 1.0),
)


def _are_gene_names(items: list) -> bool:
    return all(is_nonblank_str(gene) for gene in items)


def _check_canonical(canonical: Any) -> None:
    """InvalidConfig when the canonical markers (flat list or per-cell-type object) are unusable."""
    if isinstance(canonical, list):
        if canonical and _are_gene_names(canonical):
            return
        raise InvalidConfig("canonical_markers must be a non-empty list of non-blank gene names")
    if not isinstance(canonical, dict):
        raise InvalidConfig(f"canonical_markers must be a list or an object, got {type(canonical).__name__}")
    if not canonical:
        raise InvalidConfig("canonical_markers must not be an empty object")
    for cell_type, genes in canonical.items():
        if not is_nonblank_str(cell_type):
            raise InvalidConfig(f"canonical_markers cell type {cell_type!r} is not a non-blank string")
        if not isinstance(genes, list) or not genes or not _are_gene_names(genes):
            raise InvalidConfig(f"canonical_markers[{cell_type!r}] must be a non-empty list of non-blank gene names")


def _by_lowercase(genes: list[str]) -> dict[str, str]:
    """Lower-cased name -> first spelling seen, so reports show the casing people wrote."""
    spelling: dict[str, str] = {}
    for gene in genes:
        spelling.setdefault(gene.lower(), gene)
    return spelling


def _required_celltypes(thresholds: dict, canonical: list | dict) -> int | None:
    """min_celltypes_passing, None when absent: only meaningful for per-cell-type canonical markers."""
    if "min_celltypes_passing" not in thresholds:
        return None
    required = thresholds["min_celltypes_passing"]
    if not isinstance(canonical, dict):
        raise InvalidConfig("min_celltypes_passing needs per-cell-type (object) canonical_markers")
    if isinstance(required, bool) or not isinstance(required, int) or not 1 <= required <= len(canonical):
        raise InvalidConfig(f"min_celltypes_passing must be an integer in [1, {len(canonical)}], got {required!r}")
    return required


class _Overlap(NamedTuple):
    submitted_count: int
    unique_count: int
    cardinality_pass: bool
    recall: float
    true_positives: list[str]
    false_positives: list[str]
    false_negatives: list[str]
    num_canonical: int


def _overlap(submitted: list[str], canonical: list[str], expected_count: int | None) -> _Overlap:
    """Match genes case-insensitively; with an expected_count only the first k genes are scored."""
    unique_count = len({gene.lower() for gene in submitted})
    scored = _by_lowercase(submitted if expected_count is None else submitted[:expected_count])
    reference = _by_lowercase(canonical)
    hits = [gene for key, gene in scored.items() if key in reference]
    return _Overlap(
        submitted_count=len(submitted),
        unique_count=unique_count,
        cardinality_pass=cardinality_holds(expected_count, len(submitted), unique_count),
        recall=len(hits) / len(reference),
        true_positives=sorted(hits),
        false_positives=sorted(gene for key, gene in scored.items() if key not in reference),
        false_negatives=sorted(gene for key, gene in reference.items() if key not in scored),
        num_canonical=len(reference),
    )


@register_grader("marker_gene_precision_recall")
class MarkerGenePrecisionRecallGrader(Grader):
    """Precision@k and recall against canonical markers, flat or per cell type."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        if "canonical_markers" in config:
            canonical = config["canonical_markers"]
        else:  # only an absent key falls back; an explicit null is an error
            canonical = config.get("ground_truth_labels")
        _check_canonical(canonical)
        thresholds = read_object(config, "scoring", "pass_thresholds")
        precision_threshold, recall_threshold, min_recall = read_thresholds(thresholds, PRECISION_RECALL_THRESHOLDS)
        required = _required_celltypes(thresholds, canonical)
        expected_count = read_expected_count(config)
        answer_field = read_answer_field(config, DEFAULT_ANSWER_FIELD)

        predicted = required_member(answer, answer_field)
        if isinstance(canonical, dict):
            if isinstance(predicted, dict):
                return _grade_per_celltype(
                    answer,
                    predicted,
                    canonical,
                    min_recall=recall_threshold if min_recall is None else min_recall,
                    required=len(canonical) if required is None else required,
                    expected_count=expected_count,
                    answer_field=answer_field,
                )
            if answer_field in canonical:
                canonical = canonical[answer_field]
        if not isinstance(predicted, list):
            raise RejectedAnswer(f"{answer_field!r} must be a list, got {type(predicted).__name__}")
        if isinstance(canonical, dict):
            raise RejectedAnswer(f"Canonical markers are per cell type but {answer_field!r} is a flat list")
        if not _are_gene_names(predicted):
            raise RejectedAnswer(f"{answer_field!r} items must be non-blank strings")
        return _grade_flat(
            answer, predicted, canonical, precision_threshold, recall_threshold, expected_count, answer_field
        )


def _grade_flat(
    answer: dict,
    predicted: list[str],
    canonical: list[str],
    precision_threshold: float,
    recall_threshold: float,
    expected_count: int | None,
    answer_field: str,
) -> GraderResult:
    """k is the raw submitted length (duplicates dilute precision) unless expected_count fixes it."""
    overlap = _overlap(predicted, canonical, expected_count)
    k = len(predicted) if expected_count is None else expected_count
    precision = len(overlap.true_positives) / k if k else 0.0
    precision_pass = precision >= precision_threshold
    recall_pass = overlap.recall >= recall_threshold
    passed = precision_pass and recall_pass and overlap.cardinality_pass
    metrics = {
        "k": k,
        "precision_at_k": precision,
        "recall_at_k": overlap.recall,
        "precision_threshold": precision_threshold,
        "recall_threshold": recall_threshold,
        "true_positives": overlap.true_positives,
        "false_positives": overlap.false_positives,
        "false_negatives": overlap.false_negatives,
        "num_true_positives": len(overlap.true_positives),
        "num_false_positives": len(overlap.false_positives),
        "num_false_negatives": len(overlap.false_negatives),
        "num_canonical_markers": overlap.num_canonical,
        "submitted_count": overlap.submitted_count,
        "unique_count": overlap.unique_count,
        "expected_count": expected_count,
        "cardinality_pass": overlap.cardinality_pass,
        "precision_pass": precision_pass,
        "recall_pass": recall_pass,
        "answer_field_used": answer_field,
    }
    reasoning = (
        f"{'PASS' if passed else 'FAIL'}: precision@{k} {precision:.3f} (needs {precision_threshold}), "
        f"recall {overlap.recall:.3f} (needs {recall_threshold}) "
        f"over {overlap.num_canonical} canonical markers"
    )
    if not overlap.cardinality_pass:
        reasoning += (
            f"; expected exactly {expected_count} distinct genes, got {overlap.submitted_count} "
            f"submitted / {overlap.unique_count} distinct"
        )
    return binary_result(passed, metrics, reasoning, answer)


def _grade_per_celltype(
    answer: dict,
    predicted: dict,
    canonical: dict[str, list[str]],
    *,
    min_recall: float,
    required: int,
    expected_count: int | None,
    answer_field: str,
) -> GraderResult:
    """Recall per canonical cell type; a malformed entry fails that cell type, not the answer."""
    per_celltype: dict[str, dict] = {}
    for cell_type, markers in canonical.items():
        genes = predicted.get(cell_type, [])
        if not isinstance(genes, list) or not _are_gene_names(genes):
            per_celltype[cell_type] = {
                "pass": False,
                "recall": 0.0,
                "error": f"expected a list of non-blank gene names, got {genes!r}",
            }
            continue
        overlap = _overlap(genes, markers, expected_count)
        per_celltype[cell_type] = {
            "pass": overlap.recall >= min_recall and overlap.cardinality_pass,
            "recall": overlap.recall,
            "num_predicted": overlap.submitted_count,
            "num_unique_predicted": overlap.unique_count,
            "expected_count": expected_count,
            "cardinality_pass": overlap.cardinality_pass,
            "num_canonical": overlap.num_canonical,
            "true_positives": overlap.true_positives,
            "false_negatives": overlap.false_negatives,
        }
    passing = sum(1 for entry in per_celltype.values() if entry["pass"])
    passed = passing >= required
    metrics = {
        "celltypes_passing": passing,
        "total_celltypes": len(canonical),
        "min_celltypes_passing": required,
        "min_recall_per_celltype": min_recall,
        "expected_count": expected_count,
        "answer_field_used": answer_field,
        "per_celltype": per_celltype,
    }
    failing = sorted(cell_type for cell_type, entry in per_celltype.items() if not entry["pass"])
    reasoning = (
        f"{'PASS' if passed else 'FAIL'}: {passing}/{len(canonical)} cell types reach recall "
        f"{min_recall} (need {required})"
    )
    if failing:
        reasoning += f"; failing: {', '.join(failing)}"
    return binary_result(passed, metrics, reasoning, answer)


@register_grader("marker_gene_separation")
class MarkerGeneSeparationGrader(Grader):
    """Judges the agent's own AUROC report; the verdict trusts the *reported* mean."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        mean_threshold, fraction_threshold, cutoff = read_thresholds_at(
            config, ("scoring", "pass_thresholds"), SEPARATION_THRESHOLDS
        )
        aurocs = _reported_aurocs(answer)
        reported_mean = answer["mean_auroc"]
        high: list[str] = []
        low: list[str] = []
        for gene, auroc in aurocs.items():
            (high if auroc >= cutoff else low).append(gene)
        high.sort()
        low.sort()
        fraction_high = len(high) / len(aurocs)
        mean_pass = reported_mean >= mean_threshold
        fraction_pass = fraction_high >= fraction_threshold
        passed = mean_pass and fraction_pass
        metrics = {
            "num_genes": len(aurocs),
            "mean_auroc_agent": reported_mean,
            "mean_auroc_computed": sum(aurocs.values()) / len(aurocs),
            "mean_auroc_threshold": mean_threshold,
            "fraction_high": fraction_high,
            "fraction_high_threshold": fraction_threshold,
            "per_gene_cutoff": cutoff,
            "num_high_auroc_genes": len(high),
            "num_low_auroc_genes": len(low),
            "high_auroc_genes": high,
            "low_auroc_genes": low,
            "mean_auroc_pass": mean_pass,
            "fraction_high_pass": fraction_pass,
            "per_gene_aurocs": aurocs,
        }
        reasoning = (
            f"{'PASS' if passed else 'FAIL'}: reported mean AUROC {reported_mean} (needs {mean_threshold}); "
            f"{len(high)}/{len(aurocs)} genes at AUROC >= {cutoff} = {fraction_high:.3f} "
            f"(needs {fraction_threshold})"
        )
        return binary_result(passed, metrics, reasoning, answer)


def _reported_aurocs(answer: Any) -> dict[str, float]:
    """Gene -> AUROC; RejectedAnswer for the first problem, checked in the reference's order."""
    if not isinstance(answer, dict):
        raise RejectedAnswer("Answer is not a JSON object")
    for key in ("per_gene_stats", "mean_auroc"):
        if key not in answer:
            raise RejectedAnswer(missing_field(key))
    stats = answer["per_gene_stats"]
    if not isinstance(stats, list):
        raise RejectedAnswer(f"per_gene_stats must be a list, got {type(stats).__name__}")
    if not stats:
        raise RejectedAnswer("per_gene_stats is empty")
    if not is_number_in(answer["mean_auroc"], 0.0, 1.0):
        raise RejectedAnswer(f"mean_auroc must be a finite number in [0, 1], got {answer['mean_auroc']!r}")
    aurocs: dict[str, float] = {}
    for position, stat in enumerate(stats):
        if not isinstance(stat, dict) or "gene" not in stat or "auroc" not in stat:
            raise RejectedAnswer(f"per_gene_stats[{position}] must be an object with 'gene' and 'auroc'")
        gene, auroc = stat["gene"], stat["auroc"]
        if not (isinstance(gene, str) and gene.strip()):
            raise RejectedAnswer(f"per_gene_stats[{position}].gene must be a non-blank string, got {gene!r}")
        if gene in aurocs:
            raise RejectedAnswer(f"gene {gene!r} appears more than once in per_gene_stats")
        # a float in range (NaN never is) needs no further check
        if not (auroc.__class__ is float and 0.0 <= auroc <= 1.0) and not is_number_in(auroc, 0.0, 1.0):
            raise RejectedAnswer(f"per_gene_stats[{position}].auroc must be a finite number in [0, 1], got {auroc!r}")
        aurocs[gene] = float(auroc)
    return aurocs
