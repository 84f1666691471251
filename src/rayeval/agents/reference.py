"""The built-in ``reference`` agent: solves the bundled example evals by real computation.

It is a deterministic stand-in for an AI agent, used to check the harness end to end and to
prove that every example eval is answerable from its data. It never reads eval files or
ground truth: it recognises the question from the keys of the ``<EVAL_ANSWER>`` template in
the prompt, reads the staged input from ``work_dir/data/``, computes the answer with
anndata/numpy/scipy, writes ``work_dir/eval_answer.json`` and returns the answer dict.

Where reasonable a solver takes a different route from the generator that produced the
ground truth (``scripts/make_example_evals.py``): marker genes by AUROC rather than the
file's stored logistic-regression ranking, PC variances from the score matrix rather than
``uns['pca']``, nearest-neighbour distances with a k-d tree rather than brute force.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RayevalError

ANSWER_FILE = "eval_answer.json"
_TEMPLATE = re.compile(r"<EVAL_ANSWER>(.*?)</EVAL_ANSWER>", re.DOTALL)


class _Unsolvable(RayevalError, ValueError):
    pass


def _fail(reason: str) -> _Unsolvable:
    return _Unsolvable(f"reference agent cannot solve this task: {reason}")


# --------------------------------------------------------------------------- prompt parsing


def answer_template_keys(task_prompt: str) -> frozenset[str]:
    """Top-level keys of the first ``<EVAL_ANSWER>`` template (placeholders need not be JSON)."""
    match = _TEMPLATE.search(task_prompt)
    if match is None:
        raise _fail("the prompt has no <EVAL_ANSWER>…</EVAL_ANSWER> answer template")
    text = match.group(1)
    keys: list[str] = []
    depth, i = 0, 0
    while i < len(text):
        char = text[i]
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        elif char == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            rest = text[end + 1 :].lstrip()
            if depth == 1 and rest.startswith(":"):
                keys.append(text[i + 1 : end])
            i = end
        i += 1
    if not keys:
        raise _fail("the <EVAL_ANSWER> template names no answer fields")
    return frozenset(keys)


def _find(pattern: str, task: str, what: str, flags: int = 0) -> str:
    match = re.search(pattern, task, flags)
    if match is None:
        raise _fail(f"could not find {what} in the task text")
    return match.group(1)


def _backticked(task: str) -> list[str]:
    return re.findall(r"`([^`]+)`", task)


# --------------------------------------------------------------------------- data access


def find_input(work_dir: Path, suffix: str, task_prompt: str = "") -> Path:
    """The staged input with ``suffix`` under ``work_dir/data`` (or ``agent_workspace/data``)."""
    candidates: list[Path] = []
    for folder in (work_dir / "data", work_dir / "agent_workspace" / "data"):
        if folder.is_dir():
            candidates += sorted(p for p in folder.rglob(f"*{suffix}") if p.is_file())
    if not candidates:
        raise _fail(f"no {suffix} input staged under {work_dir / 'data'}")
    if len(candidates) == 1:
        return candidates[0]
    named = [p for p in candidates if p.name in task_prompt]
    if len(named) == 1:
        return named[0]
    raise _fail(f"several {suffix} inputs staged and the task names none of them: {[p.name for p in candidates]}")


def _read_h5ad(path: Path):
    import anndata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return anndata.read_h5ad(path)


def _column(adata, name: str) -> np.ndarray:
    if name not in adata.obs.columns:
        raise _fail(f"the data has no obs column {name!r}")
    return adata.obs[name].astype(str).to_numpy()


def _lognorm_gene(adata, gene: str) -> np.ndarray:
    source = adata.raw if adata.raw is not None else adata
    names = list(source.var_names)
    if gene not in names:
        raise _fail(f"gene {gene!r} is not in the data")
    column = source.X[:, names.index(gene)]
    column = column.toarray() if hasattr(column, "toarray") else np.asarray(column)
    return np.asarray(column, dtype=np.float64).ravel()


def _per_group_mean(values: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    names, codes = np.unique(groups, return_inverse=True)
    sums = np.bincount(codes, weights=values)
    counts = np.bincount(codes)
    return {str(n): float(s / c) for n, s, c in zip(names, sums, counts)}


# --------------------------------------------------------------------------- solvers
# Each solver gets (task_prompt, work_dir) and returns the answer dict.


def solve_qc_mito(task: str, work_dir: Path) -> dict:
    adata = _read_h5ad(find_input(work_dir, ".h5ad", task))
    threshold = float(_find(r"strictly greater than ([0-9]*\.?[0-9]+)", task, "the mitochondrial threshold"))
    mito = adata.obs["percent_mito"].to_numpy(dtype=np.float64)
    n_genes = np.sort(adata.obs["n_genes"].to_numpy(dtype=np.float64))
    mid = len(n_genes) // 2
    median = n_genes[mid] if len(n_genes) % 2 else (n_genes[mid - 1] + n_genes[mid]) / 2
    return {
        "n_cells": int(adata.shape[0]),
        "n_high_mito_cells": int(np.count_nonzero(mito > threshold)),
        "median_genes_per_cell": float(median),
    }


def solve_lyz_expression(task: str, work_dir: Path) -> dict:
    adata = _read_h5ad(find_input(work_dir, ".h5ad", task))
    gene = _find(r"expression of the gene `([^`]+)`", task, "the gene")
    values = _lognorm_gene(adata, gene)
    return {
        "mean_lyz_lognorm": round(float(values.sum() / values.size), 4),
        "pct_cells_lyz_detected": round(100.0 * np.count_nonzero(values) / values.size, 2),
    }


def solve_composition(task: str, work_dir: Path) -> dict:
    adata = _read_h5ad(find_input(work_dir, ".h5ad", task))
    column = _find(r"adata\.obs\['([^']+)'\]", task, "the annotation column")
    names, counts = np.unique(_column(adata, column), return_counts=True)
    total = int(counts.sum())
    return {
        "total_cells": total,
        "cell_type_distribution": {str(n): round(100.0 * int(c) / total, 2) for n, c in zip(names, counts)},
    }


def solve_cluster_cell_types(task: str, work_dir: Path) -> dict:
    adata = _read_h5ad(find_input(work_dir, ".h5ad", task))
    cluster = _find(r"at least [0-9.]+% of the cells in Louvain cluster `([^`]+)`", task, "the cluster")
    threshold = float(_find(r"at least ([0-9.]+)% of the cells", task, "the percentage threshold"))
    members = _column(adata, "bulk_labels")[_column(adata, "louvain") == cluster]
    if members.size == 0:
        raise _fail(f"Louvain cluster {cluster!r} has no cells")
    names, counts = np.unique(members, return_counts=True)
    share = 100.0 * counts / members.size
    order = np.argsort(-share, kind="stable")
    return {"cell_types_predicted": [str(names[i]) for i in order if share[i] >= threshold]}


def _auroc_per_gene(matrix: np.ndarray, in_group: np.ndarray) -> np.ndarray:
    """One-vs-rest AUROC of every column (Mann-Whitney U / (n1 * n0), ties counted half)."""
    from scipy.stats import rankdata

    ranks = rankdata(matrix, axis=0)
    n1, n0 = int(in_group.sum()), int((~in_group).sum())
    u = ranks[in_group].sum(axis=0) - n1 * (n1 + 1) / 2
    return u / (n1 * n0)


def solve_marker_genes(task: str, work_dir: Path) -> dict:
    adata = _read_h5ad(find_input(work_dir, ".h5ad", task))
    groups = _column(adata, "bulk_labels")
    present = set(groups)
    targets = [token for token in _backticked(task) if token in present]
    if not targets:
        raise _fail("the task names no annotated cell type to find markers for")
    target = targets[0]
    k = int(_find(r"exactly (\d+) genes", task, "the number of genes to report"))
    source = adata.raw if adata.raw is not None else adata
    matrix = source.X.toarray() if hasattr(source.X, "toarray") else np.asarray(source.X)
    matrix = matrix.astype(np.float64)
    in_group = groups == target
    auroc = _auroc_per_gene(matrix, in_group)
    mean_diff = matrix[in_group].mean(axis=0) - matrix[~in_group].mean(axis=0)
    order = np.lexsort((-mean_diff, -auroc))  # AUROC first, mean difference breaks ties
    names = np.asarray(source.var_names)
    return {"top_marker_genes": [str(g) for g in names[order[:k]]]}


def solve_top_population_choice(task: str, work_dir: Path) -> dict:
    adata = _read_h5ad(find_input(work_dir, ".h5ad", task))
    gene = _find(r"highest mean `([^`]+)` expression", task, "the gene of the question")
    options = dict(re.findall(r"^\s*([A-Z])\)\s*(.+?)\s*$", task, re.MULTILINE))
    if not options:
        raise _fail("no lettered options (A) …) in the task")
    means = _per_group_mean(_lognorm_gene(adata, gene), _column(adata, "bulk_labels"))
    best = max(means, key=means.__getitem__)
    letters = [letter for letter, text in options.items() if text == best]
    if len(letters) != 1:
        raise _fail(f"the computed answer {best!r} is not exactly one of the options")
    return {"answer": letters[0]}


def solve_pca_summary(task: str, work_dir: Path) -> dict:
    adata = _read_h5ad(find_input(work_dir, ".h5ad", task))
    if "X_pca" not in adata.obsm:
        raise _fail("the data has no obsm['X_pca']")
    scores = np.asarray(adata.obsm["X_pca"], dtype=np.float64)
    variances = scores.var(axis=0, ddof=1)
    pc1_means = _per_group_mean(scores[:, 0], _column(adata, "louvain"))
    return {
        "n_pcs": int(scores.shape[1]),
        "pc1_variance_share_pct": round(float(100.0 * variances[0] / variances.sum()), 3),
        "top_pc1_cluster": str(max(pc1_means, key=pc1_means.__getitem__)),
    }


def solve_cluster_summary(task: str, work_dir: Path) -> dict:
    adata = _read_h5ad(find_input(work_dir, ".h5ad", task))
    label = _find(r"most frequent annotated cell type is `([^`]+)`", task, "the cell type of interest")
    clusters = _column(adata, "louvain")
    annotations = _column(adata, "bulk_labels")
    ids, sizes = np.unique(clusters, return_counts=True)
    majority_clusters = []
    for cluster in ids:
        names, counts = np.unique(annotations[clusters == cluster], return_counts=True)
        if names[np.argmax(counts)] == label:
            majority_clusters.append(str(cluster))
    return {
        "n_clusters": int(ids.size),
        "largest_cluster": str(ids[np.argmax(sizes)]),
        "dendritic_majority_clusters": sorted(majority_clusters, key=lambda c: (len(c), c)),
    }


def solve_s_phase(task: str, work_dir: Path) -> dict:
    adata = _read_h5ad(find_input(work_dir, ".h5ad", task))
    in_s = _column(adata, "phase") == "S"
    s_score = adata.obs["S_score"].to_numpy(dtype=np.float64)
    return {
        "pct_s_phase": round(100.0 * np.count_nonzero(in_s) / in_s.size, 2),
        "mean_s_score_s_phase": round(float(s_score[in_s].mean()), 4),
    }


def solve_spatial_adjacency(task: str, work_dir: Path) -> dict:
    import pandas as pd
    from scipy.spatial import cKDTree

    cells = pd.read_csv(find_input(work_dir, ".csv", task))
    xy = cells[["x_um", "y_um"]].to_numpy(dtype=np.float64)
    kind = cells["cell_type"].astype(str).to_numpy()
    ic, pc = xy[kind == "immune"], xy[kind == "tumor"]
    if len(ic) == 0 or len(pc) == 0:
        raise _fail("the data needs both 'immune' and 'tumor' cells")
    pc_tree = cKDTree(pc)
    nearest, _ = pc_tree.query(ic, k=1)
    pc_counts = np.array([len(hits) for hits in pc_tree.query_ball_point(ic, r=55.0)])
    ic_counts = np.array([len(hits) - 1 for hits in cKDTree(ic).query_ball_point(ic, r=55.0)])  # minus itself
    median = float(np.median(nearest))
    p90 = float(np.percentile(nearest, 90))
    within = float(100.0 * np.mean(nearest <= 15.0))
    mixed = float(100.0 * np.mean((pc_counts > 0) & (ic_counts > 0)))
    limits = {
        "median": float(_find(r"median\s+distance is at most ([0-9.]+)", task, "the median limit")),
        "p90": float(_find(r"90th percentile at most ([0-9.]+)", task, "the p90 limit")),
        "within": float(_find(r"at least ([0-9.]+)% of ICs are\s+within 15", task, "the 15 µm limit")),
        "mixed": float(_find(r"at least ([0-9.]+)% have a mixed", task, "the mixed-neighbourhood limit")),
    }
    verdict = (
        median <= limits["median"] and p90 <= limits["p90"] and within >= limits["within"] and mixed >= limits["mixed"]
    )
    return {
        "median_ic_to_pc_um": round(median, 3),
        "p90_ic_to_pc_um": round(p90, 3),
        "pct_ic_within_15um": round(within, 3),
        "pct_ic_mixed_within_55um": round(mixed, 3),
        "adjacency_pass": bool(verdict),
    }


Solver = Callable[[str, Path], dict]

SOLVERS: dict[frozenset[str], Solver] = {
    frozenset({"n_cells", "n_high_mito_cells", "median_genes_per_cell"}): solve_qc_mito,
    frozenset({"mean_lyz_lognorm", "pct_cells_lyz_detected"}): solve_lyz_expression,
    frozenset({"total_cells", "cell_type_distribution"}): solve_composition,
    frozenset({"cell_types_predicted"}): solve_cluster_cell_types,
    frozenset({"top_marker_genes"}): solve_marker_genes,
    frozenset({"answer"}): solve_top_population_choice,
    frozenset({"n_pcs", "pc1_variance_share_pct", "top_pc1_cluster"}): solve_pca_summary,
    frozenset({"n_clusters", "largest_cluster", "dendritic_majority_clusters"}): solve_cluster_summary,
    frozenset({"pct_s_phase", "mean_s_score_s_phase"}): solve_s_phase,
    frozenset(
        {"median_ic_to_pc_um", "p90_ic_to_pc_um", "pct_ic_within_15um", "pct_ic_mixed_within_55um", "adjacency_pass"}
    ): solve_spatial_adjacency,
}
"""Solvers keyed by the exact set of top-level keys in the task's answer template."""


def reference_agent(task_prompt: str, work_dir: Path) -> dict[str, Any]:
    """Solve one example eval from the data staged in ``work_dir/data/``.

    Writes ``work_dir/eval_answer.json`` and returns the same answer dict. Raises
    ``ValueError("reference agent cannot solve this task: …")`` for a task it does not know.
    """
    work_dir = Path(work_dir)
    keys = answer_template_keys(task_prompt)
    solver = SOLVERS.get(keys)
    if solver is None:
        raise _fail(f"no solver for an answer with fields {sorted(keys)}")
    answer = solver(task_prompt, work_dir)
    (work_dir / ANSWER_FILE).write_text(json.dumps(answer, indent=2) + "\n", encoding="utf-8")
    return answer


__all__ = ["ANSWER_FILE", "SOLVERS", "answer_template_keys", "find_input", "reference_agent"]


reference_agent.preload = ("anndata",)  # type: ignore[attr-defined]  # read by every unit: loaded once per runner
