"""`rayeval validate` and `rayeval grade` as a user runs them: real subprocesses, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import shared_path

CORPUS_EVALS = shared_path("corpus")


def rayeval(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rayeval.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )


def test_validate_counts_valid_evals() -> None:
    done = rayeval("validate", str(CORPUS_EVALS / "scbench" / "evals"), str(CORPUS_EVALS / "spatialbench" / "evals"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "16 eval(s) valid"


def test_validate_lists_every_problem_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{")
    (tmp_path / "b.json").write_text(
        json.dumps({"id": "b", "task": "t", "grader": {"type": "numeric_tolerance", "config": {"ground_truth": {}}}})
    )
    (tmp_path / "c.json").write_text(json.dumps({"id": "c/d", "task": "t", "grader": {"type": "nope"}}))
    done = rayeval("validate", str(tmp_path))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith(str(tmp_path))]
    assert len(lines) == 4, done.stderr
    assert any("a.json" in line and "invalid JSON" in line for line in lines)
    assert any("b.json: grader.config: numeric_tolerance configuration error" in line for line in lines)
    assert any("c.json: id:" in line for line in lines)
    assert any("c.json: grader.type: unknown grader type 'nope'" in line for line in lines)


def test_grade_prints_json_and_exit_code_follows_verdict(tmp_path: Path) -> None:
    eval_file = CORPUS_EVALS / "scbench" / "evals" / "qc" / "bd_rhapsody_tnbc_panel_aware_qc.json"
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"median_genes_per_pbmc": 70, "n_monocytes_pbmc": 2600, "n_pbmcs_retained": 14346}))
    done = rayeval("grade", str(eval_file), str(good))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["passed"] is True and result["score"] == 1.0
    done = rayeval("grade", str(eval_file), "-", stdin=json.dumps({"median_genes_per_pbmc": 200}))
    assert done.returncode == 1
    assert json.loads(done.stdout)["passed"] is False


def test_grade_bad_inputs_exit_2_with_one_clean_message(tmp_path: Path) -> None:
    eval_file = CORPUS_EVALS / "scbench" / "evals" / "qc" / "bd_rhapsody_tnbc_panel_aware_qc.json"
    bad_answer = tmp_path / "answer.json"
    bad_answer.write_text("{not json")
    hostile = {
        "deep.json": "[" * 5000 + "]" * 5000,
        "deeper.json": "[" * 101 + "]" * 101,
        "digits.json": "9" * 5000,
        "many_values.json": json.dumps([{}] * 1_500_000),
    }
    for name, text in hostile.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "large.json").write_text(json.dumps({"x": "y" * (10 << 20)}))
    for args in [
        *((str(eval_file), str(tmp_path / name)) for name in [*hostile, "large.json"]),
        (str(eval_file), str(bad_answer)),
        (str(eval_file), str(tmp_path / "missing.json")),
        (str(tmp_path / "missing_eval.json"), str(bad_answer)),
    ]:
        done = rayeval("grade", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.strip()


def test_grade_stops_a_grading_that_runs_past_its_limit(tmp_path: Path) -> None:
    """longest_subsequence is O(answer steps x ground-truth steps): a crafted answer takes
    seconds; ``rayeval grade`` stops it at --grade-timeout instead of hanging."""
    config = {"answer_field": "steps", "ground_truth": [[f"step {i}"] for i in range(300)]}
    eval_file = tmp_path / "seq.json"
    eval_file.write_text(
        json.dumps({"id": "seq", "task": "t", "grader": {"type": "longest_subsequence", "config": config}})
    )
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"steps": [["x"]] * 300_000}))
    started = time.monotonic()
    done = rayeval("grade", str(eval_file), str(answer), "--grade-timeout", "0.5")
    assert done.returncode == 1 and "GradingTimeout" in done.stderr, done.stderr
    assert time.monotonic() - started < 60
