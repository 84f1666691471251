"""A chunked session's checkpoints: after each chunk the REAL Claude Code's unit reports it
done over its socket, and the trusted side saves the unit's work folder (the program's state
in it, the staged data not) and the gateway's counts so far beside it."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from rayeval.agents.resolve import agent_ref
from rayeval.unit.checkpoint import unpack
from rayeval.unit.runner import EvalRunner

from .conftest import answer_42_evals
from .test_pi import PROMPT, WRITE_ANSWER
from .test_refusal_fallback import CATCH_ALL, FALLBACK_MODEL, FINISH


def test_each_chunk_of_a_sandboxed_unit_saves_its_checkpoint(claude_available, model_server, tmp_path: Path) -> None:
    server = model_server([{"command": "echo first-chunk-ran"}, {"command": WRITE_ANSWER}, {"text": "Done."}])
    evals = answer_42_evals(tmp_path / "evals", "chunked", PROMPT)
    sessions = tmp_path / "results" / "run_id=r" / "_sessions"
    runner = EvalRunner(
        evals / "e.json", work_root=tmp_path / "w", cache_dir=tmp_path / "c", run_id="r", sessions_root=str(sessions)
    )
    args = {"base_url": server.url, "chunk_turns": "1", "timeout": "120", "env": '{"CLAUDE_CODE_MAX_RETRIES": "0"}'}
    done = runner.execute(agent_ref("claude-code"), model="claude-sonnet-4-5", agent_args=args, isolation="sandbox")
    assert done.agent_answer == {"answer": 42}, done.error_message
    assert done.metadata["session_checkpoints"] == {"saved": 1}  # the last chunk answered: none after it
    folder = sessions / "chunked__claude-sonnet-4-5__sx"
    assert sorted(p.name for p in folder.iterdir()) == ["chunk-1.json", "chunk-1.tar"]
    saved = json.loads((folder / "chunk-1.json").read_text())
    assert saved["counted"]["n_model_calls"] == 1 and len(saved["calls"]) == 1  # the gateway's, of chunk 1
    assert saved["session_id"] == done.metadata["session_id"]
    restored = tmp_path / "restored"
    unpack(io.BytesIO((folder / "chunk-1.tar").read_bytes()), restored)
    sessions_saved = list((restored / ".program-state").rglob(f"{saved['session_id']}.jsonl"))
    assert len(sessions_saved) == 1 and "first-chunk-ran" in sessions_saved[0].read_text()
    with tarfile.open(folder / "chunk-1.tar") as tar:
        assert not [name for name in tar.getnames() if name.split("/")[0] == "data"]


#: each program's agent, model and options on the scripted server (no retries of its own)
RESUMED = {
    "claude-code": ("claude-sonnet-4-5", {"env": '{"CLAUDE_CODE_MAX_RETRIES": "0"}'}),
    "pi": ("anthropic/claude-sonnet-4-5", {"settings": '{"retry": {"enabled": false}}'}),
}


def _lost_in_first(tmp_path: Path, elsewhere: str = WRITE_ANSWER) -> str:
    """A command that kills its program in the first attempt's work folder (as a lost node would
    end it) and runs ``elsewhere`` (writes the answer) in any other."""
    return f"case $PWD in {tmp_path}/first/*) kill -9 $PPID;; *) {elsewhere};; esac"


def _attempt(tmp_path: Path, work_root: str, harness: str, model: str, args: dict[str, str]) -> Any:
    """One attempt of the unit of ``tmp_path/evals``, in ``tmp_path/work_root``, its checkpoints
    under ``tmp_path/results/_sessions`` (Ray runs an attempt again when its node is lost)."""
    sessions = tmp_path / "results" / "_sessions"
    runner = EvalRunner(
        tmp_path / "evals" / "e.json", work_root=tmp_path / work_root, run_id="r", sessions_root=str(sessions)
    )
    return runner.execute(agent_ref(harness), model=model, agent_args=args, isolation="sandbox")


@pytest.mark.parametrize("harness", list(RESUMED))
def test_a_unit_resumed_from_its_checkpoint_goes_on_with_its_session(
    harness: str, request: pytest.FixtureRequest, model_server, tmp_path: Path
) -> None:
    """The first attempt saves chunk 1, then dies (its program killed, as its node would be);
    the second, in another work folder, goes on from chunk 1: turn 0 is not asked again, and
    the row adds the counts saved with the checkpoint to its own."""
    request.getfixturevalue("claude_available" if harness == "claude-code" else "pi_available")
    model, options = RESUMED[harness]
    server = model_server(
        [{"command": "echo first-chunk-ran > notes.txt"}, {"command": _lost_in_first(tmp_path)}, {"text": "Done."}]
    )
    answer_42_evals(tmp_path / "evals", "chunked", PROMPT)
    args = {"base_url": server.url, "chunk_turns": "1", "timeout": "120", **options}
    lost = _attempt(tmp_path, "first", harness, model, args)
    assert lost.agent_answer is None and lost.metadata["session_checkpoints"] == {"saved": 1}, lost.error_message
    (saved,) = (tmp_path / "results" / "_sessions").glob("chunked__*/chunk-1.json")
    carried = json.loads(saved.read_text())
    done = _attempt(tmp_path, "second", harness, model, args)
    assert done.agent_answer == {"answer": 42}, done.error_message
    assert done.metadata["session_checkpoints"] == {"saved": 1, "resumed_from": 1}
    # turn 0 is not asked again; turn 1, whose answer the first attempt lost, is; its answer ends the unit
    assert [reply.turn for reply in server.scripted_replies()] == [0, 1, 1]
    assert done.metadata["session_id"] == carried["session_id"]
    first, _, resumed = server.scripted_replies()
    counted = done.model_usage
    assert carried["counted"]["n_model_calls"] == 1 and counted is not None and counted.n_model_calls == 2
    assert counted.usage.output_tokens == first.output_tokens + resumed.output_tokens
    assert sum(seen.n_model_calls for seen in counted.by_model.values()) == 2
    assert done.metadata["n_turns"] == 2


def test_a_session_that_fell_back_goes_on_from_its_checkpoint_on_its_fallback_model(
    claude_available, model_server, tmp_path: Path
) -> None:
    """claude-fable-5 refuses in chunk 1 and Claude Code falls back to claude-opus-5; the node
    is lost in chunk 2. The session restored in another work folder, whose earlier events are
    not in its process, asks claude-opus-5 in each chunk, as it would have where it was; put
    back on claude-fable-5, it would be refused again."""
    lost_here = {"command": _lost_in_first(tmp_path, elsewhere="echo second-chunk-ran")}
    server = model_server([FINISH, {"command": "echo first-chunk-ran"}, lost_here, {"command": WRITE_ANSWER}, FINISH])
    server.refused_by.add("claude-fable-5")
    answer_42_evals(tmp_path / "evals", "chunked", PROMPT)
    env = json.dumps({"CLAUDE_CODE_MAX_RETRIES": "0", **json.loads(CATCH_ALL)})
    args = {"base_url": server.url, "chunk_turns": "1", "timeout": "120", "switch_models_on_flag": "true", "env": env}
    lost = _attempt(tmp_path, "first", "claude-code", "claude-fable-5", args)
    assert lost.agent_answer is None and lost.metadata["session_checkpoints"] == {"saved": 1}, lost.error_message
    asked = [request.body["model"] for request in server.model_requests() if request.body.get("tools")]
    assert asked == ["claude-fable-5", "claude-fable-5", FALLBACK_MODEL, FALLBACK_MODEL]  # refused, again, turns 1, 2
    done = _attempt(tmp_path, "second", "claude-code", "claude-fable-5", args)
    resumed = [request.body["model"] for request in server.model_requests() if request.body.get("tools")][len(asked) :]
    assert resumed == [FALLBACK_MODEL, FALLBACK_MODEL], resumed  # turn 2 in the restored session's chunk, turn 3
    assert done.agent_answer == {"answer": 42}, done.error_message
    assert done.metadata["session_checkpoints"] == {"saved": 2, "resumed_from": 1}
    assert "--model claude-opus-5" in " ".join(done.metadata["command"])
