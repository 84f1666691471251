"""The bundled example evals: they load, the reference agent passes them, wrong answers fail,
and the generator scripts reproduce the committed files byte for byte."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rayeval import load_evals
from rayeval.agents.reference import ANSWER_FILE, answer_template_keys, reference_agent
from rayeval.graders import get_grader
from rayeval.unit.prompt import build_prompt

REPO = Path(__file__).resolve().parents[1]
EVALS = REPO / "evals"
SCRIPTS = REPO / "scripts"
EVAL_FILES = sorted(p for p in EVALS.rglob("*.json"))
IDS = [p.stem for p in EVAL_FILES]

REQUIRED_TYPES = {
    "numeric_tolerance",
    "numeric_range",
    "distribution_comparison",
    "label_set_jaccard",
    "marker_gene_precision_recall",
    "multiple_choice",
    "all_of",
    "average_of",
    "spatial_adjacency",
}

# One plausible but wrong answer per eval, each modelled on a real mistake.
WRONG_ANSWERS = {
    # percent_mito read as a percentage (> 2.5) selects no cell
    "pbmc_qc_mito_and_genes": {"n_cells": 700, "n_high_mito_cells": 0, "median_genes_per_cell": 1129.5},
    # the scaled adata.X instead of the log-normalised adata.raw
    "pbmc_lyz_lognorm_expression": {"mean_lyz_lognorm": 0.0, "pct_cells_lyz_detected": 100.0},
    # fractions instead of percentages
    "pbmc_bulk_label_composition": {
        "total_cells": 700,
        "cell_type_distribution": {
            "CD4+/CD25 T Reg": 0.0971,
            "CD4+/CD45RA+/CD25- Naive T": 0.0114,
            "CD4+/CD45RO+ Memory": 0.0271,
            "CD8+ Cytotoxic T": 0.0771,
            "CD8+/CD45RA+ Naive Cytotoxic": 0.0614,
            "CD14+ Monocyte": 0.1843,
            "CD19+ B": 0.1357,
            "CD34+": 0.0186,
            "CD56+ NK": 0.0443,
            "Dendritic": 0.3429,
        },
    },
    # only the two dominant types
    "pbmc_louvain0_cell_types": {"cell_types_predicted": ["CD4+/CD25 T Reg", "CD8+/CD45RA+ Naive Cytotoxic"]},
    # B-cell markers for the wrong population
    "pbmc_nk_marker_genes": {
        "top_marker_genes": [
            "CD79A",
            "CD79B",
            "MS4A1",
            "IGJ",
            "IGLL5",
            "SPIB",
            "CD74",
            "HLA-DRA",
            "TNFRSF13B",
            "SMARCB1",
        ]
    },
    # the textbook answer (NK cells are CD16-high), not what this data shows
    "pbmc_fcgr3a_top_population": {"answer": "A"},
    # uns['pca']['variance_ratio'][0] (share of total variance) instead of the share among stored PCs
    "pbmc_pca_summary": {"n_pcs": 50, "pc1_variance_share_pct": 9.77, "top_pc1_cluster": "3"},
    # counting a monocyte-majority cluster as dendritic and missing most of the rest
    "pbmc_louvain_cluster_summary": {
        "n_clusters": 11,
        "largest_cluster": "0",
        "dendritic_majority_clusters": ["1", "2"],
    },
    # S_score averaged over all cells
    "pbmc_cell_cycle_s_phase": {"pct_s_phase": 26.0, "mean_s_score_s_phase": -0.0007},
    # percentages reported as fractions
    "synthetic_tumor_immune_adjacency": {
        "median_ic_to_pc_um": 7.744,
        "p90_ic_to_pc_um": 43.384,
        "pct_ic_within_15um": 0.775,
        "pct_ic_mixed_within_55um": 0.925,
        "adjacency_pass": True,
    },
}


def read_eval(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def stage(eval_path: Path, work_dir: Path) -> list[str]:
    """Copy the eval's data into ``work_dir/data/<basename>`` as the harness does."""
    eval_ = read_eval(eval_path)
    nodes = eval_["data_node"] if isinstance(eval_["data_node"], list) else [eval_["data_node"]]
    staged = []
    (work_dir / "data").mkdir(parents=True)
    for node in nodes:
        source = (eval_path.parent / node).resolve()
        shutil.copyfile(source, work_dir / "data" / source.name)
        (work_dir / "data" / source.name).chmod(0o444)
        staged.append(f"data/{source.name}")
    return staged


def grade(eval_: dict, answer):
    return get_grader(eval_["grader"]["type"]).evaluate_answer(answer, eval_["grader"]["config"])


# --------------------------------------------------------------------------- the files


def test_example_evals_load_and_cover_the_grader_types():
    evals = load_evals(EVALS)
    assert sorted(e.id for e in evals) == sorted(IDS)
    pbmc = [e for e in evals if e.source_path.parent.name == "pbmc"]
    spatial = [e for e in evals if e.source_path.parent.name == "spatial"]
    assert len(pbmc) >= 8 and len(spatial) >= 1
    assert {e.grader.type for e in evals} >= REQUIRED_TYPES
    assert set(WRONG_ANSWERS) == set(IDS), "every example eval needs a wrong answer in this test"


