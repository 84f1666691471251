#!/usr/bin/env python3
"""Write the example PBMC evals (``evals/pbmc/*.json``) with ground truth computed from the data.

Every number, label and gene list in the generated files is derived here from
``evals/data/pbmc68k_reduced.h5ad`` (real 10x PBMCs, see ``evals/data/NOTICE.md``); nothing
is typed in by hand. The script is deterministic: running it twice gives byte-identical
files, and ``--out DIR`` writes the same tree somewhere else (the tests compare the two).

    python scripts/make_example_evals.py               # rewrite evals/pbmc/*.json
    python scripts/make_example_evals.py --out /tmp/x  # write /tmp/x/pbmc/*.json

Besides computing ground truth, the builders check that each question is well posed on
this data (no value sits on a threshold, the intended answer wins by a clear margin) and
stop with an error otherwise, so a changed data file cannot silently produce a fragile eval.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "evals" / "data" / "pbmc68k_reduced.h5ad"
DEFAULT_OUT = REPO / "evals"
DATA_BASENAME = "pbmc68k_reduced.h5ad"
DATA_NODE = f"../data/{DATA_BASENAME}"  # relative to evals/pbmc/<id>.json
SUBDIR = "pbmc"

INTRO = (
    f"The AnnData file `{DATA_BASENAME}` holds 700 peripheral blood mononuclear cells (PBMCs) "
    "from a 10x Genomics Chromium experiment (a reduced subset of the public PBMC 68k data set), "
    "measured over 765 genes."
)
RAW_NOTE = (
    "`adata.raw.X` holds the log-normalised expression (library-size normalised, then log1p); "
    "`adata.X` holds the per-gene scaled (z-scored) version of it."
)


class GeneratorError(RuntimeError):
    """The data does not support the question as designed (margin or sanity check failed)."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise GeneratorError(message)


def metadata(task: str) -> dict[str, str]:
    return {"task": task, "kit": "10x_chromium", "time_horizon": "small", "eval_type": "scientific"}


def answer_block(template: str) -> str:
    return f"Return EXACTLY:\n\n<EVAL_ANSWER>\n{template}\n</EVAL_ANSWER>"


def make_eval(eval_id: str, category: str, task: str, grader_type: str, config: dict, notes: str) -> dict[str, Any]:
    return {
        "id": eval_id,
        "task": task,
        "metadata": metadata(category),
        "data_node": DATA_NODE,
        "grader": {"type": grader_type, "config": config},
        "notes": notes,
    }


# --------------------------------------------------------------------------- data access


def load(path: Path):
    import anndata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata moves legacy .uns neighbours into .obsp
        return anndata.read_h5ad(path)


def lognorm(adata) -> np.ndarray:
    """Dense log-normalised matrix (cells × genes) from ``adata.raw``."""
    matrix = adata.raw.X
    matrix = matrix.toarray() if hasattr(matrix, "toarray") else np.asarray(matrix)
    return matrix.astype(np.float64)


def gene_column(adata, gene: str) -> np.ndarray:
    names = list(adata.raw.var_names)
    require(gene in names, f"gene {gene} is not in adata.raw")
    return lognorm(adata)[:, names.index(gene)]


def labels(adata, column: str) -> np.ndarray:
    return adata.obs[column].astype(str).to_numpy()


def ordered_categories(adata, column: str) -> list[str]:
    """Category order as stored in the file (stable, not alphabetical by accident)."""
    return [str(c) for c in adata.obs[column].cat.categories]


