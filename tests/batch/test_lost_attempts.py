"""A unit whose worker is lost even after Ray's own retries of its attempt, or whose attempt
could not run (its data): the run's next attempt goes on from the unit's checkpoint (a chunked
session's), where a new attempt after any other failure starts afresh."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rayeval import batch
from rayeval.data import register_resolver
from rayeval.gateway.server import ModelUsage
from rayeval.models.types import Usage
from rayeval.unit.checkpoint import SavedChunk, pack, unit_checkpoints
from rayeval.unit.context import AgentContext

from .conftest import write_mc_evals

#: the calls of the unit's first attempt: Ray's first and its three retries (max_task_retries)
LOST_CALLS = 4


def dies_until_the_attempt_after_the_lost_one(prompt: str, work_dir: str, context: AgentContext) -> dict[str, Any]:
    """The first call saves a checkpoint for attempt 1 (as a chunked session would); that call
    and Ray's retries of it end their worker's process; the next call answers whether its work
    folder was restored from that checkpoint."""
    deaths = Path(context.args["deaths"])
    died = len(deaths.read_text()) if deaths.exists() else 0
    if died == 0:
        _save_checkpoint(context)
    if died < LOST_CALLS:
        deaths.write_text("x" * (died + 1))
        os._exit(1)
    return {"answer": (Path(work_dir) / "restored.txt").exists()}


def _fail_once(uri: str) -> str:
    """A resolver of ``fail-once://<file>``: fails while a ``fail-once`` file lies beside it
    (removing it: the next call succeeds), as a fresh node's download of a unit's data may."""
    path = Path(uri.removeprefix("fail-once://"))
    marker = path.with_name("fail-once")
    if marker.exists():
        marker.unlink()
        raise OSError("the data's store did not answer")
    return str(path)


# where the run's workers import this module (its agents), so that they can stage the data
register_resolver("fail-once", _fail_once)


def dies_then_its_data_fails_once(prompt: str, work_dir: str, context: AgentContext) -> dict[str, Any]:
    """The first call saves a checkpoint for attempt 1, empties the data cache and makes the
    data's next fetch fail, and ends its worker's process: Ray's retry of the attempt cannot
    stage the data; the run's next attempt answers whether its work folder was restored."""
    deaths = Path(context.args["deaths"])
    if not deaths.exists():
        _save_checkpoint(context)
        shutil.rmtree(context.args["cache"])
        Path(context.args["data"]).with_name("fail-once").touch()
        deaths.write_text("x")
        os._exit(1)
    return {"answer": (Path(work_dir) / "restored.txt").exists()}


def saves_a_later_attempts_checkpoint(prompt: str, work_dir: str, context: AgentContext) -> dict[str, Any]:
    """The first call saves a checkpoint as the unit's attempt 2 would have (its driver then
    died with the attempt in flight: no row of it stored); each call answers whether its work
    folder was restored from that checkpoint."""
    deaths = Path(context.args["deaths"])
    if not deaths.exists():
        _save_checkpoint(context, attempt=2)
        sessions = Path(context.args["sessions"])
        shutil.copytree(sessions, deaths.with_name("sessions-in-flight"))  # the run removes them once it is stored
        deaths.write_text("x")
    return {"answer": (Path(work_dir) / "restored.txt").exists()}


def _save_checkpoint(context: AgentContext, attempt: int = 1) -> None:
    folder = Path(unit_checkpoints(context.args["sessions"], context.eval_id, context.model, context.seed))
    saved_work = Path(context.args["deaths"]).with_name("saved-work")
    saved_work.mkdir(parents=True)
    (saved_work / "restored.txt").write_text("from chunk 1")
    folder.mkdir(parents=True)
    tar = io.BytesIO()
    pack(saved_work, tar)
    (folder / "chunk-1.tar").write_bytes(tar.getvalue())
    counted = ModelUsage(n_model_calls=1, usage=Usage(input_tokens=10, output_tokens=1), cost_usd=0.0)
    record = SavedChunk(
        chunk=1, attempt=attempt, session_id=None, counted=counted, calls=[], turns=0, tar_bytes=len(tar.getvalue())
    )
    (folder / "chunk-1.json").write_text(record.model_dump_json())


@pytest.mark.slow  # four worker processes lost and restarted: ~20 s
@pytest.mark.usefixtures("shared_ray")
def test_the_attempt_after_a_lost_one_goes_on_from_its_checkpoint(tmp_path: Path) -> None:
    (row,) = _lost_run(tmp_path, "dies_until_the_attempt_after_the_lost_one", retries=1).itertuples()
    sessions = tmp_path / "out" / "run_id=lost" / "_sessions"
    assert (tmp_path / "deaths").read_text() == "x" * LOST_CALLS
    assert row.attempt == 2 and json.loads(row.answer_json) == {"answer": True}, row.error_message
    assert json.loads(row.metadata_json)["session_checkpoints"] == {"saved": 1, "resumed_from": 1}
    assert not any(sessions.iterdir())  # removed once its row was stored


