"""Driver process for mini-swe-agent: ``python -m rayeval.agents._mini_swe_entry CONFIG.json
[--resume SESSION_ID]``.

Runs in its own process (started by :mod:`rayeval.agents.mini_swe`) so that mini-swe-agent's
and litellm's process-wide side effects (global config, logging handlers, cost counters,
dotenv loading) never touch the caller.  The task arrives on stdin; every message the agent
records is written to stdout as one JSON line, and a final ``{"type": "result", ...}`` line
closes the run.  Anything else the libraries print goes to stderr.

Differences from a stock ``mini`` run, all deliberate:

* commands run in the work folder without a new session (so the runner's process-group kill
  reaches them) and without the secret-looking environment variables the model client needs;
* the completion command ends the run only once the answer file exists (as in the reference);
* template variables do not include the environment (it is not rendered into prompts);
* a failed model call ends the run (mini-swe-agent would retry it for minutes) with an
  ``{"type": "error", "status": ..., "message": ..., "retry_after_s": ...}`` line, and the
  conversation so far is kept as a session (``<session_dir>/<id>.json``, named by the first
  line, ``{"type": "session", "session_id": ...}``) that ``--resume`` goes on with: the saved
  messages, then the text on stdin (``Continue.``) as the next user message.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from rayeval._files import write_atomic
from rayeval.errors import RayevalError
from rayeval.sandbox.process_tree import end_process_tree

MAX_RAW_OUTPUT = 64 * 1024
MAX_ERROR_MESSAGE = 2000
#: what a session id is (matched whole: it names a file)
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


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


def provider_error(exc: BaseException) -> dict[str, Any] | None:
    """The error line for a failed model call: litellm's (and openai's) exceptions carry the
    HTTP ``status_code``, the response's headers (``litellm_response_headers``; ``response``
    has none) and the error body (``body``, or that of the error it was raised from); a
    connection error has no status.  None when ``exc`` is no provider's error."""
    import litellm

    from rayeval.agents._provider_hints import retry_after_from_body
    from rayeval.models.retry import retry_after_s

    status = getattr(exc, "status_code", None)
    if isinstance(exc, litellm.exceptions.APIConnectionError):
        status = None  # litellm gives it 500, but no server answered
    elif not isinstance(status, int) or isinstance(status, bool):
        return None
    message = getattr(exc, "message", None)
    message = message if isinstance(message, str) and message else str(exc)
    headers = getattr(exc, "litellm_response_headers", None) or getattr(getattr(exc, "response", None), "headers", None)
    # the error body: on the exception, or on the provider client's error it was raised from
    bodies = [getattr(e, "body", None) for e in (exc, exc.__cause__, exc.__context__) if e is not None]
    hints = [
        retry_after_s(headers if hasattr(headers, "items") else None),
        retry_after_from_body(message),
        *(retry_after_from_body(body) for body in bodies),
    ]
    return {
        "type": "error",
        "status": status,
        "message": message[:MAX_ERROR_MESSAGE],
        "retry_after_s": max((h for h in hints if h is not None), default=None),
        "exception": type(exc).__name__,
    }


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(obj, default=str, ensure_ascii=False))


class SessionError(RayevalError, ValueError):
    """``--resume`` names no session that can go on."""


def open_session(session_dir: Path, resume: str | None) -> tuple[str, Path, dict[str, Any] | None]:
    """The session's id, its file, and what it saved (None for a new session)."""
    session_id = resume or uuid.uuid4().hex
    if not SESSION_ID.fullmatch(session_id):
        raise SessionError(f"not a session id: {session_id!r}")
    path = session_dir / f"{session_id}.json"
    if resume is None:
        return session_id, path, None
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SessionError(f"cannot read session {session_id}: {exc}") from exc
    if not isinstance(saved, dict) or not isinstance(saved.get("messages"), list):
        raise SessionError(f"session {session_id} holds no conversation")
    n_calls, cost = saved.get("n_calls"), saved.get("cost")
    return (
        session_id,
        path,
        {
            "messages": saved["messages"],
            "n_calls": n_calls if isinstance(n_calls, int) else 0,
            "cost": float(cost) if isinstance(cost, (int, float)) else 0.0,
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rayeval.agents._mini_swe_entry")
    parser.add_argument("config", type=Path)
    parser.add_argument("--resume", metavar="SESSION_ID", help="go on with this saved session")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    config = json.loads(args.config.read_text())
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
    from minisweagent.exceptions import InterruptAgentFlow, Submitted
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

    try:
        session_id, session_path, saved = open_session(
            Path(config.get("session_dir") or args.config.parent / "sessions"), args.resume
        )
    except SessionError as exc:
        parser.error(f"--resume: {exc}")
    emit({"type": "session", "session_id": session_id, "resumed": saved is not None})

    class Agent(DefaultAgent):
        #: the saved session a resumed run goes on with (None: a new conversation)
        restored: dict[str, Any] | None = None
        #: the exception of the model call that failed, if one did
        model_error: Exception | None = None

        def add_messages(self, *messages: dict) -> list[dict]:
            if self.restored is not None:
                # run() opens with the system and task messages; a resumed run has the saved
                # conversation instead, and the prompt it was given as the next user message
                # (once: a run that failed at once already saved it)
                saved_messages = self.restored["messages"]
                self.messages.extend(saved_messages)
                self.n_calls, self.cost = self.restored["n_calls"], self.restored["cost"]
                self.restored = None
                prompt = self.model.format_message(role="user", content=task)
                messages = () if saved_messages[-1:] == [prompt] else (prompt,)
            for message in messages:
                extra = message.get("extra")
                if isinstance(extra, dict) and isinstance(extra.get("raw_output"), str):
                    extra["raw_output"] = _trim(extra["raw_output"])
                emit(message)
            added = super().add_messages(*messages)
            conversation = [m for m in self.messages if m.get("role") != "exit"]
            _write_json(session_path, {"messages": conversation, "n_calls": self.n_calls, "cost": self.cost})
            return added

        def query(self) -> dict:
            try:
                return super().query()
            except InterruptAgentFlow:
                raise
            except Exception as exc:
                self.model_error = exc
                raise

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
        agent.restored = saved
        info = agent.run(task)
        status = 0
        result = {"exit_status": info.get("exit_status"), "submission": info.get("submission")}
    except Exception as exc:  # noqa: BLE001 - reported in the result event
        status = 1
        result = {"exit_status": type(exc).__name__, "error": f"{type(exc).__name__}: {exc}"}
        failure = provider_error(exc) if agent is not None and agent.model_error is exc else None
        if failure is not None:
            emit(failure)
    emit(
        {
            "type": "result",
            **result,
            # this run's share: a resumed agent counts on from the saved session's
            "cost": getattr(agent, "cost", 0.0) - (saved["cost"] if saved else 0.0),
            "n_calls": getattr(agent, "n_calls", 0) - (saved["n_calls"] if saved else 0),
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
    if sys.platform == "linux":  # before any tool runs: its tools cannot read this process's
        from rayeval.sandbox.namespaces import forbid_dumping  # environment, nor write into its events

        forbid_dumping()
    raise SystemExit(main())
