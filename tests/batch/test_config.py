"""A run's configuration by concern: the options by their own names land in their concern,
and the command line's defaults are the models' own."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rayeval.batch.config import BatchConfig, ExecutionConfig, RayConfig, SchedulingConfig, option_field
from rayeval.cli import _batch_config, _option_problems, build_parser
from rayeval.sandbox.config import SandboxConfig


def test_options_by_their_names_land_in_their_concern() -> None:
    flat = BatchConfig(
        evals=["e"], agent="a", output="o", workers=4, max_concurrency=8, isolation="process", run_id="r",
        show_progress=False,
    )  # fmt: skip
    nested = BatchConfig(
        evals=["e"],
        agent="a",
        ray=RayConfig(workers=4),
        scheduling=SchedulingConfig(max_concurrency=8),
        execution=ExecutionConfig(isolation="process"),
        storage={"output": "o", "run_id": "r"},
        display={"show_progress": False},
    )
    assert flat == nested
    assert (flat.ray.workers, flat.scheduling.max_concurrency, flat.storage.run_id) == (4, 8, "r")
    # a concern given whole and one of its fields by name: the name wins, the rest stays
    mixed = BatchConfig(evals=["e"], agent="a", output="o", ray=RayConfig(address="local", workers=2), workers=3)
    assert (mixed.ray.address, mixed.ray.workers) == ("local", 3)
    assert "object_store_memory" in BatchConfig.option_names() and "evals" in BatchConfig.option_names()


def test_a_problem_is_named_by_its_option_not_its_concern() -> None:
    with pytest.raises(ValidationError) as caught:
        BatchConfig(evals=["e"], agent="a", output="o", max_concurrency=0, timeout=-1)
    assert [option_field(error["loc"]) for error in caught.value.errors()] == ["max_concurrency", "timeout"]
    assert _option_problems(caught.value) == (
        "--max-concurrency: must be at least 1 (got 0); --timeout: must be more than 0 (got -1)"
    )


def test_the_command_lines_defaults_are_the_configurations() -> None:
    """Each default is stated once, in the configuration: ``rayeval run`` with no option
    configures what ``BatchConfig`` with none does."""
    args = build_parser().parse_args(["run", "e", "--agent", "a", "--output", "o"])
    assert _batch_config(args) == BatchConfig(evals=["e"], agent="a", output="o")
    assert BatchConfig(evals=["e"], agent="a", output="o").execution.sandbox == SandboxConfig()


def test_the_eta_counts_from_the_units_start_not_the_runs_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose Ray and workers took 20 s to come up, then a unit every 2 s: the first ETA
    is the 18 s left, not the 3 minutes the start-up would make of it."""
    from rayeval.batch import progress as progress_module

    now = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    shown = progress_module.Progress(10, enabled=False)
    now[0] = 20.0
    shown.units_start()
    now[0] = 22.0
    shown.update(passed=True, error=False)
    assert shown.line().endswith("ETA 18s"), shown.line()
