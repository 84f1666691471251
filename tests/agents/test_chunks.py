"""Chunked sessions (``ProgramAgent.run_chunk``), as latch-eval-tools 0.4.54's
``run_claudecode_chunk`` and ``run_pi_chunk`` run them, with the REAL Claude Code and pi
against the scripted model server: a chunk of at most K turns, the session gone on with or
forked, the turn limit a normal end, a failed run raised (pi's failed reply although it exits
0), pi's reply cut at its length limit no natural end, and a chunk's timeout killing the tree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from rayeval.agents import AgentConfigError, ChunkFailed, ProgramAgent, claude_code, codex, pi
from rayeval.agents.claude_code import BACKGROUND_PROCESS_NOTE

from .conftest import FAKE_KEY, PROGRAM_TIMEOUT, answer_42_evals
from .test_pi import PROMPT, REPO, WRITE_ANSWER
from .test_real_agents import _processes_with

NO_RETRY = {"retry": {"enabled": False}}

#: each program's agent on the scripted server's URL, its session kept in ``state_dir``
AGENTS: dict[str, Callable[..., ProgramAgent]] = {
    "claude": lambda url, **kw: claude_code(
        "claude-sonnet-4-5", base_url=url, env={"CLAUDE_CODE_MAX_RETRIES": "0"}, **kw
    ),
    "pi": lambda url, **kw: pi("anthropic/claude-sonnet-4-5", base_url=url, settings=NO_RETRY, **kw),
}


def _history(request: Any) -> str:
    return json.dumps(request.body["messages"])


@pytest.mark.parametrize("key", list(AGENTS))
def test_a_session_in_chunks_goes_on_and_forks(key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path) -> None:  # fmt: skip
    """A first chunk of 1 turn stops on its limit (a normal end) with the session and its file;
    a fork of it goes on in a new session and leaves it as it was; the session itself then goes
    on to the answer, its history the first chunk's."""
    request.getfixturevalue(f"{key}_available")
    server = model_server(
        [
            {"command": "echo first-chunk-ran background-tasks=${CLAUDE_CODE_DISABLE_BACKGROUND_TASKS:-on}"},
            {"command": WRITE_ANSWER},
            {"text": "Done."},
        ]
    )
    agent = AGENTS[key](server.url, state_dir=str(tmp_path / "state"), timeout=PROGRAM_TIMEOUT)
    work_dir = tmp_path / "work"

    first = agent.run_chunk(PROMPT, work_dir, 1)
    assert (first.turns, first.hit_turn_limit) == (1, True)
    assert first.session_file is not None and first.session_id in first.session_file.name
    assert len(server.scripted_replies()) == 1 and not (work_dir / "eval_answer.json").exists()
    kept = first.session_file.read_bytes()
    # as latch-eval-tools runs Claude Code's chunks, a new session's prompt is followed by the
    # note on background processes
    first_prompt = PROMPT + (f"\n{BACKGROUND_PROCESS_NOTE}" if key == "claude" else "")
    assert any(json.dumps(first_prompt)[1:-1] in _history(asked) for asked in server.model_requests())

    fork = agent.run_chunk("Continue.", work_dir, 1, session_id=first.session_id, fork=True)
    assert fork.session_id != first.session_id and (fork.turns, fork.hit_turn_limit) == (1, True)
    assert fork.session_file is not None and fork.session_file.exists()
    assert first.session_file.read_bytes() == kept  # the forked session is left as it was
    assert "first-chunk-ran" in _history(server.model_requests()[-1])  # the fork has its history
    # ... and its background tasks are off; a session gone on with gets no second note
    history = _history(server.model_requests()[-1])
    assert history.count("a background process is still running") == (key == "claude")
    assert ("background-tasks=1" in history, "background-tasks=on" in history) == (key == "claude", key != "claude")
    (work_dir / "eval_answer.json").unlink()  # the fork's tool call wrote it

    rest = agent.run_chunk("Continue.", work_dir, 5, session_id=first.session_id)
    assert rest.session_id == first.session_id and (rest.turns, rest.hit_turn_limit) == (2, False)
    assert json.loads((work_dir / "eval_answer.json").read_text()) == {"answer": 42}
    assert "first-chunk-ran" in _history(server.model_requests()[-1])
    assert "--max-turns" in json.dumps(agent.chunk_argv(["prog"], tmp_path / "state", 5, None, False))


@pytest.mark.parametrize("key", list(AGENTS))
def test_a_failed_chunk_raises(key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path) -> None:
    """The provider rejects the key: Claude Code exits 1 on it, pi exits 0 with a failed reply;
    both are a failed chunk, raised with what the failure said."""
    request.getfixturevalue(f"{key}_available")
    server = model_server([{"text": "Done."}], rejected_credentials={FAKE_KEY})
    agent = AGENTS[key](server.url, state_dir=str(tmp_path / "state"), timeout=PROGRAM_TIMEOUT)
    exit_code = 1 if key == "claude" else 0
    with pytest.raises(ChunkFailed, match=rf"chunk failed with exit code {exit_code}: .*401"):
        agent.run_chunk(PROMPT, tmp_path / "work", 3)
    assert server.scripted_replies() == []


def test_pi_chunk_cut_at_the_length_limit_is_no_natural_end(pi_available, model_server, tmp_path: Path) -> None:
    """A reply cut at its length limit ends pi's run (exit 0), below the chunk's limit: the
    chunk hit a limit, not a natural end, and the cut reply is a turn."""
    server = model_server([{"command": "echo one"}, {"text": "Let me think at len", "stop": "max_tokens"}])
    agent = AGENTS["pi"](server.url, state_dir=str(tmp_path / "state"), timeout=PROGRAM_TIMEOUT)
    chunk = agent.run_chunk(PROMPT, tmp_path / "work", 5)
    assert (chunk.turns, chunk.hit_turn_limit) == (2, True)


