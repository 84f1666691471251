"""A run's budget (``--max-cost``) through ``rayeval run``, real Ray: what its units' model
calls cost, as the gateways count them over the cluster; once spent, no unit starts, a unit
still running has its calls refused, and the run stops (exit 3), resumable with a higher one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from rayeval.cli import main
from rayeval.storage import ResultStore
from tests.agents.fake_model_server import FakeModelServer
from tests.embedded import one_ray

CALL_COST = (1000 * 3 + 50 * 15) / 1e6  # a call of the scripted server at claude-sonnet-4-5's price
GRADER = {"type": "numeric_tolerance", "config": {"ground_truth": {"value": 1},
          "tolerances": {"value": {"type": "absolute", "value": 0}}}}  # fmt: skip


@pytest.fixture
def evals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with FakeModelServer(script=[], answer=lambda body: "ok") as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        folder = tmp_path / "evals"
        folder.mkdir()
        (folder / "e.json").write_text(json.dumps({"id": "e", "task": "Answer.", "grader": GRADER}))
        yield folder


def run(evals: Path, out: Path, *options: str) -> int:
    return main(
        ["run", str(evals), "--agent", "tests.gateway.limit_agents:one_call", "--seeds", "6", "--output", str(out),
         "--run-id", "budgeted", "--max-concurrency", "1", "--no-progress", *options]
    )  # fmt: skip


@pytest.mark.slow  # a budget run out mid-run and resumed higher, end to end: ~35 s
def test_a_spent_budget_stops_the_run_and_a_higher_one_finishes_it(
    evals: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with one_ray():  # the run, its dry run and its resume
        check_budget_and_resume(evals, out, capsys)


def check_budget_and_resume(evals: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(evals, out, "--max-cost", "0.01") == 3
    err = capsys.readouterr().err
    assert "its budget of $0.01 is spent" in err and "--resume --run-id budgeted" in err, err
    rows = pd.read_parquet(out)
    assert 3 <= len(rows) < 6  # 0.01 USD is 2.7 calls; a unit started before the spend was seen is refused
    paid = rows[rows["n_model_calls"] == 1]
    assert len(paid) == 3 and paid["cost_usd"].sum() == pytest.approx(3 * CALL_COST)
    refused = rows[rows["n_model_calls"] == 0]
    assert (refused["limit_reached"] == "run_cost").all()
    assert ResultStore(str(out)).read_manifest("budgeted").status == "cancelled"
    # the dry run of the resume says what is spent and what is left
    assert run(evals, out, "--max-cost", "1", "--resume", "--dry-run") == 0
    assert "budget (--max-cost): $1.00, $0.01 of it spent by the run's stored rows" in capsys.readouterr().out
    assert run(evals, out, "--max-cost", "1", "--resume") == 0
    latest = pd.read_parquet(out).sort_values("attempt").groupby("unit_id").last()
    assert len(latest) == 6 and latest["passed"].all()


@pytest.mark.slow
def test_the_prompt_agent_spends_the_budget_through_the_gateway(
    evals: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The prompt agent runs in the worker, its calls through the gateway as a sandboxed
    unit's: each (3 tenths of a cent, gpt-4o's price) counts as it is made. Its units are
    quick: those started before the driver saw the spend have their call refused, and the run
    stops all the same (exit 3); its resume with a higher budget runs them again."""
    out = tmp_path / "out"
    with FakeModelServer(script=[], answer=lambda body: '<EVAL_ANSWER>{"value": 1}</EVAL_ANSWER>') as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
        check_quick_units_and_resume(evals, out, server, capsys)
    latest = pd.read_parquet(out).sort_values("attempt").groupby("unit_id").last()
    assert len(latest) == 6 and latest["passed"].all() and (latest["n_model_calls"] == 1).all()


def check_quick_units_and_resume(
    evals: Path, out: Path, server: FakeModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with one_ray():  # the run and its resume, the workers with the keys set above
        options = ["--agent", "prompt", "--models", "openai/gpt-4o", "--seeds", "6", "--output", str(out),
                   "--run-id", "quick", "--max-concurrency", "1", "--no-progress"]  # fmt: skip
        code = main(["run", str(evals), *options, "--max-cost", "0.007"])
        err = capsys.readouterr().err
        served = len(server.model_requests())
        rows = pd.read_parquet(out)
        paid, refused = rows[rows["n_model_calls"] == 1], rows[rows["n_model_calls"] == 0]
        assert code == 3 and "its budget of $0.007 is spent" in err, err
        assert served == len(paid) == 3 and paid["cost_usd"].sum() == pytest.approx(0.009)
        assert (refused["limit_reached"] == "run_cost").all()
        if len(refused):
            assert f"{len(refused)} had model calls refused (limit_reached: run_cost)" in err
        assert main(["run", str(evals), *options, "--max-cost", "1", "--resume"]) == 0


@pytest.mark.usefixtures("shared_ray")
def test_a_spend_on_its_way_to_the_run_counts_as_spent() -> None:
    """A worker's spend counts while its report to the run is under way: the gateway of a
    quick unit asking then is refused (the reply is slow here), not told the run's old spend."""
    import threading
    import time

    import ray

    from rayeval.batch.budget import BudgetView

    @ray.remote(num_cpus=0)
    class SlowSpend:
        def __init__(self) -> None:
            self.spent = 0.0

        def add(self, usd: float) -> float:
            time.sleep(2)
            self.spent += usd
            return self.spent

    actor = SlowSpend.options(name="rayeval-budget-slow").remote()  # type: ignore[attr-defined]
    view = BudgetView("slow", max_cost_usd=0.007)
    try:
        view.charge(3 * 0.003)
        sending = threading.Thread(target=view.spent)
        sending.start()
        time.sleep(0.5)  # the send is under way (the reply takes 2 s)
        assert sending.is_alive() and view.spent_out()
        sending.join()
        assert view.spent_out() and view.spent() == pytest.approx(0.009)
    finally:
        view.close()
        ray.kill(actor)
