"""The README's shell commands run as written (in a scratch folder where they would write):
the quickstart's main job (after its install), run-one, agents and --version, and the report
commands with ROOT standing for a real run's results root, and the models example against
loopback servers. ``ray job submit`` runs in tests/cluster against a real ``ray start`` cluster."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.agents.fake_model_server import FakeModelServer
from tests.conftest import REPO, shared_path
from tests.fixtures_s3 import S3Server
from tests.models.conftest import mc_answer

BLOCKS = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)


def _commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", block)
    return [
        line.split("  #")[0].strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def _block(first_words: str) -> list[str]:
    for block in BLOCKS:
        commands = _commands(block)
        if commands and commands[0].startswith(first_words):
            return commands
    raise AssertionError(f"no README shell block starts with {first_words!r}")


def _shell(command: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_quickstart_main_job_runs_as_written(tmp_path: Path) -> None:
    quickstart = _commands(BLOCKS[0])[0]
    install, _, job = quickstart.partition(" && ")
    assert install.startswith("python -m pip install -e ")  # done: the tests run in the installed project
    (tmp_path / "evals").symlink_to(REPO / "evals")
    done = _shell(job, tmp_path)
    assert (tmp_path / "rayeval-report.html").read_text().startswith("<!DOCTYPE html>")
    assert "Accuracy (%)" in done.stdout
    assert not list((tmp_path / "rayeval-results").rglob("*.html"))  # the results root stays a dataset


def test_run_one_agents_and_version_run_as_written() -> None:
    for command in _block("rayeval run-one"):
        done = subprocess.run(shlex.split(command), cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode in (0, 1), f"{command}\n{done.stderr}"  # 1: graded and failed
        assert '"status"' in done.stdout and '"status": "error"' not in done.stdout, done.stdout[-3000:]
    shell_lines = [c for c in _block("rayeval run EVALS") if not c.startswith("rayeval run ")]
    assert shell_lines == ["rayeval agents", "rayeval --version"]
    for command in shell_lines:
        _shell(command, REPO)


def test_the_run_one_examples_name_only_files_a_clone_has() -> None:
    """Every path in the README's ``run-one`` examples is a file (or folder) of the repository,
    not one that only a developer's machine has beside it."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    files = set(tracked.splitlines())
    folders = {str(parent) for f in files for parent in Path(f).parents if str(parent) != "."}
    named = [word.partition("=")[2] or word for c in _block("rayeval run-one") for word in shlex.split(c)[2:]]
    paths = [word for word in named if "/" in word or word in folders]
    assert paths and all(path in files or path.rstrip("/") in folders for path in paths), paths


def test_the_report_commands_run_on_a_real_run(tmp_path: Path) -> None:
    root = tmp_path / "results"
    trials = shared_path("corpus", "scbench", "trials.jsonl")
    evals = shared_path("corpus", "scbench", "evals")
    _shell(f"rayeval run {evals} --agent replay --agent-arg trials={trials} --models claude-opus-4-7@claude-code,gpt-5.5@openai-codex "
           f"--seeds 3 --output {root} --no-progress", tmp_path)  # fmt: skip
    commands = [c for c in _block("rayeval report ROOT") if "[" not in c]  # the synopsis line has [options]
    assert len(commands) == 2
    env = {**os.environ}
    for command in commands:
        done = subprocess.run(["bash", "-c", command.replace("ROOT", str(root))], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, env=env, check=False)  # fmt: skip
        assert done.returncode in (0, 1), f"{command}\n{done.stderr}"  # 1: a gate failed, as documented
        assert "Traceback" not in done.stderr
    compared = _shell(commands[1].replace("ROOT", str(root)), tmp_path).stdout
    assert "claude-opus-4-7" in compared and "gpt-5.5" in compared


@pytest.mark.parametrize("command", ["rayeval run evals --agent reference --output s3://bucket/results --no-progress"])
def test_the_job_submitted_in_the_readme_is_the_main_job_on_s3(command: str) -> None:
    """The entrypoint given to ``ray job submit`` is the quickstart's run with an S3 root."""
    submitted = [c for c in _block("export RAY_AUTH_MODE=token") if c.startswith("ray job submit")]
    assert submitted and submitted[0].endswith(command)


def test_the_models_example_runs_against_loopback_servers(
    s3_server: S3Server, aws_credentials: None, tmp_path: Path
) -> None:
    """The prompt agent's example as written, its keys made up, its two providers one loopback
    model server (``*_BASE_URL``) and its response cache a bucket named ``bucket`` on moto."""
    import boto3

    export, command = _block("export OPENAI_API_KEY=")
    keys = {"OPENAI_API_KEY": "sk-test-readme-openai", "ANTHROPIC_API_KEY": "sk-ant-test-readme"}
    assert export == f"export {' '.join(f'{name}=...' for name in keys)}"
    client = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    client.create_bucket(Bucket="bucket")
    try:
        with FakeModelServer(script=[], answer=mc_answer) as server:
            env = {**os.environ, **keys, "OPENAI_BASE_URL": f"{server.url}/v1", "ANTHROPIC_BASE_URL": server.url,
                   "AWS_ENDPOINT_URL": s3_server.endpoint_url}  # fmt: skip
            (tmp_path / "evals").symlink_to(REPO / "evals")
            done = _shell(command, tmp_path, env)
            requests = server.model_requests()
        cached = client.list_objects_v2(Bucket="bucket", Prefix="responses/").get("KeyCount", 0)
    finally:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket="bucket"):
            for item in page.get("Contents", []):
                client.delete_object(Bucket="bucket", Key=item["Key"])
        client.delete_bucket(Bucket="bucket")
    evals = len(list((REPO / "evals").rglob("*.json")))
    assert len(requests) == 2 * 3 * evals and cached == len(requests)  # 2 models x 3 seeds, each reply cached
    assert "openai/gpt-4o" in done.stdout and "anthropic/claude-sonnet-4-5" in done.stdout


def test_the_local_server_example_runs_with_no_key(tmp_path: Path) -> None:
    """The README's model on a local OpenAI-compatible server: the prompt agent's command as
    written (the server at its own port), no key in the environment; the server sees none."""
    prompt, mini = _block("rayeval run evals --agent prompt --models openai-compatible/")
    assert "--agent mini-swe-agent" in mini and "base_url=http://127.0.0.1:8000/v1" in mini
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAY_ADDRESS")}
    with FakeModelServer(script=[], answer=mc_answer) as server:
        (tmp_path / "evals").symlink_to(REPO / "evals")
        done = _shell(prompt.replace("http://127.0.0.1:8000", server.url), tmp_path, env)
        requests = server.model_requests()
    assert len(requests) == len(list((REPO / "evals").rglob("*.json")))
    assert not any("authorization" in {name.lower() for name in r.headers} for r in requests)
    assert "openai-compatible/Qwen2.5-7B-Instruct" in done.stdout and (tmp_path / "rayeval-results").is_dir()