@pytest.mark.slow  # a worker process lost and restarted: ~10 s
@pytest.mark.usefixtures("shared_ray")
def test_the_attempt_after_one_that_could_not_stage_its_data_goes_on_from_its_checkpoint(tmp_path: Path) -> None:
    data = tmp_path / "inputs" / "counts.csv"
    data.parent.mkdir()
    data.write_text("gene,count\nCD3E,4\n")
    (row,) = _lost_run(tmp_path, "dies_then_its_data_fails_once", data=data, retries=1).itertuples()
    assert not data.with_name("fail-once").exists()  # Ray's retry of attempt 1 met the failing fetch
    assert row.attempt == 2 and json.loads(row.answer_json) == {"answer": True}, row.error_message
    assert json.loads(row.metadata_json)["session_checkpoints"] == {"saved": 1, "resumed_from": 1}


def _lost_run(tmp_path: Path, agent: str, *, data: Path | None = None, **options: Any) -> pd.DataFrame:
    """Run (or resume) run ``lost`` of one chunked unit with ``agent`` of this module (with
    ``data``: its eval's data node is ``fail-once://<data>``, staged through the run's own
    cache); its rows."""
    evals = write_mc_evals(tmp_path / "evals", ["lost_1"])
    output = tmp_path / "out"
    args = {
        "chunk_turns": "1",
        "deaths": str(tmp_path / "deaths"),
        "sessions": str(output / "run_id=lost" / "_sessions"),
    }
    if data is not None:
        eval_file = evals / "lost_1.json"
        eval_file.write_text(json.dumps({**json.loads(eval_file.read_text()), "data_node": f"fail-once://{data}"}))
        options["cache_dir"] = args["cache"] = str(tmp_path / "cache")
        args["data"] = str(data)
    batch.run(
        str(evals),
        agent=f"tests.batch.test_lost_attempts:{agent}",
        agent_args=args,
        output=str(output),
        run_id="lost",
        isolation="inline",
        show_progress=False,
        retry_backoff_s=0.1,
        **options,
    )
    return pd.read_parquet(output / "run_id=lost")


@pytest.mark.slow  # four worker processes lost and restarted: ~20 s
@pytest.mark.usefixtures("shared_ray")
def test_retry_errors_goes_on_from_the_checkpoint_of_a_stored_lost_attempt(tmp_path: Path) -> None:
    """A unit stored lost (``seen_by`` ``ray``, the run's retries spent) that ``--resume
    --retry-errors`` runs again goes on from its checkpoint, as the run's own retry would."""
    agent = "dies_until_the_attempt_after_the_lost_one"
    (lost,) = _lost_run(tmp_path, agent, retries=0).itertuples()
    assert lost.attempt == 1 and json.loads(lost.metadata_json)["error_details"]["seen_by"] == "ray"
    sessions = tmp_path / "out" / "run_id=lost" / "_sessions"
    assert [path.name for path in sessions.glob("*/chunk-1.tar")] == ["chunk-1.tar"]  # kept for it
    rows = _lost_run(tmp_path, agent, retries=0, resume=True, retry_errors=True)
    (row,) = rows[rows["attempt"] == 2].itertuples()
    assert json.loads(row.answer_json) == {"answer": True}, row.error_message
    assert json.loads(row.metadata_json)["session_checkpoints"] == {"saved": 1, "resumed_from": 1}
    assert not any(sessions.iterdir())  # its row stored, no attempt goes on from them


@pytest.mark.slow
@pytest.mark.usefixtures("shared_ray")
def test_a_resumed_run_goes_on_from_the_checkpoint_of_a_unit_in_flight_when_its_driver_died(tmp_path: Path) -> None:
    """A unit without a stored row was in flight (its retried attempts are not stored): the
    resumed run's attempt 1 goes on from the checkpoint its attempt 2 saved."""
    (first,) = _lost_run(tmp_path, "saves_a_later_attempts_checkpoint").itertuples()
    assert json.loads(first.answer_json) == {"answer": False}
    sessions = tmp_path / "out" / "run_id=lost" / "_sessions"
    assert not any(sessions.iterdir())  # removed once the unit's row was stored
    for part in (tmp_path / "out" / "run_id=lost").glob("model=*/*.parquet"):
        part.unlink()  # as though the driver died before it stored the unit's row, its checkpoints left
    shutil.copytree(tmp_path / "sessions-in-flight", sessions, dirs_exist_ok=True)
    (row,) = _lost_run(tmp_path, "saves_a_later_attempts_checkpoint", resume=True).itertuples()
    assert row.attempt == 1 and json.loads(row.answer_json) == {"answer": True}, row.error_message
    assert json.loads(row.metadata_json)["session_checkpoints"] == {"saved": 1, "resumed_from": 1}
    assert not any(sessions.iterdir())