def test_pi_chunk_ending_on_its_own_is_a_natural_end(pi_available, model_server, tmp_path: Path) -> None:
    server = model_server([{"command": WRITE_ANSWER}, {"text": "Done."}])
    agent = AGENTS["pi"](server.url, state_dir=str(tmp_path / "state"), timeout=PROGRAM_TIMEOUT)
    chunk = agent.run_chunk(PROMPT, tmp_path / "work", 2)
    assert (chunk.turns, chunk.hit_turn_limit) == (2, False)


@pytest.mark.parametrize("key", list(AGENTS))
def test_a_chunks_timeout_kills_the_program_tree(key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path) -> None:  # fmt: skip
    request.getfixturevalue(f"{key}_available")
    seconds = f"{300 + int(uuid.uuid4().int % 1000)}.25"  # a unique sleep to look for afterwards
    server = model_server([{"command": f"echo started && sleep {seconds} && echo finished"}, {"text": "Done."}])
    agent = AGENTS[key](server.url, state_dir=str(tmp_path / "state"), timeout=PROGRAM_TIMEOUT)
    with pytest.raises(ChunkFailed, match=r"^\S+ chunk timed out after 6 s$"):
        agent.run_chunk(PROMPT, tmp_path / "work", 3, timeout=6)
    deadline = time.monotonic() + 5
    while _processes_with(f"sleep {seconds}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(f"sleep {seconds}") == [], "the program's tool outlived the chunk's timeout"


def test_a_chunk_needs_a_state_dir_and_a_turn_limit(tmp_path: Path) -> None:
    with pytest.raises(AgentConfigError, match="set state_dir"):
        pi("anthropic/claude-sonnet-4-5").run_chunk(PROMPT, tmp_path, 2)
    for turns in (0, -1, 1.5, True):
        with pytest.raises(AgentConfigError, match="max_turns must be an integer >= 1"):
            claude_code(state_dir=str(tmp_path)).run_chunk(PROMPT, tmp_path, turns)  # type: ignore[arg-type]


# ------------------------------------------------------------------ a unit's session in chunks
def _harness_lines(work_dir: Path) -> list[str]:
    return [line for line in (work_dir / "agent_output.log").read_text().splitlines() if line.startswith("HARNESS:")]


@pytest.mark.parametrize("key", list(AGENTS))
def test_chunk_turns_runs_the_units_session_in_chunks(key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path) -> None:  # fmt: skip
    """``chunk_turns=1``: each run of the program makes one model turn and the same session
    goes on (``Continue.``) until it answers and ends on its own; the turns are counted once."""
    request.getfixturevalue(f"{key}_available")
    server = model_server([{"command": "echo first-chunk-ran"}, {"command": WRITE_ANSWER}, {"text": "Done."}])
    work_dir = tmp_path / "work"
    out = AGENTS[key](server.url, chunk_turns=1, timeout=PROGRAM_TIMEOUT)(PROMPT, work_dir)
    md = out["metadata"]
    assert out["answer"] == {"answer": 42}, md.get("error_details")
    assert md["command"][md["command"].index("--max-turns") + 1] == "1"
    assert md["n_turns"] == 2  # the answer ends the session: the third turn is never asked for
    assert _harness_lines(work_dir) == ["HARNESS: the program stopped short of an answer; resuming the session"]
    assert [reply.turn for reply in server.scripted_replies()] == [0, 1]
    assert "first-chunk-ran" in _history(server.model_requests()[-1])  # the same session went on


def test_chunk_turns_is_refused_where_it_cannot_run() -> None:
    with pytest.raises(AgentConfigError, match="codex does not run chunked sessions"):
        codex(chunk_turns=2)
    with pytest.raises(AgentConfigError, match="chunk_turns must be an integer >= 1"):
        pi(chunk_turns=0)
    with pytest.raises(AgentConfigError, match="give one"):
        claude_code(max_turns=3, chunk_turns=1)


def test_rayeval_run_with_chunk_turns(claude_available, model_server, tmp_path: Path) -> None:
    """``rayeval run --agent claude-code --agent-arg chunk_turns=1`` in the sandbox, through the
    gateway: the unit's session runs a turn a chunk to the answer, each turn counted once."""
    server = model_server([{"command": "echo first-chunk-ran"}, {"command": WRITE_ANSWER}, {"text": "Done."}])
    evals = answer_42_evals(tmp_path / "evals", "chunked", PROMPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "rayeval.cli", "run", str(evals), "--agent", "claude-code", "--models", "claude-sonnet-4-5",
         "--agent-arg", f"base_url={server.url}", "--agent-arg", "chunk_turns=1", "--agent-arg", "timeout=120",
         "--output", str(tmp_path / "out"), "--no-progress"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table().to_pylist()
    metadata = json.loads(row["metadata_json"])
    assert row["status"] == "passed", (row.get("error_details"), metadata.get("error_details"))
    assert metadata["command"][metadata["command"].index("--max-turns") + 1] == "1"
    assert metadata["n_turns"] == 2 and row["n_model_calls"] == 2
    assert [reply.turn for reply in server.scripted_replies()] == [0, 1]
    # the first chunk's checkpoint was saved in the run's hidden _sessions folder of the results
    # root, and removed once the unit's row was stored for good
    assert metadata["session_checkpoints"] == {"saved": 1}
    assert not list((tmp_path / "out").glob("run_id=*/_sessions/chunked__*/chunk-*"))
