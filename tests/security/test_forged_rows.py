"""What an agent forges of its own row: the numbers and labels stored are the trusted side's.

An agent run by ``rayeval run`` (sandboxed) writes the runner's metadata keys, turns it never
took, a refusal verdict no model gave and a run summary of its choosing; a sandboxed
``evaluations.run`` callable rewrites the metadata its unit runner sends back, claiming costs
and tokens the gateway never counted. Each row must hold the gateway's counts and none of
those claims, and the viewer must show no refusal the row does not record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rayeval import evaluations
from rayeval.cli import main as rayeval_main
from rayeval.models.prices import PRICING_VERSION
from rayeval.view.data import unit_detail

pytestmark = pytest.mark.usefixtures("shared_ray")

FAST = {"show_progress": False, "print_report": False, "flush_seconds": 0.2}


def test_a_run_stores_no_metadata_turns_or_refusal_the_agent_forged(tmp_path: Path) -> None:
    evals = tmp_path / "evals"
    evals.mkdir()
    grader = {"ground_truth": {"value": 2}, "tolerances": {"value": {"type": "absolute", "value": 0.01}}}
    body = {"id": "forged", "task": "Find the value.", "grader": {"type": "numeric_tolerance", "config": grader}}
    (evals / "forged.json").write_text(json.dumps(body))
    root = tmp_path / "results"
    agent = "tests.security.forging_agents:forged_metadata"
    code = rayeval_main(["run", str(evals), "--agent", agent, "--output", str(root), "--retries", "0", "--no-progress"])
    assert code == 0
    [row] = pd.read_parquet(root).to_dict("records")
    assert row["isolation"] == "sandbox" and row["status"] == "failed"
    metadata = json.loads(row["metadata_json"])
    assert "session_checkpoints" not in metadata and "work_dir" not in metadata
    assert "claims_differ_from_gateway" not in metadata
    assert metadata["gateway"]["n_model_calls"] == 0  # the gateway's own block, not the agent's
    # no more turns than model calls the gateway relayed (none); the claim stays in the metadata
    assert row["n_model_calls"] == 0 and row["n_turns"] == 0 and metadata["n_turns"] == 10**18
    summary = metadata["run_summary"]  # rayeval's: the forged one is kept as the agent's
    assert row["refusal"] is False and summary["refusal"] == "not_detected"
    assert (summary["n_turns"], summary["cost_usd"], summary["usage"]["input_tokens"]) == (0, 0.0, None)
    assert (summary["duration_s"], summary["pricing_version"]) == (row["agent_s"], PRICING_VERSION)
    assert metadata["agent_reported_summary"]["cost_usd"] == 1e-6
    shown = unit_detail(row, row, {})
    assert "refusal_verdict.json" in {artifact["name"] for artifact in shown["artifacts"]}
    assert shown["refusal"] is False and shown["refusal_verdict"] is None  # no "The model refused" box


def forger(cost_usd: float) -> Any:
    """A callable that, run in the sandbox, rewrites the metadata its unit runner sends back:
    made in a function, so that Ray sends it by value."""

    def forge(question: str, **kwargs: Any) -> str:
        from rayeval.sandbox import unit_runner

        encode = unit_runner._encode

        def forged(payload: dict[str, Any]) -> Any:
            value = payload.get("value")
            if isinstance(value, dict) and "metadata" in value:
                value["metadata"] = {
                    "cost_usd": cost_usd,
                    "input_tokens": -(2**63),
                    "output_tokens": 7,
                    "n_turns": 99,
                    "run_summary": {"version": 2, "refusal": "detected"},
                }
            return encode(payload)

        unit_runner._encode = forged
        return "an answer"

    return forge


def logged_cost(log: dict[str, Any]) -> float:
    return -1.0 if log["cost_usd"] is None else log["cost_usd"]


def test_an_evaluation_stores_the_gateways_counts_not_the_callables_claims(tmp_path: Path) -> None:
    output = str(tmp_path / "results")
    evaluators = [{"path": "cost", "return_type": "number", "callable": logged_cost}]
    dataset = {"path": "qa/forged", "datapoints": [{"inputs": {"question": "q"}, "target": {"answer": "a"}}]}
    result = evaluations.run("forged", {"path": "forger", "callable": forger(-1000.0)}, evaluators, dataset,
                             workers=1, output=output, **FAST)  # fmt: skip
    [row] = pd.read_parquet(output).to_dict("records")
    assert row["isolation"] == "sandbox" and row["status"] == "passed"
    assert (row["cost_usd"], row["agent_cost_usd"], row["input_tokens"], row["output_tokens"]) == (0.0, 0.0, 0, 0)
    assert row["n_model_calls"] == 0 and row["n_turns"] == 0 and row["refusal"] is False
    claims = json.loads(row["metadata_json"])["claims_differ_from_gateway"]  # kept, and flagged
    assert claims["cost_usd"] == {"claimed": -1000.0, "counted": 0.0}
    assert claims["input_tokens"] == {"claimed": -(2**63), "counted": 0}
    # the evaluators' log holds the same counts
    assert json.loads(row["metrics_json"])["evaluators"] == {"cost": 0.0}
    assert result.stats.run_stats[0].num_logs == 1


def test_a_forged_cost_spends_none_of_the_runs_budget(tmp_path: Path) -> None:
    output = str(tmp_path / "results")
    evaluators = [{"path": "cost", "return_type": "number", "callable": logged_cost}]
    dataset = {"path": "qa/priced", "datapoints": [{"inputs": {"question": f"q{i}"}} for i in range(3)]}
    evaluations.run("priced", {"path": "forger", "callable": forger(5.0)}, evaluators, dataset,
                    workers=1, output=output, max_cost_usd=1.0, **FAST)  # fmt: skip
    rows = pd.read_parquet(output)
    assert len(rows) == 3 and set(rows["cost_usd"]) == {0.0} and set(rows["limit_reached"].dropna()) == set()
