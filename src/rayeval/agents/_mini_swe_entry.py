"""Driver process for mini-swe-agent: ``python -m rayeval.agents._mini_swe_entry CONFIG.json``.

Runs in its own process (started by :mod:`rayeval.agents.mini_swe`) so that mini-swe-agent's
and litellm's process-wide side effects (global config, logging handlers, cost counters,
dotenv loading) never touch the caller.  The task arrives on stdin; every message the agent
records is written to stdout as one JSON line, and a final ``{"type": "result", ...}`` line
closes the run.  Anything else the libraries print goes to stderr.

Differences from a stock ``mini`` run, all deliberate:

* commands run in the work folder without a new session (so the runner's process-group kill
  reaches them) and without the secret-looking environment variables the model client needs;
* the completion command ends the run only once the answer file exists (as in the reference);
* template variables do not include the environment (it is not rendered into prompts).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rayeval.sandbox.process_tree import end_process_tree

MAX_RAW_OUTPUT = 64 * 1024


def _trim(text: str, limit: int = MAX_RAW_OUTPUT) -> str:
    if not isinstance(text, str) or len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + f"\n... [{len(text) - limit} characters elided by rayeval] ...\n" + text[-half:]


def run_command(command: str, cwd: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return {"output": out, "returncode": proc.returncode, "exception_info": ""}
    except subprocess.TimeoutExpired:
        end_process_tree(proc, "descendants")
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            out = ""
        return {
            "output": out or "",
            "returncode": -1,
            "exception_info": f"The command timed out after {timeout} seconds and was killed.",
            "extra": {"exception_type": "TimeoutExpired"},
        }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config = json.loads(Path(argv[0]).read_text())
    task = sys.stdin.read()

    # Events go to the real stdout; everything printed by the libraries goes to stderr.
    events_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    events = os.fdopen(events_fd, "w", encoding="utf-8", buffering=1)

    def emit(obj: dict[str, Any]) -> None:
        events.write(json.dumps(obj, default=str, ensure_ascii=False) + "\n")
        events.flush()

    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.exceptions import Submitted
    from minisweagent.models import get_model

    from rayeval.secrets import is_secret_name

    work_dir = config["work_dir"]
    answer_files = config.get("answer_files") or ["eval_answer.json"]
    markers = config.get("completion_markers") or ["COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    command_env = {k: v for k, v in os.environ.items() if not is_secret_name(k)}
    for name in config.get("unset_for_commands") or []:
        command_env.pop(name, None)

    class Environment(LocalEnvironment):
        def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
            command = action.get("command", "")
            output = run_command(
                command,
                cwd or self.config.cwd or work_dir,
                command_env | self.config.env,
                timeout or self.config.timeout,
            )
            self._check_finished(output)
            return output

        def _check_finished(self, output: dict) -> None:
            lines = output.get("output", "").lstrip().splitlines(keepends=True)
            if not lines or lines[0].strip() not in markers or output.get("returncode") != 0:
                return
            if not any((Path(work_dir) / name).is_file() for name in answer_files):
                output["output"] = (
                    output.get("output", "")
                    + f"\n[rayeval] Not finished: {' or '.join(answer_files)} does not exist yet. "
                    "Write the answer file first, then issue the completion command again.\n"
                )
                return
            submission = "".join(lines[1:])
            raise Submitted(
                {"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}}
            )

        def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
            return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

    class Agent(DefaultAgent):
        def add_messages(self, *messages: dict) -> list[dict]:
            for message in messages:
                extra = message.get("extra")
                if isinstance(extra, dict) and isinstance(extra.get("raw_output"), str):
                    extra["raw_output"] = _trim(extra["raw_output"])
                emit(message)
            return super().add_messages(*messages)

    model_config: dict[str, Any] = {
        "model_kwargs": config.get("model_kwargs") or {},
        "cost_tracking": "ignore_errors",
        "observation_template": config["observation_template"],
        "format_error_template": config["format_error_template"],
    }
    if config.get("model_class"):
        model_config["model_class"] = config["model_class"]
    model_config.update(config.get("model_config") or {})

    start = time.monotonic()
    agent = None
    try:
        model = get_model(config["model_name"], model_config)
        env = Environment(cwd=work_dir, env=config.get("env") or {}, timeout=int(config.get("command_timeout") or 300))
        agent = Agent(
            model,
            env,
            system_template=config["system_template"],
            instance_template=config["instance_template"],
            step_limit=int(config.get("step_limit") or 0),
            cost_limit=float(config.get("cost_limit") or 0),
            wall_time_limit_seconds=int(config.get("wall_time_limit_seconds") or 0),
            output_path=None,
        )
        info = agent.run(task)
        status = 0
        result = {"exit_status": info.get("exit_status"), "submission": info.get("submission")}
    except Exception as exc:  # noqa: BLE001 - reported in the result event
        status = 1
        result = {"exit_status": type(exc).__name__, "error": f"{type(exc).__name__}: {exc}"}
    emit(
        {
            "type": "result",
            **result,
            "cost": getattr(agent, "cost", 0.0),
            "n_calls": getattr(agent, "n_calls", 0),
            "n_messages": len(getattr(agent, "messages", []) or []),
            "duration_s": round(time.monotonic() - start, 2),
            "mini_swe_agent_version": _version(),
        }
    )
    events.close()
    return status


def _version() -> str | None:
    try:
        import minisweagent

        return minisweagent.__version__
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    raise SystemExit(main())
