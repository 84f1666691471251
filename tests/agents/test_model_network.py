"""The four real programs through ``rayeval run --network model`` (the default sandbox, real
Ray): each reaches its model through the gateway and nothing else (a tool's own connection to
the scripted server is refused), its tools cannot read the program's environment nor open its
event pipe (its process is not dumpable), its row counts what the server served, and the
viewer draws its conversation from the gateway's record of its calls."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rayeval.cli import main
from rayeval.view.data import artifacts_view
from tests.embedded import one_ray

from .conftest import PROGRAM_TIMEOUT, answer_42_evals
from .fake_model_server import FakeModelServer

#: each program: the fixture that finds it, its model, its --agent-arg options (the scripted
#: server's URL filled in), and the protocol its calls speak
PROGRAMS = {
    "claude-code": ("claude_available", "claude-sonnet-4-5", ["base_url={url}"], "anthropic"),
    "codex": ("codex_available", "gpt-5.1-codex", ["base_url={url}/v1"], "responses"),
    "mini-swe-agent": ("mini_available", "openai/gpt-test", ["base_url={url}/v1", "step_limit=4"], "chat"),
    "pi": ("pi_available", "anthropic/claude-sonnet-4-5", ["base_url={url}"], "anthropic"),
}
#: the tool's command: tries the scripted server itself, and each process above it (up to the
#: unit's first): its environment and its stdout (a program's event pipe), for reading and for
#: writing; then writes the answer with what it found
REACH = (
    'python3 -c "import json, os, socket\n'
    "try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3).close(); found = 'reached'\n"
    "except OSError as error:\n    found = type(error).__name__\n"
    "def opens(path, flags):\n    try:\n        os.close(os.open(path, flags)); return True\n"
    "    except OSError:\n        return False\n"
    "above, pid = [], os.getppid()\n"
    "while pid > 1:\n"
    "    comm = open(f'/proc/{{pid}}/comm').read().strip()\n"
    "    above.append([comm, opens(f'/proc/{{pid}}/environ', os.O_RDONLY), opens(f'/proc/{{pid}}/fd/1', os.O_WRONLY)])\n"
    "    pid = int(open(f'/proc/{{pid}}/stat').read().rsplit(')', 1)[1].split()[1])\n"
    "above.append(['first', opens('/proc/1/environ', os.O_RDONLY), opens('/proc/1/fd/1', os.O_WRONLY)])\n"
    "import subprocess\nchild = subprocess.Popen(['sleep', '5'])\n"
    "control = opens(f'/proc/{{child.pid}}/environ', os.O_RDONLY)\nchild.kill()\n"
    "json.dump({{'answer': 42, 'direct': found, 'above': above, 'control': control}}, open('eval_answer.json', 'w'))\""
)
#: the shells a program runs its tools' commands in: the tool's own, open to it
SHELLS = {"sh", "bash", "dash"}


@pytest.mark.slow
def test_each_program_reaches_its_model_only_through_the_gateway(
    request: pytest.FixtureRequest, model_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    evals = answer_42_evals(tmp_path / "evals", "reach", "Write the answer.")
    servers = {}
    for name, (available, _, _, _) in PROGRAMS.items():
        request.getfixturevalue(available)
        finish = (
            {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"} if name == "mini-swe-agent" else {"text": "Done."}
        )
        servers[name] = server = model_server([{"command": ""}, finish])
        server.script[0]["command"] = REACH.format(port=server.url.rsplit(":", 1)[1])
    with one_ray():
        for name, (_, model, options, protocol) in PROGRAMS.items():
            check_program(name, servers[name], model, options, protocol, evals, tmp_path / name)


def check_program(
    name: str, server: FakeModelServer, model: str, options: list[str], protocol: str, evals: Path, out: Path
) -> None:
    """``rayeval run --network model`` of program ``name``: its row, and what the viewer shows."""
    args = [option.format(url=server.url) for option in options] + [f"timeout={PROGRAM_TIMEOUT}"]
    code = main(
        ["run", str(evals), "--agent", name, "--models", model, "--network", "model", "--output", str(out),
         "--retries", "0", "--no-progress", *[x for arg in args for x in ("--agent-arg", arg)]]
    )  # fmt: skip
    (row,) = pd.read_parquet(out).to_dict("records")
    assert code == 0 and row["status"] == "passed", (name, row["error_message"], row["metadata_json"][-2000:])
    answer = json.loads(row["answer_json"])
    assert answer["direct"] == "ConnectionRefusedError", name
    # above the tool: its shell (its own), the program, the unit's first process; none of
    # the last two readable, nor their event pipe (stdout) open to it
    programs = [comm for comm, _, _ in answer["above"] if comm not in SHELLS]
    assert len(programs) >= 2 and programs[-1] == "first", (name, answer["above"])
    reached = [comm for comm, environ, pipe in answer["above"] if (environ or pipe) and comm not in SHELLS]
    assert reached == [] and answer["control"] is True, (name, answer)  # a process it started: readable
    served = [reply for reply in server.replies if reply.protocol == protocol]
    assert row["n_model_calls"] == len(server.model_requests()) == len(served) >= 2, name
    assert (row["input_tokens"], row["output_tokens"]) == (
        sum(r.input_tokens for r in served),
        sum(r.output_tokens for r in served),
    ), name
    # the viewer draws its conversation from the gateway's record, whatever the program
    _, _, shown = artifacts_view(row["artifacts_json"])
    assert shown is not None and shown["format"] == "model-calls", name
    texts = [step["text"] for step in shown["steps"]]
    assert sum(step["title"].startswith("call ") for step in shown["steps"]) == row["n_model_calls"], name
    assert any("socket.create_connection" in text for text in texts), (name, texts)  # its tool call