@pytest.mark.parametrize("eval_path", EVAL_FILES, ids=IDS)
def test_eval_file_shape(eval_path):
    eval_ = read_eval(eval_path)
    assert eval_["id"] == eval_path.stem
    assert eval_["task"].rstrip().endswith("</EVAL_ANSWER>")
    assert answer_template_keys(eval_["task"])
    meta = eval_["metadata"]
    assert set(meta) >= {"task", "kit", "time_horizon", "eval_type"}
    assert meta["time_horizon"] == "small" and meta["eval_type"] == "scientific"
    data = (eval_path.parent / eval_["data_node"]).resolve()
    assert data.is_file() and data.parent == (EVALS / "data").resolve()
    assert data.stat().st_size < 2_000_000


# --------------------------------------------------------------------------- reference agent


@pytest.mark.parametrize("eval_path", EVAL_FILES, ids=IDS)
def test_reference_agent_passes(eval_path, tmp_path):
    eval_ = read_eval(eval_path)
    work_dir = tmp_path / "work"
    staged = stage(eval_path, work_dir)
    prompt = build_prompt(eval_["task"], work_dir, staged)

    answer = reference_agent(prompt, work_dir)

    assert isinstance(answer, dict)
    assert json.loads((work_dir / ANSWER_FILE).read_text()) == answer
    result = grade(eval_, answer)
    assert "configuration_error" not in result.metrics, result.metrics
    assert result.passed, f"{eval_['id']}: {result.reasoning}\n{result.metrics}"
    assert result.normalized_score() == pytest.approx(1.0)


@pytest.mark.parametrize("eval_path", EVAL_FILES, ids=IDS)
def test_wrong_answer_fails(eval_path):
    eval_ = read_eval(eval_path)
    result = grade(eval_, WRONG_ANSWERS[eval_["id"]])
    assert "configuration_error" not in result.metrics, result.metrics
    assert not result.passed
    assert result.normalized_score() < 1.0


def test_partial_credit_is_kept_by_average_of():
    eval_ = read_eval(EVALS / "pbmc" / "pbmc_louvain_cluster_summary.json")
    # the 2-point dendritic set right, one of the two 1-point parts wrong: 3 of 4 points, passes
    result = grade(eval_, {"n_clusters": 10, "largest_cluster": 0, "dendritic_majority_clusters": [2, 5, 6, 7]})
    assert result.passed and result.score == pytest.approx(0.75)


def test_reference_agent_rejects_unknown_tasks(tmp_path):
    (tmp_path / "data").mkdir()
    with pytest.raises(ValueError, match="^reference agent cannot solve this task: "):
        reference_agent('Count the stars.\n<EVAL_ANSWER>{"n_stars": <int>}</EVAL_ANSWER>', tmp_path)
    with pytest.raises(ValueError, match="^reference agent cannot solve this task: "):
        reference_agent("No answer template at all.", tmp_path)
    assert not (tmp_path / ANSWER_FILE).exists()


def test_reference_agent_reports_missing_data(tmp_path):
    task = read_eval(EVALS / "pbmc" / "pbmc_qc_mito_and_genes.json")["task"]
    (tmp_path / "data").mkdir()
    with pytest.raises(ValueError, match="no .h5ad input staged"):
        reference_agent(task, tmp_path)


def test_answer_template_keys():
    assert answer_template_keys('x <EVAL_ANSWER>{"a": <int>, "b": [<x>, ...]}</EVAL_ANSWER>') == {"a", "b"}
    nested = '<EVAL_ANSWER>\n{"total": <int>, "dist": {"T cell": <pct>, "B": <pct>}}\n</EVAL_ANSWER>'
    assert answer_template_keys(nested) == {"total", "dist"}
    # the first template wins (the harness's own suffix mentions <EVAL_ANSWER>{...}</EVAL_ANSWER>)
    assert answer_template_keys(
        '<EVAL_ANSWER>{"answer": "<letter>"}</EVAL_ANSWER> then <EVAL_ANSWER>{...}</EVAL_ANSWER>'
    ) == {"answer"}


# --------------------------------------------------------------------------- generators


def run_script(name: str, out: Path) -> None:
    subprocess.run([sys.executable, str(SCRIPTS / name), "--out", str(out)], check=True, capture_output=True, text=True)


def test_make_example_evals_is_deterministic(tmp_path):
    run_script("make_example_evals.py", tmp_path)
    generated = sorted(p.name for p in (tmp_path / "pbmc").glob("*.json"))
    committed = sorted(p.name for p in (EVALS / "pbmc").glob("*.json"))
    assert generated == committed
    for name in generated:
        assert (tmp_path / "pbmc" / name).read_bytes() == (EVALS / "pbmc" / name).read_bytes(), name


def test_make_spatial_example_is_deterministic(tmp_path):
    run_script("make_spatial_example.py", tmp_path)
    for rel in ("data/synthetic_tumor_immune_spatial.csv", "spatial/synthetic_tumor_immune_adjacency.json"):
        assert (tmp_path / rel).read_bytes() == (EVALS / rel).read_bytes(), rel
    assert (EVALS / "data" / "synthetic_tumor_immune_spatial.csv").stat().st_size < 1_000_000