def group_means(values: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    return {g: float(values[groups == g].mean()) for g in sorted(set(groups))}


# --------------------------------------------------------------------------- the evals


def qc_mito(adata) -> dict:
    threshold = 0.025
    mito = adata.obs["percent_mito"].to_numpy().astype(np.float64)
    gap = float(np.min(np.abs(mito - threshold)))
    require(gap > 1e-6, "a percent_mito value sits on the 0.025 threshold")
    n_cells = int(adata.n_obs)
    n_high = int((mito > threshold).sum())
    median_genes = float(np.median(adata.obs["n_genes"].to_numpy()))
    task = (
        f"{INTRO}\n\n"
        "Per-cell quality-control metrics are stored in `adata.obs`: `n_genes` is the number of "
        "genes detected in the cell and `percent_mito` is the fraction of the cell's counts that "
        "come from mitochondrial genes (stored as a fraction between 0 and 1, despite its name).\n\n"
        "Report (a) the total number of cells in the file, (b) the number of cells whose "
        "mitochondrial fraction is strictly greater than 0.025 (i.e. above 2.5% mitochondrial "
        "reads), and (c) the median number of detected genes per cell over all cells.\n\n"
        + answer_block('{"n_cells": <int>, "n_high_mito_cells": <int>, "median_genes_per_cell": <float>}')
    )
    config = {
        "ground_truth": {"n_cells": n_cells, "n_high_mito_cells": n_high, "median_genes_per_cell": median_genes},
        "tolerances": {
            "n_cells": {"type": "absolute", "value": 0},
            "n_high_mito_cells": {"type": "absolute", "value": 2},
            "median_genes_per_cell": {"type": "absolute", "value": 1},
        },
    }
    notes = (
        "Ground truth: adata.n_obs; count of obs['percent_mito'] > 0.025; median of obs['n_genes'].\n"
        f"The closest percent_mito value is {gap:.1e} from the threshold, so float32/float64 "
        "comparisons agree. Tolerances: cell count exact; high-mito count +/-2; median +/-1 "
        "(accepts the lower/upper middle value for an even number of cells).\n"
        "Trap: treating percent_mito as a percentage (> 2.5) gives 0 high-mito cells."
    )
    return make_eval("pbmc_qc_mito_and_genes", "qc", task, "numeric_tolerance", config, notes)


def normalization_lyz(adata) -> dict:
    gene = "LYZ"
    values = gene_column(adata, gene)
    mean = round(float(values.mean()), 4)
    pct = round(float((values > 0).mean() * 100), 2)
    scaled_mean = float(np.asarray(adata.X)[:, list(adata.var_names).index(gene)].mean())
    require(abs(scaled_mean - mean) > 0.5, "scaled and log-normalised means are too close to discriminate")
    task = (
        f"{INTRO} {RAW_NOTE}\n\n"
        f"Using the log-normalised expression, report the mean expression of the gene `{gene}` "
        f"over all cells, and the percentage (0-100) of cells in which `{gene}` is detected "
        "(non-zero expression).\n\n" + answer_block('{"mean_lyz_lognorm": <float>, "pct_cells_lyz_detected": <float>}')
    )
    config = {
        "ground_truth": {"mean_lyz_lognorm": mean, "pct_cells_lyz_detected": pct},
        "ranges": {
            "mean_lyz_lognorm": {"min": round(mean - 0.1, 4), "max": round(mean + 0.1, 4)},
            "pct_cells_lyz_detected": {"min": round(pct - 2.0, 2), "max": round(pct + 2.0, 2)},
        },
    }
    notes = (
        f"Ground truth: mean of adata.raw[:, '{gene}'] over all cells; percentage of cells with a "
        "non-zero value. Accepted ranges are open intervals of +/-0.1 (mean) and +/-2 percentage "
        f"points. Trap: using the scaled adata.X gives a mean of {scaled_mean:.3f}, far outside."
    )
    return make_eval("pbmc_lyz_lognorm_expression", "normalization", task, "numeric_range", config, notes)


def composition(adata) -> dict:
    groups = labels(adata, "bulk_labels")
    order = ordered_categories(adata, "bulk_labels")
    n = len(groups)
    dist = {ct: round(float((groups == ct).sum()) * 100.0 / n, 2) for ct in order}
    require(abs(sum(dist.values()) - 100) < 0.1, "percentages do not sum to 100")
    template_rows = ",\n".join(f'    "{ct}": <percentage>' for ct in order)
    template = '{\n  "total_cells": <int>,\n  "cell_type_distribution": {\n' + template_rows + "\n  }\n}"
    task = (
        f"{INTRO}\n\n"
        "Each cell carries a cell-type annotation in `adata.obs['bulk_labels']`. Report the total "
        "number of cells and the cell-type composition of the sample: the percentage (0-100) of "
        "all cells that belong to each annotated cell type. Percentages should sum to ~100. Use "
        "the exact annotation strings as keys.\n\n" + answer_block(template)
    )
    config = {
        "ground_truth": {"total_cells": n, "cell_type_distribution": dist},
        "tolerances": {
            "total_cells": {"type": "absolute", "value": 0},
            "cell_type_percentages": {"type": "absolute", "value": 1.0},
        },
    }
    notes = (
        "Ground truth: value counts of obs['bulk_labels'] as percentages of all cells (2 decimals). "
        "Each percentage must be within +/-1 percentage point; the cell total must be exact. "
        "Trap: reporting fractions (0-1) instead of percentages fails every cell type."
    )
    return make_eval("pbmc_bulk_label_composition", "cell_typing", task, "distribution_comparison", config, notes)


def cluster_cell_types(adata) -> dict:
    cluster, threshold = "0", 5.0
    clusters = labels(adata, "louvain")
    groups = labels(adata, "bulk_labels")
    members = groups[clusters == cluster]
    shares = {ct: float((members == ct).mean() * 100) for ct in sorted(set(members))}
    require(all(abs(s - threshold) > 1.0 for s in shares.values()), "a cell-type share is within 1 point of 5%")
    truth = [ct for ct in ordered_categories(adata, "bulk_labels") if shares.get(ct, 0.0) >= threshold]
    require(2 <= len(truth) < len(shares), "the question should select some but not all cell types")
    task = (
        f"{INTRO}\n\n"
        "The cells were clustered with the Louvain algorithm (cluster ids in "
        "`adata.obs['louvain']`) and independently annotated with cell types "
        "(`adata.obs['bulk_labels']`). Louvain cluster `0` is a mixed T-cell cluster.\n\n"
        "Which annotated cell types each make up at least 5% of the cells in Louvain cluster `0`? "
        "List every such cell type once, using the exact `bulk_labels` strings.\n\n"
        + answer_block('{"cell_types_predicted": [<cell type>, ...]}')
    )
    config = {
        "ground_truth_labels": truth,
        "scoring": {"pass_threshold": 1.0},
        "answer_field": "cell_types_predicted",
    }
    share_text = ", ".join(f"{ct} {s:.1f}%" for ct, s in sorted(shares.items(), key=lambda kv: -kv[1]))
    notes = (
        f"Ground truth: bulk_labels shares within louvain == '0' ({share_text}); the types at "
        ">= 5% are the answer. No share lies within 1 point of the cut-off. Exact set required "
        "(Jaccard 1.0); labels are case- and whitespace-sensitive."
    )
    return make_eval("pbmc_louvain0_cell_types", "clustering", task, "label_set_jaccard", config, notes)


def alternative_ranking_hits(adata, group: str, k: int, canonical: set[str]) -> dict[str, int]:
    """How many of the top-k genes of three common one-vs-rest rankings are canonical."""
    from scipy import stats

    matrix = lognorm(adata)
    in_group = labels(adata, "bulk_labels") == group
    names = np.asarray(adata.raw.var_names)
    t_stat = np.nan_to_num(stats.ttest_ind(matrix[in_group], matrix[~in_group], equal_var=False).statistic, nan=-np.inf)
    u_stat = stats.mannwhitneyu(matrix[in_group], matrix[~in_group], alternative="two-sided").statistic
    mean_diff = matrix[in_group].mean(axis=0) - matrix[~in_group].mean(axis=0)
    rankings = {"Welch t-test": t_stat, "Wilcoxon rank-sum": u_stat, "mean difference": mean_diff}
    return {
        name: len(canonical & {str(g) for g in names[np.argsort(-score, kind="stable")[:k]]})
        for name, score in rankings.items()
    }


def nk_markers(adata) -> dict:
    group, n_canonical, k = "CD56+ NK", 25, 10
    rgg = adata.uns["rank_genes_groups"]
    require(group in rgg["names"].dtype.names, f"{group} has no rank_genes_groups entry")
    canonical = [str(g) for g in rgg["names"][group][:n_canonical]]
    require(len(set(canonical)) == n_canonical, "duplicate genes in the ranking")
    task = (
        f"{INTRO} {RAW_NOTE}\n\n"
        "Cell types are annotated in `adata.obs['bulk_labels']`. Find the marker genes of the "
        "natural killer cells (`CD56+ NK`): the genes whose expression best distinguishes "
        "`CD56+ NK` cells from all other cells in the sample. Report exactly 10 genes, most "
        "specific first, as gene symbols exactly as they appear in the data.\n\n"
        + answer_block(
            '{"top_marker_genes": [<gene>, <gene>, <gene>, <gene>, <gene>, <gene>, <gene>, <gene>, <gene>, <gene>]}'
        )
    )
    config = {
        "canonical_markers": canonical,
        "scoring": {"pass_thresholds": {"precision_at_k": 0.5, "recall_at_k": 0.2}},
        "expected_count": k,
        "answer_field": "top_marker_genes",
    }
    params = rgg["params"]
    method = str(params["method"]) if "method" in params else "unknown"
    hits = alternative_ranking_hits(adata, group, k, set(canonical))
    require(min(hits.values()) >= 6, f"a standard marker test recovers too few canonical genes: {hits}")
    hits_text = ", ".join(f"{name} {n}/{k}" for name, n in hits.items())
    notes = (
        f"Ground truth: the top {n_canonical} genes for '{group}' in the file's "
        f"uns['rank_genes_groups'] (groupby bulk_labels, method {method}, reference rest). "
        f"Pass: exactly {k} genes (expected_count), at least 5 of them in that top-{n_canonical} "
        "list (precision@10 >= 0.5, hence recall >= 0.2). Standard one-vs-rest rankings on "
        f"adata.raw recover, of their top {k}: {hits_text}."
    )
    return make_eval(
        "pbmc_nk_marker_genes", "differential_expression", task, "marker_gene_precision_recall", config, notes
    )


def fcgr3a_population(adata) -> dict:
    gene = "FCGR3A"
    options = ["CD56+ NK", "CD14+ Monocyte", "Dendritic", "CD8+ Cytotoxic T", "CD19+ B"]
    letters = "ABCDE"
    means = group_means(gene_column(adata, gene), labels(adata, "bulk_labels"))
    ranked = sorted(means, key=lambda ct: -means[ct])
    top, runner_up = ranked[0], ranked[1]
    require(top in options, f"the top population {top} is not among the options")
    require(means[top] - means[runner_up] > 0.5, "the top population does not win clearly")
    correct = letters[options.index(top)]
    option_text = "\n".join(f"{letter}) {ct}" for letter, ct in zip(letters, options))
    task = (
        f"{INTRO} {RAW_NOTE}\n\n"
        f"`{gene}` encodes CD16, the low-affinity Fc-gamma receptor IIIa. Using the "
        "log-normalised expression and the cell-type annotation in `adata.obs['bulk_labels']`, "
        f"which annotated population has the highest mean `{gene}` expression?\n\n"
        f"{option_text}\n\n" + answer_block('{"answer": "<letter>"}')
    )
    config = {"correct_answer": correct}
    notes = (
        f"Ground truth: mean of adata.raw[:, '{gene}'] per bulk_labels population; highest is "
        f"{top} ({means[top]:.2f}), next {runner_up} ({means[runner_up]:.2f}). "
        "Trap: answering from prior knowledge (NK cells are the textbook CD16-high population)."
    )
    return make_eval("pbmc_fcgr3a_top_population", "cell_typing", task, "multiple_choice", config, notes)


def pca_summary(adata) -> dict:
    variance = np.asarray(adata.uns["pca"]["variance"], dtype=np.float64)
    n_pcs = int(adata.obsm["X_pca"].shape[1])
    require(len(variance) == n_pcs, "uns['pca']['variance'] does not match obsm['X_pca']")
    share = round(float(variance[0] / variance.sum() * 100), 3)
    pc1_means = group_means(np.asarray(adata.obsm["X_pca"][:, 0], dtype=np.float64), labels(adata, "louvain"))
    ranked = sorted(pc1_means, key=lambda c: -pc1_means[c])
    top = ranked[0]
    require(pc1_means[top] - pc1_means[ranked[1]] > 1.0, "no louvain cluster clearly leads on PC1")
    task = (
        f"{INTRO}\n\n"
        "A principal component analysis has already been run and its cell scores are stored in "
        "`adata.obsm['X_pca']`; Louvain cluster ids are in `adata.obs['louvain']`. Using the "
        "stored embedding as it is (do not recompute it), report:\n"
        "(a) `n_pcs`: the number of principal components stored;\n"
        "(b) `pc1_variance_share_pct`: the share of the variance captured by PC1 among all stored "
        "components, in percent (variance of the PC1 scores divided by the sum of the variances "
        "of all stored PC score columns, times 100);\n"
        "(c) `top_pc1_cluster`: the Louvain cluster with the highest mean PC1 score.\n\n"
        + answer_block('{"n_pcs": <int>, "pc1_variance_share_pct": <float>, "top_pc1_cluster": "<cluster id>"}')
    )
    config = {
        "children": [
            {
                "name": "n_pcs",
                "role": "gate",
                "answer_field": "n_pcs",
                "predicate": {"op": "equals", "arg": n_pcs},
            },
            {
                "type": "numeric_tolerance",
                "name": "pc1_variance_share",
                "config": {
                    "ground_truth": {"pc1_variance_share_pct": share},
                    "tolerances": {"pc1_variance_share_pct": {"type": "absolute", "value": 0.5}},
                },
            },
            {
                "type": "predicate_leaf",
                "config": {
                    "name": "top_pc1_cluster",
                    "role": "gate",
                    "answer_field": "top_pc1_cluster",
                    "predicate": {"op": "in", "args": [top, int(top)]},
                },
            },
        ]
    }
    notes = (
        f"Ground truth: obsm['X_pca'] has {n_pcs} columns; PC1 share = uns['pca']['variance'][0] / "
        f"sum(uns['pca']['variance']) * 100 = {share} (+/-0.5); the mean PC1 score per louvain "
        f"cluster is highest for cluster {top} ({pc1_means[top]:.2f}, next {ranked[1]} at "
        f"{pc1_means[ranked[1]]:.2f}); the cluster may be given as a string or an integer. "
        "all_of: every part must be right. Trap: reporting uns['pca']['variance_ratio'] (relative "
        "to the full gene space) instead of the share among the stored PCs."
    )
    return make_eval("pbmc_pca_summary", "dimensionality_reduction", task, "all_of", config, notes)


def louvain_summary(adata) -> dict:
    clusters = labels(adata, "louvain")
    groups = labels(adata, "bulk_labels")
    ids = ordered_categories(adata, "louvain")
    sizes = {c: int((clusters == c).sum()) for c in ids}
    by_size = sorted(ids, key=lambda c: -sizes[c])
    require(sizes[by_size[0]] > sizes[by_size[1]], "the largest cluster is tied")
    dendritic = []
    for c in ids:
        members = groups[clusters == c]
        values, counts = np.unique(members, return_counts=True)
        order = np.argsort(-counts, kind="stable")
        require(len(counts) == 1 or counts[order[0]] > counts[order[1]], f"cluster {c} has a tied majority")
        if values[order[0]] == "Dendritic":
            dendritic.append(c)
    require(len(dendritic) >= 2, "expected several dendritic-majority clusters")
    task = (
        f"{INTRO}\n\n"
        "The cells were clustered with the Louvain algorithm (cluster ids in "
        "`adata.obs['louvain']`) and independently annotated with cell types "
        "(`adata.obs['bulk_labels']`). Summarise the clustering: report the number of Louvain "
        "clusters, the id of the largest cluster (most cells), and the ids of all clusters whose "
        "most frequent annotated cell type is `Dendritic`.\n\n"
        + answer_block(
            '{"n_clusters": <int>, "largest_cluster": "<cluster id>", "dendritic_majority_clusters": ["<cluster id>", ...]}'
        )
    )
    config = {
        "children": [
            {
                "name": "n_clusters",
                "role": "gate",
                "answer_field": "n_clusters",
                "predicate": {"op": "equals", "arg": len(ids)},
                "points": 1,
            },
            {
                "name": "largest_cluster",
                "role": "gate",
                "answer_field": "largest_cluster",
                "predicate": {"op": "in", "args": [by_size[0], int(by_size[0])]},
                "points": 1,
            },
            {
                "type": "label_set_jaccard",
                "name": "dendritic_majority_clusters",
                "points": 2,
                "config": {
                    "ground_truth_labels": dendritic,
                    "answer_field": "dendritic_majority_clusters",
                    "scoring": {"pass_threshold": 0.75},
                },
            },
        ],
        "pass_rule": "score_threshold",
        "score_threshold": 3,
    }
    notes = (
        f"Ground truth: {len(ids)} louvain categories; largest cluster {by_size[0]} "
        f"({sizes[by_size[0]]} cells, next {by_size[1]} with {sizes[by_size[1]]}); clusters whose "
        f"majority bulk label is Dendritic: {', '.join(dendritic)}. average_of with points "
        "1 + 1 + 2: the score is the earned share of 4 points; passing needs >= 3 points, so the "
        "dendritic-cluster set (Jaccard >= 0.75, ids as strings or integers) is mandatory and at "
        "most one of the two single-value parts may be wrong."
    )
    return make_eval("pbmc_louvain_cluster_summary", "clustering", task, "average_of", config, notes)


def cell_cycle(adata) -> dict:
    phases = labels(adata, "phase")
    in_s = phases == "S"
    pct_s = round(float(in_s.mean() * 100), 2)
    mean_s = round(float(adata.obs["S_score"].to_numpy().astype(np.float64)[in_s].mean()), 4)
    task = (
        f"{INTRO}\n\n"
        "Cell-cycle scores were computed for every cell: `adata.obs['S_score']` and "
        "`adata.obs['G2M_score']` are the S-phase and G2/M-phase gene-set scores, and "
        "`adata.obs['phase']` is the phase call derived from them (G1, S or G2M).\n\n"
        "Report the percentage (0-100) of cells called in S phase, and the mean S-phase score of "
        "those S-phase cells.\n\n" + answer_block('{"pct_s_phase": <float>, "mean_s_score_s_phase": <float>}')
    )
    config = {
        "ground_truth": {"pct_s_phase": pct_s, "mean_s_score_s_phase": mean_s},
        "tolerances": {
            "pct_s_phase": {"type": "relative", "value": 0.02},
            "mean_s_score_s_phase": {"type": "absolute", "value": 0.005},
        },
    }
    notes = (
        "Ground truth: share of obs['phase'] == 'S' (relative tolerance 2%) and the mean of "
        "obs['S_score'] over those cells (+/-0.005). Trap: averaging S_score over all cells."
    )
    return make_eval("pbmc_cell_cycle_s_phase", "qc", task, "numeric_tolerance", config, notes)


BUILDERS: list[Callable[[Any], dict]] = [
    qc_mito,
    normalization_lyz,
    composition,
    cluster_cell_types,
    nk_markers,
    fcgr3a_population,
    pca_summary,
    louvain_summary,
    cell_cycle,
]


def render(eval_: dict) -> str:
    return json.dumps(eval_, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the PBMC .h5ad (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="evals folder to write <out>/pbmc/*.json into")
    args = parser.parse_args(argv)

    adata = load(args.data)
    target = args.out / SUBDIR
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for build in BUILDERS:
        eval_ = build(adata)
        path = target / f"{eval_['id']}.json"
        path.write_text(render(eval_), encoding="utf-8")
        written.append(path.name)
    stale = sorted(p.name for p in target.glob("*.json") if p.name not in written)
    for name in written:
        print(f"wrote {target / name}")
    if stale:
        print(f"note: {target} also holds files this script did not write: {', '.join(stale)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
