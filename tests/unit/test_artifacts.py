"""What a unit's agent leaves in its work folder stays confined to that unit: artifacts
(trajectory.json, its logs) and answer files are read without following links, from their
end and within caps that can be set per run (issue 16)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from rayeval import EvalRunner
from rayeval.batch.plan import plan_units
from rayeval.batch.rows import row_from_result
from rayeval.cli import _sandbox_config, build_parser
from rayeval.sandbox.config import MAX_ARTIFACT_BYTES, MiB, SandboxConfig, UnitLimits
from tests.batch.conftest import write_mc_evals

TRUNCATED = "[... truncated ...]\n"
SPARSE_BYTES = 1536 * MiB


@pytest.fixture
def runner(tmp_path: Path) -> EvalRunner:
    evals = write_mc_evals(tmp_path / "evals", ["e1"])
    return EvalRunner(evals / "e1.json", work_root=tmp_path / "work", cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
@pytest.mark.parametrize("target", ["/etc/passwd", "outside"])
def test_artifacts_linking_out_of_the_work_folder_are_not_followed(
    runner: EvalRunner, tmp_path: Path, isolation: str, target: str
) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text('["secret of another unit"]')
    pointed_at = Path("/etc/passwd") if target == "/etc/passwd" else outside

    def agent(prompt: str, work_dir: Path) -> dict:
        (work_dir / "trajectory.json").symlink_to(pointed_at)
        (work_dir / "agent_output.log").symlink_to(pointed_at)
        return {"answer": "B"}

    result = runner.run(agent, isolation=isolation)
    assert result.passed, result.error_message
    assert "trajectory.json" not in result.artifacts and "agent_output.log" not in result.artifacts
    text = json.dumps(result.artifacts)
    assert "root:" not in text and "secret of another unit" not in text


def test_a_huge_sparse_trajectory_is_read_from_its_end_within_the_cap(
    runner: EvalRunner,
) -> None:
    """1.5 GB (sparse: no disk used) ending in a marker: the unit passes, the last 2 MiB are
    kept, the trusted side never holds the file, and the row carries it once."""

    def agent(prompt: str, work_dir: Path) -> dict:
        with open(work_dir / "trajectory.json", "wb") as handle:
            handle.truncate(SPARSE_BYTES - 4)
            handle.seek(0, 2)
            handle.write(b"END]")
        return {
            "answer": {"answer": "B"},
            "metadata": {"trajectory": ["also returned"]},
        }

    tracemalloc.start()
    try:
        result = runner.run(agent)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.passed, result.error_message
    trajectory = result.artifacts["trajectory.json"]
    assert trajectory.startswith(TRUNCATED) and trajectory.endswith("END]")
    assert len(trajectory) == len(TRUNCATED) + MAX_ARTIFACT_BYTES
    assert peak < 64 * MiB, f"{peak} bytes held while reading a {SPARSE_BYTES}-byte trajectory"

    unit = plan_units([runner.eval], ["m"], [1], "agent")[0]
    row = row_from_result(
        result,
        unit=unit,
        eval_=runner.eval,
        run_id="r",
        agent="agent",
        agent_args={},
        attempt=1,
        node="n",
    )
    assert "trajectory" not in json.loads(row.metadata_json)  # the file's, not also the returned one
    assert json.loads(row.artifacts_json)["trajectory.json"] == trajectory


def test_the_caps_are_set_per_run(runner: EvalRunner) -> None:
    limits = UnitLimits(answer_file_mb=0.01, artifact_mb=0.01)
    cap = int(0.01 * MiB)

    def agent(prompt: str, work_dir: Path) -> None:
        (work_dir / "trajectory.json").write_text("[" + "0," * cap + "0]")
        (work_dir / "eval_answer.json").write_text(json.dumps({"answer": "B", "padding": "x" * cap}))

    result = runner.run(agent, sandbox=SandboxConfig(limits=limits))
    assert result.status == "error" and result.error_type == "AnswerTooLarge"
    assert f"more than the {cap} that are read" in result.error_message and "eval_answer.json" in result.error_message
    assert len(result.artifacts["trajectory.json"]) == len(TRUNCATED) + cap

    again = runner.run(agent)  # the defaults take both
    assert again.passed and again.artifacts["trajectory.json"].startswith("[0,")


def test_the_caps_have_options_of_their_own() -> None:
    args = build_parser().parse_args(
        [
            "run",
            "evals",
            "--agent",
            "a",
            "--output",
            "o",
            "--limit-answer-file-mb",
            "3",
            "--limit-artifact-mb",
            "0.5",
        ]
    )
    limits = _sandbox_config(args).limits
    assert (limits.answer_file_mb, limits.artifact_mb) == (3, 0.5)
    defaults = _sandbox_config(build_parser().parse_args(["run", "evals", "--agent", "a", "--output", "o"])).limits
    assert (defaults.answer_file_mb, defaults.artifact_mb) == (10, 2)
