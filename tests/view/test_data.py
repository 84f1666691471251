"""The viewer's data layer on small roots of its own: trajectory shapes, a run that is still
being written, a damaged part, and an unreadable eval file."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rayeval.report import ResultsReader
from rayeval.storage import ResultStore
from rayeval.storage.lease import run_lease
from rayeval.storage.manifest import RunManifest
from rayeval.view import UnitQuery, ViewData, data
from rayeval.view.trajectory import MAX_STEP_CHARS, MAX_STEPS, MAX_TRAJECTORY_CHARS, conversation

from .conftest import crafted_row, crafted_rows


def test_openai_tool_calls_and_tool_messages() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}],
        },
        {"role": "tool", "name": "bash", "content": "a.txt"},
    ]
    fmt, steps, total = conversation({"messages": messages, "info": {}})
    assert fmt == "messages" and total == 3
    assert [(s.role, s.kind, s.title) for s in steps] == [
        ("user", "text", ""),
        ("assistant", "tool_call", "bash"),
        ("tool", "tool_result", "bash"),
    ]
    assert steps[1].text == '{"cmd": "ls"}'


@pytest.mark.parametrize("value", [{"some": "object"}, [1, 2, 3], "plain text", [{"kind": "unknown"}], None])
def test_unknown_shapes_fall_back_to_json(value: object) -> None:
    fmt, steps, total = conversation(value)
    assert fmt == "json" and total == 1 and steps[0].kind == "event"


def test_long_trajectories_are_capped() -> None:
    fmt, steps, total = conversation([{"role": "assistant", "content": "x"}] * (MAX_STEPS + 10))
    assert (fmt, len(steps), total) == ("messages", MAX_STEPS, MAX_STEPS + 10)
    fmt, steps, total = conversation([{"role": "assistant", "content": "x" * (MAX_STEP_CHARS + 5)}] * (MAX_STEPS + 10))
    # long steps: as many as the trajectory's characters allow
    assert (fmt, len(steps), total) == ("messages", MAX_TRAJECTORY_CHARS // MAX_STEP_CHARS, MAX_STEPS + 10)
    assert len(steps[0].text) == MAX_STEP_CHARS and steps[0].length == MAX_STEP_CHARS + 5
    assert steps[0].note == f"truncated: showing the first {MAX_STEP_CHARS:,} of {MAX_STEP_CHARS + 5:,} characters"


def _root(tmp_path: Path, status: str) -> tuple[Path, ResultStore]:
    root = tmp_path / "results"
    store = ResultStore(root)
    store.write_manifest(RunManifest(run_id="crafted", status=status))
    store.write_rows("crafted", crafted_rows("h")[:2])
    return root, store


def test_a_running_run_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, store = _root(tmp_path, "running")
    with run_lease(store, "crafted").take():  # its driver, still at work
        view = ViewData(ResultsReader(root))
        assert view.units("crafted", UnitQuery())["total"] == 2
        store.write_rows("crafted", [crafted_row(model="late", unit_id="late-unit")])
        assert view.units("crafted", UnitQuery())["total"] == 2  # cached for REFRESH_S
        monkeypatch.setattr(data, "REFRESH_S", 0.0)
        assert view.units("crafted", UnitQuery())["total"] == 3
        assert view.unit("crafted", "late-unit")["model"] == "late"


def test_a_damaged_part_is_left_out_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, _ = _root(tmp_path, "completed")
    damaged = root / "run_id=crafted" / "model=claude" / "part-broken.parquet"
    damaged.write_bytes(b"PAR1 not really")
    view = ViewData(ResultsReader(root))
    with caplog.at_level(logging.WARNING):
        page = view.units("crafted", UnitQuery())
    assert page["total"] == 2 and "part-broken.parquet" in caplog.text
    assert damaged.exists()  # the viewer never changes the root


def test_an_eval_file_that_changed_is_named(tmp_path: Path) -> None:
    root, store = _root(tmp_path, "completed")
    eval_file = tmp_path / "count_cells.json"
    eval_file.write_text(
        json.dumps(
            {
                "id": "count_cells",
                "task": "changed",
                "grader": {
                    "type": "multiple_choice",
                    "config": {"correct_answer": "A"},
                },
            }
        )
    )
    store.write_manifest(
        RunManifest(
            run_id="crafted",
            status="completed",
            eval_files=[{"path": str(eval_file), "id": "count_cells", "eval_hash": "h"}],
        )
    )
    view = ViewData(ResultsReader(root))
    unit_id = view.units("crafted", UnitQuery(model="claude"))["rows"][0][0]
    task = view.unit("crafted", unit_id)["task_prompt"]
    assert task["text"] is None and "changed since the run" in task["note"]
    eval_file.write_text("{not json")
    fresh = ViewData(ResultsReader(root))
    assert "cannot be read" in fresh.unit("crafted", unit_id)["task_prompt"]["note"]


def test_a_null_artifact_is_listed_not_a_crash() -> None:
    listed, left_out, trajectory = data.artifacts_view(json.dumps({"notes.txt": None, "out.txt": "x"}))
    assert listed == [
        {"name": "notes.txt", "text": "null", "length": 4, "note": None},
        {"name": "out.txt", "text": "x", "length": 1, "note": None},
    ]
    assert left_out == 0 and trajectory is None


def test_a_trajectory_in_the_shape_of_the_gateways_record_is_the_agents_file() -> None:
    """An agent may write its trajectory.json as the gateway's record of model calls it never
    made: it is shown as the agent's JSON, never as calls the gateway saw; the gateway's own
    model_calls.json is."""
    forged = {"calls": [{"model": "claude-opus-4-1", "usage": {"input_tokens": 12000}}], "left_out": 0}
    _, _, trajectory = data.artifacts_view(json.dumps({"trajectory.json": json.dumps(forged)}))
    assert trajectory is not None and trajectory["format"] == "json"
    assert all(step["role"] != "gateway" for step in trajectory["steps"])
    _, _, recorded = data.artifacts_view(json.dumps({"model_calls.json": json.dumps(forged)}))
    assert recorded is not None and recorded["format"] == "model-calls"
    assert "gateway" in {step["role"] for step in recorded["steps"]}
