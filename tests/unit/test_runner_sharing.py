"""A worker keeps one unit runner, whatever eval or thread a unit comes from."""

from __future__ import annotations

import json
from pathlib import Path

from rayeval import EvalRunner, load_evals
from rayeval.agents.resolve import agent_ref
from rayeval.sandbox import SandboxConfig, units


def _evals(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True)
    body = {"id": name, "task": "A or B?", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    (folder / f"{name}.json").write_text(json.dumps(body))
    return folder


def test_units_of_several_evals_folders_and_threads_share_one_runner(tmp_path: Path) -> None:
    evals = load_evals(_evals(tmp_path / "one", "a"), _evals(tmp_path / "two", "b"))
    config = SandboxConfig(hide=tuple(str(root) for e in evals for root in e.data_roots))  # as the engine makes it
    units.close_runners()
    try:
        for index, eval_ in enumerate(evals * 2):
            runner = EvalRunner(
                eval_,
                work_root=tmp_path / "work" / f"thread-{index}",
                runner_root=tmp_path / "work",
                cache_dir=tmp_path / "cache",
            )
            result = runner.run(agent_ref("sleep"), agent_args={"seconds": "0"}, sandbox=config)
            assert result.isolation == "sandbox" and result.error_type == "NoAnswer", result.error_message
        assert [isolation for _, isolation, *_ in units._RUNNERS] == ["sandbox", "process"]  # the units', the gradings'
    finally:
        units.close_runners()
