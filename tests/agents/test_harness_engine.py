"""The shared harness machinery, exercised with small stand-in programs (no model, no network)."""

from __future__ import annotations

import json
import os
import pickle
import stat
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib

from rayeval.agents import (
    AgentConfigError,
    AgentNotInstalledError,
    ClaudeCodeAgent,
    CodexAgent,
    MiniSweAgent,
    _cli,
    _tools,
    claude_code,
    codex,
    mini_swe_agent,
)
from rayeval.agents.claude_code import BACKGROUND_PROCESS_NOTE
from rayeval.agents.codex import CODEX, to_toml
from rayeval.agents.resolve import npm_programs

from .conftest import FAKE_KEY, OTHER_SECRET, files_text


def write_program(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


FAKE_CLAUDE = """
import json, os, sys
prompt = sys.stdin.read()
report = {
    "pgid": os.getpgid(0), "sid": os.getsid(0), "argv": sys.argv[1:], "prompt": prompt,
    "cwd": os.getcwd(), "env": dict(os.environ),
}
with open(os.environ["FAKE_REPORT"], "w") as fh:
    json.dump(report, fh)
key = os.environ.get("ANTHROPIC_API_KEY", "")
print(json.dumps({"type": "system", "subtype": "init", "session_id": "sess-1"}))
print("this line is not JSON " + key, flush=True)
print(json.dumps([1, 2, 3]))
print(json.dumps({"type": "assistant", "session_id": "sess-1", "message": {"id": "m1", "content": [
    {"type": "text", "text": "the key is " + key},
    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "true"}}],
    "usage": {"input_tokens": 10, "output_tokens": 2}}}))
print(json.dumps({"type": "result", "subtype": "success", "num_turns": 3, "session_id": "sess-1",
    "usage": {"input_tokens": 5, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 1, "output_tokens": 7},
    "total_cost_usd": 0.5, "result": "bye " + key}))
print("stderr says " + key, file=sys.stderr)
if os.environ.get("FAKE_WRITE_ANSWER"):
    with open("eval_answer.json", "w") as fh:
        fh.write(os.environ["FAKE_WRITE_ANSWER"])
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@pytest.fixture
def fake_claude(tmp_path: Path, agent_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    program = write_program(tmp_path / "fake-claude", FAKE_CLAUDE)
    monkeypatch.setenv("RAYEVAL_CLAUDE_BIN", str(program))
    monkeypatch.setenv("RAYEVAL_UNIT_MARKER", "unit-abc")
    return tmp_path / "report.json"


def test_program_contract_without_answer(fake_claude: Path, tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    agent = claude_code("anthropic/claude-x", max_turns=4, env={"FAKE_REPORT": str(fake_claude), "FAKE_EXIT": "3"})
    out = agent("the task prompt", work_dir)
    report = json.loads(fake_claude.read_text())
    md = out["metadata"]

    # Same process group and session as the caller: the runner's group kill reaches it.
    assert report["pgid"] == os.getpgid(0) and report["sid"] == os.getsid(0)
    assert report["cwd"] == str(work_dir.resolve())
    assert report["prompt"] == "the task prompt" + BACKGROUND_PROCESS_NOTE  # on stdin, not the command line
    argv = report["argv"]
    assert argv[argv.index("--model") + 1] == "claude-x"
    assert argv[argv.index("--max-turns") + 1] == "4"
    assert not any(FAKE_KEY in a or "task prompt" in a for a in argv)

    # Environment: its own key, nothing else secret, runner marker kept, telemetry off.
    env = report["env"]
    assert env["ANTHROPIC_API_KEY"] == FAKE_KEY
    assert "GITHUB_TOKEN" not in env and "ANTHROPIC_API_KEY_FALLBACKS" not in env
    assert "OPENAI_API_KEY" not in env
    assert env["RAYEVAL_UNIT_MARKER"] == "unit-abc"
    assert env["DISABLE_TELEMETRY"] == "1" and env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert not env["CLAUDE_CONFIG_DIR"].startswith(str(work_dir))
    assert not Path(env["CLAUDE_CONFIG_DIR"]).exists()  # private state removed after the run

    # No answer: None with error details naming the exit code; metadata from the events.
    assert out["answer"] is None
    details = md["error_details"]
    assert "exited with code 3" in details["error"] and "no final answer" in details["error"]
    assert details["exit_code"] == 3 and details["timed_out"] is False
    assert md["exit_code"] == 3
    assert md["n_turns"] == 3 and md["n_steps"] == 1
    assert md["input_tokens"] == 26 and md["output_tokens"] == 7
    assert md["cache_read_tokens"] == 20 and md["cache_write_tokens"] == 1
    assert md["cost_usd"] == 0.5 and md["session_id"] == "sess-1"
    assert md["final_message"] == "bye ***"

    # Events: dict lines only; the log keeps every line; secrets masked everywhere.
    kinds = [e.get("type") for e in md["trajectory"]]
    assert kinds == ["system", "assistant", "result"]
    log = (work_dir / "agent_output.log").read_text()
    assert "this line is not JSON ***" in log and "STDERR: stderr says ***" in log
    for name, text in files_text(work_dir).items():
        assert FAKE_KEY not in text and OTHER_SECRET not in text, name
    assert FAKE_KEY not in json.dumps(out)
    assert json.loads((work_dir / "trajectory.json").read_text()) == md["trajectory"]


def test_answer_is_returned_even_after_nonzero_exit(fake_claude: Path, tmp_path: Path) -> None:
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    env = {"FAKE_REPORT": str(fake_claude), "FAKE_WRITE_ANSWER": '{"cell_count": 1234}', "FAKE_EXIT": "1"}
    out = claude_code(env=env)(task_prompt="p", work_dir=work_dir)
    assert out["answer"] == {"cell_count": 1234}
    assert out["metadata"]["exit_code"] == 1 and "error_details" not in out["metadata"]
    assert "--model" not in out["metadata"]["command"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [("{not json", "eval_answer.json is not valid JSON"), ("[1, 2]", "does not hold a JSON object")],
)
def test_bad_answer_file(fake_claude: Path, tmp_path: Path, content: str, expected: str) -> None:
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    out = claude_code(env={"FAKE_REPORT": str(fake_claude), "FAKE_WRITE_ANSWER": content})("p", work_dir)
    assert out["answer"] is None
    assert expected in out["metadata"]["error_details"]["error"]
    assert out["metadata"]["error_details"]["file_contents"] == content


def test_missing_key_is_a_config_error(fake_claude: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(AgentConfigError, match="ANTHROPIC_API_KEY"):
        claude_code()("p", tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("RAYEVAL_CODEX_BIN", os.environ["RAYEVAL_CLAUDE_BIN"])
    with pytest.raises(AgentConfigError, match="OPENAI_API_KEY"):
        codex()("p", tmp_path)


def test_streaming_timeout_kills_tree_and_keeps_partial_events(tmp_path: Path, agent_env: dict[str, str]) -> None:
    program = write_program(
        tmp_path / "slow",
        """
        import json, subprocess, sys, time
        child = subprocess.Popen(["sleep", "517.5"])
        print(json.dumps({"type": "started", "child": child.pid}), flush=True)
        time.sleep(600)
        """,
    )
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    result = _cli.run_streaming(
        [str(program)], work_dir=work_dir, env=dict(os.environ), stdin_text=None, timeout=2, secrets=set()
    )
    assert result.timed_out and result.exit_code is not None and result.exit_code < 0
    assert [e["type"] for e in result.events] == ["started"]
    child = result.events[0]["child"]
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split(")")[1][:3]
    assert json.loads((work_dir / "trajectory.json").read_text()) == result.events


def test_build_env_scrubs_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {
        "PATH": "/bin",
        "OPENAI_API_KEY": "sk-openai-xxxxxxxx",
        "ANTHROPIC_API_KEY": "sk-ant-xxxxxxxxxx",
        "ANTHROPIC_API_KEY_FALLBACKS": '["sk-fb-xxxxxxxx"]',
        "HF_TOKEN": "hf-xxxxxxxxxxxx",
        "DB_PASSWORD": "hunter2-hunter2",
        "EXTRA_ENV_KEYS": '["HF_TOKEN"]',
        "RAYEVAL_UNIT_MARKER": "m",
    }
    env = _cli.build_env(
        pass_keys=("ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY_FALLBACKS"), extra={"X": "1", "PATH": None}, base=base
    )
    assert env == {
        "ANTHROPIC_API_KEY": "sk-ant-xxxxxxxxxx",
        "HF_TOKEN": "hf-xxxxxxxxxxxx",  # listed in EXTRA_ENV_KEYS
        "EXTRA_ENV_KEYS": '["HF_TOKEN"]',
        "RAYEVAL_UNIT_MARKER": "m",
        "X": "1",
    }


def test_program_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYEVAL_AGENT_TOOLS_DIR", str(tmp_path / "tools"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("RAYEVAL_CODEX_BIN", raising=False)
    with pytest.raises(AgentNotInstalledError, match="install_agent_clis.py"):
        _tools.find_program(CODEX)
    monkeypatch.setenv("RAYEVAL_CODEX_BIN", str(tmp_path / "nope"))
    with pytest.raises(AgentNotInstalledError, match="RAYEVAL_CODEX_BIN"):
        _tools.find_program(CODEX)
    # The tools folder wins over PATH; a JS entry point runs under node.
    monkeypatch.delenv("RAYEVAL_CODEX_BIN")
    bin_dir = tmp_path / "tools" / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "codex"
    script.write_text("#!/usr/bin/env node\nconsole.log('hi')\n")
    argv = _tools.find_program(CODEX)
    if _tools.node_executable():
        assert argv[-1] == str(script.resolve()) and argv[0].endswith("node")


@pytest.mark.parametrize(
    ("first_line", "under_node"),
    [
        ("#!/usr/bin/env node", True),
        ("#!/usr/bin/env -S node --no-warnings", True),
        ("#!/opt/nodejs/bin/node", True),
        ("#!/work/nodeloss/.venv/bin/python", False),  # a folder named node-something
        ("#!/usr/bin/env python3  # node", False),
        ("#!/bin/sh", False),
    ],
)
def test_a_program_runs_under_node_when_its_first_line_names_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_line: str, under_node: bool
) -> None:
    monkeypatch.setattr(_tools, "node_executable", lambda: "/fake/node")
    program = write_program(tmp_path / "program", "")
    program.write_text(first_line + "\nprint('hi')\n")
    assert (_tools.command_for(program)[0] == "/fake/node") is under_node


def test_agents_are_picklable_and_named() -> None:
    for agent in (
        claude_code("claude-sonnet-4-5", timeout=10, max_turns=3),
        codex("gpt-5.1-codex", base_url="http://x/v1"),
        mini_swe_agent("openai/gpt-5-mini", step_limit=5),
    ):
        clone = pickle.loads(pickle.dumps(agent))
        assert clone == agent
        assert ":" in agent.__name__
    assert isinstance(claude_code(), ClaudeCodeAgent)
    assert isinstance(codex(), CodexAgent)
    assert isinstance(mini_swe_agent("openai/x", max_turns=7), MiniSweAgent)
    assert mini_swe_agent("openai/x", max_turns=7).step_limit == 7


def test_option_validation() -> None:
    with pytest.raises(AgentConfigError):
        codex("gpt-5", max_turns=3)
    with pytest.raises(AgentConfigError):
        claude_code(max_turns=0)
    with pytest.raises(AgentConfigError):
        claude_code(timeout=-1)
    with pytest.raises(TypeError):
        mini_swe_agent()  # type: ignore[call-arg]


def test_codex_config_toml_round_trips() -> None:
    agent = codex(
        "gpt-5.1-codex",
        base_url="http://127.0.0.1:9/v1/",
        reasoning_effort="high",
        config={"model_providers": {"rayeval": {"request_max_retries": 1}}, "sandbox_workspace_write": {"x": [1, "a"]}},
    )
    parsed = tomllib.loads(to_toml(agent.codex_config()))
    assert parsed["model_provider"] == "rayeval"
    provider = parsed["model_providers"]["rayeval"]
    assert provider["base_url"] == "http://127.0.0.1:9/v1" and provider["env_key"] == "OPENAI_API_KEY"
    assert provider["wire_api"] == "responses" and provider["request_max_retries"] == 1
    assert parsed["analytics"] == {"enabled": False} and parsed["features"] == {"plugins": False}
    assert parsed["check_for_update_on_startup"] is False and parsed["model_reasoning_effort"] == "high"
    assert parsed["sandbox_workspace_write"] == {"x": [1, "a"]}


def test_install_script_is_idempotent_when_installed(capsys: pytest.CaptureFixture[str]) -> None:
    root = _tools.tools_dir()
    assert all(_tools.installed_version(p, root) == p.pin for p in npm_programs()), (
        f"agent CLIs not installed in {root}: run python scripts/install_agent_clis.py"
    )
    lines: list[str] = []
    assert _tools.install(npm_programs(), root, log=lines.append) is True
    assert lines and all("already installed" in line for line in lines)


def test_codex_runs_natively_without_node(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = _tools.tools_dir() / "node_modules" / ".bin" / "codex"
    assert entry.exists(), "codex not installed in the tools folder: run python scripts/install_agent_clis.py"
    monkeypatch.delenv("RAYEVAL_CODEX_BIN", raising=False)
    monkeypatch.setattr(_tools, "node_executable", lambda: None)
    argv = _tools.find_program(CODEX)
    assert len(argv) == 1 and argv[0].endswith("/bin/codex") and "vendor" in argv[0]
    monkeypatch.setattr(_tools, "native_binary", lambda entry, name: None)
    with pytest.raises(AgentNotInstalledError, match="node"):
        _tools.find_program(CODEX)
