"""Published benchmark files load and grade unchanged; recorded verdicts are reproduced."""

from __future__ import annotations

from collections import Counter

import pytest

from rayeval import grade, load_evals
from tests.conftest import read_jsonl, shared_path

CORPUS = shared_path("corpus")
TRIALS = read_jsonl(shared_path("corpus", "scbench", "trials.jsonl"))


def test_all_sixteen_corpus_evals_load() -> None:
    evals = load_evals(CORPUS / "scbench" / "evals", CORPUS / "spatialbench" / "evals")
    assert len(evals) == 16
    types = Counter(e.grader.type for e in evals)
    assert types == {
        "numeric_tolerance": 8,
        "marker_gene_precision_recall": 3,
        "multiple_choice": 3,
        "distribution_comparison": 1,
        "jaccard_label_set": 1,
    }
    canaries = [e for e in evals if (e.model_extra or {}).get("canary")]
    assert len(canaries) == 6  # scbench files carry a canary key, kept as an extra


def test_regrading_every_recorded_trial_reproduces_its_verdict() -> None:
    evals = {e.id: e for e in load_evals(CORPUS / "scbench" / "evals")}
    mismatches = []
    for trial in TRIALS:
        result = grade(evals[trial["eval_id"]], trial["answer"])
        if result.passed is not trial["recorded_passed"]:
            mismatches.append((trial["eval_id"], trial["model"], trial["trial"], result.reasoning))
        assert "configuration_error" not in result.metrics
    assert len(TRIALS) == 273
    assert mismatches == []


@pytest.mark.parametrize(
    "trial",
    [t for t in TRIALS if t["recorded_metrics"]][:40],
    ids=lambda t: f"{t['eval_id']}-{t['model']}-{t['trial']}",
)
def test_recorded_numeric_metrics_match(trial: dict) -> None:
    (eval_,) = [e for e in load_evals(CORPUS / "scbench" / "evals") if e.id == trial["eval_id"]]
    metrics = grade(eval_, trial["answer"]).metrics
    for key, value in trial["recorded_metrics"].items():
        assert key in metrics, key
        if isinstance(value, float):
            assert metrics[key] == pytest.approx(value, abs=1e-9), key
        else:
            assert metrics[key] == value, key
