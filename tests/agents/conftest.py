"""Fixtures for the real-agent harness tests.

The agent programs are real (Claude Code, Codex and pi from ``<repo>/.agent-tools``, installed by
``python scripts/install_agent_clis.py``; mini-swe-agent from PyPI).  They talk only to a
scripted model server on 127.0.0.1; every other HTTPS connection they attempt is sent to that
server as a proxy CONNECT and refused (and recorded), so a test never reaches the internet and
never waits on it.

The README's test command installs every program first; a missing one fails the tests that
need it, with the install command in the message.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rayeval.agents import _tools
from rayeval.agents.claude_code import CLAUDE
from rayeval.agents.codex import CODEX
from rayeval.agents.pi import PI

from .fake_model_server import FakeModelServer

FAKE_KEY = "sk-test-SECRET-123"
OTHER_SECRET = "ghp-test-OTHER-SECRET-456"
PROGRAM_TIMEOUT = 90  # seconds: generous; a run takes a few seconds


def _missing(reason: str) -> None:
    """The README's test command installs every program: a missing one is a failure."""
    pytest.fail(reason)


@pytest.fixture
def claude_available() -> None:
    try:
        _tools.find_program(CLAUDE)
    except _tools.AgentNotInstalledError as exc:
        _missing(str(exc))


@pytest.fixture
def codex_available() -> None:
    try:
        _tools.find_program(CODEX)
    except _tools.AgentNotInstalledError as exc:
        _missing(str(exc))


@pytest.fixture
def pi_available() -> None:
    try:
        _tools.find_program(PI)
    except _tools.AgentNotInstalledError as exc:
        _missing(str(exc))


@pytest.fixture
def mini_available() -> None:
    for module in ("minisweagent", "litellm"):
        if importlib.util.find_spec(module) is None:
            _missing(f"{module} is not installed: pip install -e '.[dev]'")


@pytest.fixture
def agent_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A clean, offline environment with fake keys: no real credential can leak into a test."""
    for name in list(os.environ):
        if name.endswith(("_API_KEY", "_AUTH_TOKEN")) or name in (
            "ANTHROPIC_BASE_URL",
            "OPENAI_BASE_URL",
            "CODEX_HOME",
            "CLAUDE_CONFIG_DIR",
            "EXTRA_ENV_KEYS",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
        ):
            monkeypatch.delenv(name, raising=False)
    values = {
        "ANTHROPIC_API_KEY": FAKE_KEY,
        "OPENAI_API_KEY": FAKE_KEY,
        "ANTHROPIC_API_KEY_FALLBACKS": json.dumps(["sk-test-FALLBACK-789"]),
        "GITHUB_TOKEN": OTHER_SECRET,  # unrelated secret: must not reach the programs at all
        "RAYEVAL_AGENT_STATE_DIR": str(tmp_path_factory.mktemp("agent-state")),
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


@pytest.fixture
def model_server(agent_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``model_server(script, **kw)`` starts a scripted server; all are stopped at teardown."""
    servers: list[FakeModelServer] = []

    def start(script: list[dict[str, str]], **kwargs: Any) -> FakeModelServer:
        server = FakeModelServer(script=script, **kwargs).start()
        servers.append(server)
        # Anything that is not loopback goes to the server as a proxy request, and is refused.
        for name in ("HTTPS_PROXY", "https_proxy"):
            monkeypatch.setenv(name, server.url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.setenv(name, "127.0.0.1,localhost")
        return server

    yield start
    for server in servers:
        server.stop()


def files_text(work_dir: Path) -> dict[str, str]:
    """Every regular file left in the work folder, decoded leniently."""
    out = {}
    for path in Path(work_dir).rglob("*"):
        if path.is_file():
            out[str(path.relative_to(work_dir))] = path.read_bytes().decode("utf-8", "replace")
    return out


def answer_42_evals(folder: Path, eval_id: str, task: str) -> Path:
    """A folder of one eval whose answer is ``{"answer": 42}`` (the tests' tool commands write it)."""
    folder.mkdir()
    grader = {"type": "numeric_tolerance", "config": {"ground_truth": {"answer": 42},
              "tolerances": {"answer": {"type": "absolute", "value": 0}}}}  # fmt: skip
    (folder / "e.json").write_text(json.dumps({"id": eval_id, "task": task, "grader": grader}))
    return folder
