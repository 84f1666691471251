"""A chunked session survives its node: ``rayeval run`` of the REAL Claude Code, a turn a
chunk, on the two-node cluster, against the loopback scripted model server with slow turns.
Two units (two evals, one on each node); once both have saved their first checkpoint, the
second node is killed. Its unit goes on on the head from its checkpoint: the turns it had
done are not asked again, and its one row adds the counts of both parts."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from rayeval.agents import _tools
from rayeval.agents.claude_code import CLAUDE
from tests.agents.conftest import answer_42_evals
from tests.agents.fake_model_server import FakeModelServer
from tests.agents.test_pi import PROMPT, WRITE_ANSWER

from .conftest import RayTestCluster, kill_pids, wait_until

pytestmark = pytest.mark.cluster

TASKS = {"lost-a": f"Unit A. {PROMPT}", "lost-b": f"Unit B. {PROMPT}"}
SCRIPT = [{"command": "echo one"}, {"command": "echo two"}, {"command": WRITE_ANSWER}, {"text": "Done."}]
TURN_DELAY_S = 3.0  # each model turn is answered this late: the kill falls mid-session


def _turns_asked(server: FakeModelServer) -> dict[str, Counter[int]]:
    """Each unit's scripted turns (by the count of model turns in a request's history), by how
    often they were asked for."""
    asked: dict[str, Counter[int]] = {eval_id: Counter() for eval_id in TASKS}
    for request in server.model_requests():
        body = request.body if isinstance(request.body, dict) else {}
        if not body.get("tools"):
            continue  # a side request (a title, a warm-up): no turn of the script
        text = json.dumps(body.get("messages", []))
        (eval_id,) = [eval_id for eval_id, task in TASKS.items() if task in text]
        asked[eval_id][sum(1 for m in body["messages"] if m.get("role") == "assistant")] += 1
    return asked


def test_a_unit_whose_node_is_killed_goes_on_from_its_checkpoint(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    try:
        _tools.find_program(CLAUDE)
    except _tools.AgentNotInstalledError as exc:
        pytest.fail(str(exc))
    (tmp_path / "evals").mkdir()
    for eval_id, task in TASKS.items():
        answer_42_evals(tmp_path / "evals" / eval_id, eval_id, task)
    output = tmp_path / "results"
    sessions = output / "run_id=lost-node" / "_sessions"
    with FakeModelServer(script=SCRIPT, delay_s=TURN_DELAY_S) as server:
        command = [
            sys.executable, "-m", "rayeval.cli", "run", str(tmp_path / "evals"),
            "--agent", "claude-code", "--models", "claude-sonnet-4-5",
            "--agent-arg", f"base_url={server.url}", "--agent-arg", "chunk_turns=1",
            "--agent-arg", "timeout=240", "--agent-arg", 'env={"CLAUDE_CODE_MAX_RETRIES": "0"}',
            "--workers", "2", "--max-concurrency", "2",
            "--address", ray_cluster.gcs_address, "--output", str(output), "--run-id", "lost-node", "--no-progress",
        ]  # fmt: skip
        env = {**ray_cluster.env, "ANTHROPIC_API_KEY": "sk-test-not-a-key"}
        process = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            node2 = ray_cluster.node2
            wait_until(
                lambda: len(list(sessions.glob("*/chunk-1.json"))) == 2 or process.poll() is not None,
                180, 0.2, "both units' first checkpoints",
            )  # fmt: skip
            assert process.poll() is None, "the run ended before both units saved a checkpoint"
            assert ray_cluster.actor_pids("UnitWorker", node=node2, busy=True), "no unit runs on node 2"
            ray_cluster.kill_node2(wait_dead=False)
            killed_at = time.monotonic()
            # the checkpoints as the node left them (a unit's are removed once its row is stored)
            saved_at_kill = _chunk_records(sessions)
            out, err = process.communicate(timeout=300)
        except BaseException:
            kill_pids([process.pid])
            raise
        print(f"node 2 killed; the run finished {time.monotonic() - killed_at:.1f} s later")
    assert process.returncode == 0, f"{out[-3000:]}\n{err[-6000:]}"
    rows = pd.read_parquet(output / "run_id=lost-node").set_index("eval_id")
    assert sorted(rows.index) == sorted(TASKS)  # one row a unit
    metadata = {eval_id: json.loads(rows.loc[eval_id, "metadata_json"]) for eval_id in TASKS}
    lost = [eval_id for eval_id in TASKS if "resumed_from" in metadata[eval_id]["session_checkpoints"]]
    assert len(lost) == 1, metadata
    (lost_id,) = lost
    row, resumed = rows.loc[lost_id], metadata[lost_id]
    assert row["status"] == "passed", (row["error_message"], resumed.get("error_details"))
    assert row["node"] == ray_cluster.head.node_id  # finished on the other node
    asked = _turns_asked(server)
    resumed_from = f"chunk-{resumed['session_checkpoints']['resumed_from']}.json"
    (saved,) = [
        text
        for path, text in saved_at_kill.items()
        if path.parts[0].startswith(f"{lost_id}__") and path.name == resumed_from
    ]
    done_before = json.loads(saved)["counted"]["n_model_calls"]
    assert not list(sessions.glob("*/chunk-*")), "a unit's checkpoints stay after its row is stored"
    # the turns done before the checkpoint are asked once; only the one in flight at the kill again
    assert done_before >= 1 and all(asked[lost_id][turn] == 1 for turn in range(done_before)), asked
    assert sorted(asked[lost_id]) == [0, 1, 2] and asked[lost_id].total() <= 4, asked
    other = next(eval_id for eval_id in TASKS if eval_id != lost_id)
    assert asked[other] == Counter({0: 1, 1: 1, 2: 1}) and rows.loc[other, "n_model_calls"] == 3
    # one row, adding both parts: the calls carried from the checkpoint and those after the resume
    assert row["n_model_calls"] == 3 and resumed["n_turns"] == 3
    assert resumed["gateway"]["by_model"]["claude-sonnet-4-5"]["n_model_calls"] == 3


def _chunk_records(sessions: Path) -> dict[Path, str]:
    """The units' chunk records by path under ``sessions``, as they are now (one removed in
    the meantime, its unit's row stored, is left out)."""
    records = {}
    for path in sessions.glob("*/chunk-*.json"):
        with contextlib.suppress(FileNotFoundError):
            records[path.relative_to(sessions)] = path.read_text()
    return records
