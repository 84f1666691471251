"""`rayeval run-one` and the built-in agents, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rayeval import EvalRunner, load_evals
from rayeval.agents.resolve import AGENTS, agent_ref
from tests.conftest import read_jsonl, shared_path

REPO = Path(__file__).resolve().parents[2]
SCBENCH = shared_path("corpus", "scbench", "evals")
TRIALS = shared_path("corpus", "scbench", "trials.jsonl")


def run_one(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rayeval.cli", "run-one", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )


def _mc_eval(tmp_path: Path) -> Path:
    """A multiple-choice eval (answer B) in its own folder, not beside the agents' module: the
    eval's folder (answer keys) is hidden from the agent."""
    eval_file = tmp_path / "evals" / "mc.json"
    eval_file.parent.mkdir()
    grader = {"type": "multiple_choice", "config": {"correct_answer": "B"}}
    eval_file.write_text(json.dumps({"id": "mc", "task": "A or B?", "grader": grader}))
    return eval_file


def test_reference_agent_passes_an_example_eval(tmp_path: Path) -> None:
    done = run_one(
        "evals/pbmc/pbmc_bulk_label_composition.json",
        "--agent",
        "reference",
        "--work-root",
        str(tmp_path),
        "--data-root",
        "evals",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "passed" and result["eval_id"] == "pbmc_bulk_label_composition"
    assert list(tmp_path.rglob("eval_answer.json")) == []  # work folder cleaned up


def test_sleep_agent_answers_nothing_and_fails_with_exit_1(tmp_path: Path) -> None:
    args = ("--agent", "sleep", "--agent-arg", "seconds=0.2", "--work-root", str(tmp_path), "--data-root", "evals")
    done = run_one("evals/pbmc/pbmc_qc_mito_and_genes.json", *args)
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "failed" and result["error_type"] == "NoAnswer" and result["agent_s"] >= 0.2


def test_module_function_agent_and_timeout(tmp_path: Path) -> None:
    module = tmp_path / "my_agents.py"
    module.write_text(
        "import time\n"
        "def always_b(task_prompt, work_dir):\n    return {'answer': 'B'}\n"
        "def hang(task_prompt, work_dir):\n    time.sleep(60)\n"
    )
    eval_file = _mc_eval(tmp_path)
    env_cwd = tmp_path
    done = run_one(str(eval_file), "--agent", "my_agents:always_b", "--work-root", str(tmp_path / "w"), cwd=env_cwd)
    assert done.returncode == 0, done.stderr
    done = run_one(
        str(eval_file), "--agent", "my_agents:hang", "--timeout", "1", "--work-root", str(tmp_path / "w"), cwd=env_cwd
    )
    assert done.returncode == 1 and json.loads(done.stdout)["status"] == "timeout"


def test_an_installed_package_offers_an_agent_by_entry_point(tmp_path: Path, install_plugin) -> None:
    source = "def plugin(task_prompt, work_dir):\n    return {'answer': 'B'}\n"
    site = install_plugin(AGENTS, "always-b", "my_plugin_agents", source)
    assert agent_ref("always-b").function is None and "my_plugin_agents" not in sys.modules  # not loaded here
    assert agent_ref("always-b", load=True).function({}, tmp_path) == {"answer": "B"}
    eval_file = _mc_eval(tmp_path)
    for isolation in ("inline", "process", "sandbox"):
        done = run_one(str(eval_file), "--agent", "always-b", "--isolation", isolation, cwd=site)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "passed"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["evals/pbmc/pbmc_qc_mito_and_genes.json", "--data-root", "evals", "--agent", "nope"], "unknown agent 'nope'"),
        (
            ["evals/pbmc/pbmc_qc_mito_and_genes.json", "--data-root", "evals", "--agent", "no_such_module:f"],
            "cannot import module",
        ),
        (
            [
                "evals/pbmc/pbmc_qc_mito_and_genes.json",
                "--data-root",
                "evals",
                "--agent",
                "sleep",
                "--agent-arg",
                "novalue",
            ],
            "key=value",
        ),
        (
            ["evals/pbmc/pbmc_qc_mito_and_genes.json", "--agent", "sleep"],
            "data_node: local data node '../data/pbmc68k_reduced.h5ad'",
        ),
        (["evals/does_not_exist.json", "--agent", "reference"], "no such file"),
    ],
)
def test_bad_input_exits_2_with_a_clean_message(args: list[str], fragment: str) -> None:
    done = run_one(*args)
    assert done.returncode == 2 and fragment in done.stderr and "Traceback" not in done.stderr


def test_replay_reproduces_recorded_verdicts_cost_and_harness(tmp_path: Path) -> None:
    evals = {e.id: e for e in load_evals(SCBENCH)}
    rows = read_jsonl(TRIALS)
    picked = [r for r in rows if r["model"] == "claude-opus-4-7"][:12] + [r for r in rows if r["model"] == "gpt-5.5"][
        :6
    ]
    for row in picked:
        runner = EvalRunner(evals[row["eval_id"]], work_root=tmp_path)
        model = f"{row['model']}@{row['harness']}"
        result = runner.run(
            agent_ref("replay"), model=model, seed=row["trial"], agent_args={"trials": str(TRIALS)}, isolation="inline"
        )
        assert result.passed is row["recorded_passed"], row
        assert result.harness == row["harness"] and result.cost_usd == pytest.approx(row["cost_usd"])
        assert result.duration_s == pytest.approx(row["duration_s"])


def test_replay_without_a_row_or_with_an_ambiguous_model_is_an_error(tmp_path: Path) -> None:
    (eval_,) = [e for e in load_evals(SCBENCH) if e.id == "DE01_pseudobulk_de"]
    runner = EvalRunner(eval_, work_root=tmp_path)
    missing = runner.run(
        agent_ref("replay"), model="no-such-model", seed=1, agent_args={"trials": str(TRIALS)}, isolation="inline"
    )
    assert (
        missing.status == "error"
        and missing.error_type == "ReplayError"
        and "no recorded trial" in missing.error_message
    )
    ambiguous = runner.run(
        agent_ref("replay"), model="claude-opus-4-7", seed=1, agent_args={"trials": str(TRIALS)}, isolation="inline"
    )
    assert ambiguous.status == "error" and "model@harness" in ambiguous.error_message
    no_file = runner.run(agent_ref("replay"), model="gpt-5.5", seed=1, agent_args={}, isolation="inline")
    assert no_file.status == "error" and "trials=PATH" in no_file.error_message


def test_answer_convention_reaches_a_sandboxed_agent(tmp_path: Path) -> None:
    """--answer-convention benchmark: the sandboxed agent is told analysis_output.json (and sees
    the convention in its context); the answer it writes there is graded. Without the option it
    is told eval_answer.json."""
    (tmp_path / "conv_agents.py").write_text(
        "import json, pathlib, re\n"
        "def follow(task_prompt, work_dir, context):\n"
        "    name = re.search(r'to (\\S+\\.json) ', task_prompt).group(1)\n"
        "    told = {'told': pathlib.Path(name).name, 'convention': context.convention}\n"
        "    pathlib.Path(name).write_text(json.dumps({'answer': 'B', **told}))\n"
    )
    eval_file = _mc_eval(tmp_path)
    told = {}
    for convention in ("legacy", "benchmark"):
        done = run_one(
            str(eval_file),
            "--agent",
            "conv_agents:follow",
            "--answer-convention",
            convention,
            "--work-root",
            str(tmp_path / "w"),
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        result = json.loads(done.stdout)
        answer = result["agent_answer"]
        told[convention] = (answer["told"], answer["convention"], result["answer_source"])
    assert told == {
        "legacy": ("eval_answer.json", "legacy", "eval_answer.json"),
        "benchmark": ("analysis_output.json", "benchmark", "analysis_output.json"),
    }


@pytest.mark.parametrize("option", ["--timeout", "--grade-timeout"])
@pytest.mark.parametrize("value", ["1e300", "0", "nan"])
def test_time_limits_beyond_30_days_or_not_positive_are_refused(option: str, value: str, tmp_path: Path) -> None:
    """1e300 s overflowed the unit's waits (an OverflowError row); refused as run refuses it."""
    done = run_one("evals/pbmc/pbmc_qc_mito_and_genes.json", "--agent", "sleep", option, value, "--data-root", "evals")
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert f"{option}: " in done.stderr and "Traceback" not in done.stderr
