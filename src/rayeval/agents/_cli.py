"""Running an agent program as a subprocess and streaming its JSON events into a trajectory.

Shared by all harnesses.  The program runs with ``cwd = work_dir`` in the caller's process group
(no new session: the runner kills the unit's whole group/tree when its own deadline passes).
Each stdout line is appended, redacted, to ``work_dir/agent_output.log``; each line that parses
as a JSON object is redacted and appended to the in-memory trajectory, which is rewritten to
``work_dir/trajectory.json`` (atomically, at most every ``flush_interval`` seconds, and at the
end).  Stderr lines go to the same log prefixed with ``STDERR: ``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._files import write_atomic
from ..models.types import ReportedUsage
from ..sandbox.process_tree import end_process_tree
from ..secrets import (
    compile_secrets,
    is_secret_name,
    redact,
    redact_text,
    secret_values,
)
from ..unit.answers import ANSWER_FILE_NAMES, read_answer_file
from ..unit.run_summary import refusal_status, run_summary
from ._refusal import RefusalVerdict, write_verdict

LOG_NAME = "agent_output.log"
TRAJECTORY_NAME = "trajectory.json"
LOG_TAIL_CHARS = 1000

# Variables that must survive the environment scrub whatever they look like.
_ALWAYS_KEEP = ("RAYEVAL_UNIT_MARKER",)


# ----------------------------------------------------------------------------- environment
def build_env(
    *,
    pass_keys: Iterable[str] = (),
    extra: Mapping[str, str | None] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment for an agent program.

    Starts from ``base`` (default ``os.environ``) with every secret-looking variable removed
    (see :func:`rayeval.secrets.is_secret_name`), then puts back only the names in
    ``pass_keys`` (the program's own API key variables) and any listed in the JSON array
    ``$EXTRA_ENV_KEYS``; ``ANTHROPIC_API_KEY_FALLBACKS`` never reaches a program.  ``extra``
    (the caller's additions; a None value removes the variable) is applied last and wins.
    """
    base = dict(os.environ if base is None else base)
    keep = set(pass_keys)
    extra_names = base.get("EXTRA_ENV_KEYS")
    if extra_names:
        try:
            names = json.loads(extra_names)
        except ValueError:
            names = []
        if isinstance(names, list):
            keep |= {n for n in names if isinstance(n, str)}
    env = {k: v for k, v in base.items() if k in _ALWAYS_KEEP or not is_secret_name(k) or (k in keep and v)}
    env.pop("ANTHROPIC_API_KEY_FALLBACKS", None)
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def secrets_for(*envs: Mapping[str, str] | None) -> set[str]:
    """Every secret value visible in any of ``envs`` (plus ``os.environ``)."""
    found = secret_values(os.environ)
    for env in envs:
        if env:
            found |= secret_values(env)
    return found


# ----------------------------------------------------------------------------- process tree
def _end(proc: subprocess.Popen, grace: float) -> None:
    """End the program and everything it started (SIGTERM, ``grace`` s, SIGKILL), then reap it."""
    end_process_tree(proc, "descendants", grace=grace)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)


# ----------------------------------------------------------------------------- streaming run
@dataclass
class CliResult:
    exit_code: int | None
    timed_out: bool
    duration_s: float
    events: list[dict[str, Any]]
    error: str | None = None  # failure to start / harness exception
    stderr_tail: str = ""
    log_path: Path | None = None


def _atomic_write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, ensure_ascii=False, indent=1, default=str))


@dataclass
class _Stream:
    work_dir: Path
    pattern: re.Pattern[str] | None
    keep_event: Callable[[dict[str, Any]], bool] | None
    flush_interval: float
    earlier: list[dict[str, Any]] = field(default_factory=list)  # the trajectory's events before this run's
    events: list[dict[str, Any]] = field(default_factory=list)
    stderr_lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.log = open(self.work_dir / LOG_NAME, "a", encoding="utf-8")  # noqa: SIM115 - open for the run, closed by close()
        self.traj_path = self.work_dir / TRAJECTORY_NAME
        self._last_flush = 0.0
        self._dirty = False

    def _clean(self, text: str) -> str:
        return redact_text(text, self.pattern) if self.pattern is not None else text

    def stdout_line(self, raw: str) -> None:
        line = raw.rstrip("\r\n")
        clean = self._clean(line)
        with self.lock:
            self.log.write(clean + "\n")
            self.log.flush()
        if not line.strip():
            return
        try:
            event = json.loads(line)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if self.keep_event is not None and not self.keep_event(event):
            return
        if self.pattern is not None:
            event = redact(event, self.pattern)
        with self.lock:
            self.events.append(event)
            self._dirty = True
            now = time.monotonic()
            if now - self._last_flush >= self.flush_interval:
                self._flush_locked()

    def stderr_line(self, raw: str) -> None:
        clean = self._clean(raw.rstrip("\r\n"))
        with self.lock:
            self.stderr_lines.append(clean)
            if len(self.stderr_lines) > 200:
                del self.stderr_lines[:100]
            self.log.write("STDERR: " + clean + "\n")
            self.log.flush()

    def note(self, text: str) -> None:
        with self.lock:
            self.log.write(self._clean(text).rstrip("\n") + "\n")
            self.log.flush()

    def _flush_locked(self) -> None:
        _atomic_write_json(self.traj_path, self.earlier + self.events)
        self._last_flush = time.monotonic()
        self._dirty = False

    def finish(self) -> None:
        with self.lock:
            self._flush_locked()
            self.log.close()


def _close_quietly(pipe: Any) -> None:
    try:
        pipe.close()
    except OSError:
        pass


def _pump(pipe: Any, sink: Callable[[str], None]) -> None:
    try:
        for raw in iter(pipe.readline, b""):
            sink(raw.decode("utf-8", "replace"))
    except (OSError, ValueError):
        pass
    finally:
        _close_quietly(pipe)


def _feed(pipe: Any, data: bytes) -> None:
    try:
        pipe.write(data)
    except OSError:  # BrokenPipeError included: the program stopped reading
        pass
    finally:
        _close_quietly(pipe)


def run_streaming(
    argv: list[str],
    *,
    work_dir: Path,
    env: Mapping[str, str],
    stdin_text: str | None,
    timeout: float | None,
    secrets: Iterable[str],
    keep_event: Callable[[dict[str, Any]], bool] | None = None,
    flush_interval: float = 1.0,
    earlier_events: list[dict[str, Any]] | None = None,
) -> CliResult:
    """Run ``argv`` in ``work_dir``, stream its stdout JSON events, kill it at ``timeout``.

    ``earlier_events``: a resumed session's, which the log and ``trajectory.json`` go on from
    (the result's ``events`` are this run's alone); None starts both afresh."""
    work_dir = Path(work_dir)
    log_path = work_dir / LOG_NAME
    if earlier_events is None:
        with contextlib.suppress(FileNotFoundError):
            log_path.unlink()
    pattern = compile_secrets(secrets)
    stream = _Stream(work_dir, pattern, keep_event, flush_interval, earlier=list(earlier_events or []))
    _atomic_write_json(stream.traj_path, stream.earlier)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=str(work_dir),
            env=dict(env),
            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
        )
    except OSError as exc:
        stream.note(f"HARNESS: failed to start {argv[0]}: {exc}")
        stream.finish()
        return CliResult(
            None, False, round(time.monotonic() - start, 2), [], f"{type(exc).__name__}: {exc}", "", log_path
        )

    threads = [
        threading.Thread(target=_pump, args=(proc.stdout, stream.stdout_line), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, stream.stderr_line), daemon=True),
    ]
    if stdin_text is not None:
        threads.append(threading.Thread(target=_feed, args=(proc.stdin, stdin_text.encode("utf-8")), daemon=True))
    for t in threads:
        t.start()

    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        stream.note(f"HARNESS: timed out after {timeout} s; killing the agent process tree")
        _end(proc, grace=5.0)
    except BaseException as exc:  # KeyboardInterrupt, SystemExit from a signal handler, ...
        _end(proc, grace=2.0)
        for t in threads:
            t.join(timeout=2.0)
        stream.note(f"HARNESS: interrupted: {type(exc).__name__}")
        stream.finish()
        raise
    for t in threads:
        t.join(timeout=10.0)
    exit_code = proc.returncode
    stream.finish()
    tail = "\n".join(stream.stderr_lines[-20:])
    return CliResult(exit_code, timed_out, round(time.monotonic() - start, 2), stream.events, None, tail, log_path)


def note(work_dir: Path, text: str) -> None:
    """Append a line of the harness's own to the program's log (between two runs of it)."""
    with open(Path(work_dir) / LOG_NAME, "a", encoding="utf-8") as log:
        log.write(text.rstrip("\n") + "\n")


# ----------------------------------------------------------------------------- state folders
def state_base() -> Path:
    """Where per-run program state (CLAUDE_CONFIG_DIR, CODEX_HOME, ...) is created.

    ``$RAYEVAL_AGENT_STATE_DIR``, else ``~/.cache/rayeval/agent-state``.  Not under /tmp on
    purpose: Codex refuses to set up its helper binaries in a temporary directory.
    """
    explicit = os.environ.get("RAYEVAL_AGENT_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    return Path.home() / ".cache" / "rayeval" / "agent-state"


@contextlib.contextmanager
def state_dir(harness: str, path: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """A private folder for the program's own state, outside the work folder.

    With ``path`` the folder is created if needed and kept; otherwise a fresh folder is made
    under :func:`state_base` and removed afterwards (it holds session files that may contain
    anything the agent saw).
    """
    if path is not None:
        p = Path(path).expanduser()
        p.mkdir(parents=True, exist_ok=True)
        yield p
        return
    base = state_base()
    try:
        base.mkdir(parents=True, exist_ok=True)
        p = Path(tempfile.mkdtemp(prefix=f"{harness}-", dir=base))
    except OSError:
        p = Path(tempfile.mkdtemp(prefix=f"rayeval-{harness}-"))
    try:
        yield p
    finally:
        shutil.rmtree(p, ignore_errors=True)


# ----------------------------------------------------------------------------- answers
def log_tail(work_dir: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        with open(Path(work_dir) / LOG_NAME, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - chars * 4))
            return fh.read().decode("utf-8", "replace")[-chars:]
    except OSError:
        return ""


def read_answer(
    work_dir: Path, answer_files: Iterable[str] = ANSWER_FILE_NAMES
) -> tuple[dict | None, dict | None, str | None]:
    """``(answer, error_details, file_name)`` from the first answer file present in ``work_dir``
    (read as the trusted side reads it: see :func:`rayeval.unit.answers.read_answer_file`)."""
    for name in answer_files:
        read = read_answer_file(Path(work_dir) / name, name)
        if read is None:
            continue
        if read.problem is None and isinstance(read.value, dict):
            return read.value, None, name
        problem = read.problem or f"{name} does not hold a JSON object (got {type(read.value).__name__})"
        details = {"error": problem, "file_contents": read.head} if read.head else {"error": problem}
        return None, details, name
    names = " or ".join(answer_files)
    return None, {"error": f"no final answer provided ({names} was not written)"}, None


def finish(
    *,
    harness: str,
    model: str | None,
    work_dir: Path,
    result: CliResult,
    secrets: Iterable[str],
    trajectory: list[dict[str, Any]],
    usage: ReportedUsage,
    n_turns: int | None,
    n_steps: int | None,
    cost_usd: float | None,
    cost_source: str | None,
    command: list[str],
    timeout: float | None,
    extra: dict[str, Any] | None = None,
    refusals_evaluated: bool = False,
    answer_files: Iterable[str] = ANSWER_FILE_NAMES,
    refusal: RefusalVerdict | None = None,
    failure_details: dict[str, Any] | None = None,
    empty: bool = False,
) -> dict[str, Any]:
    """Read the answer, assemble the metadata, redact everything, return the agent envelope,
    and write ``refusal_verdict.json`` (``null`` without a refusal). ``failure_details``: the
    provider failure that left the unit without an answer, for its ``error_details``. A run
    that left no events (the program did not start, or said nothing), or one ``empty`` of any
    reply of the model, has unknown turns and steps, and was not searched for a refusal."""
    answer, details, answer_file = read_answer(work_dir, answer_files)
    if answer is None:
        details = {**(details or {}), **(failure_details or {})}
        if result.timed_out:
            details["error"] = f"Agent timed out after {timeout} s; " + details["error"]
        elif result.error:
            details["error"] = f"{result.error}; " + details["error"]
        elif result.exit_code not in (0, None):
            details["error"] = f"{harness} exited with code {result.exit_code}; " + details["error"]
        details["timed_out"] = result.timed_out
        details["exit_code"] = result.exit_code
        details["log_tail"] = log_tail(work_dir)
    if empty or not trajectory:
        n_turns = n_steps = None
        refusals_evaluated = False
    metadata: dict[str, Any] = {
        "harness": harness,
        "model": model,
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "duration_s": result.duration_s,
        "n_turns": n_turns,
        "n_steps": n_steps,
        **usage.as_dict(),
        "usage": usage.as_dict(),
        "cost_usd": cost_usd,
        "cost_source": cost_source if cost_usd is not None else None,
        "command": command,
        "answer_file": answer_file,
        "trajectory": trajectory,
    }
    if refusal is not None:
        metadata["refusal"] = refusal.as_dict()
    if timeout is not None:
        metadata["timeout_s"] = timeout
    if extra:
        metadata.update(extra)
    metadata["run_summary"] = program_run_summary(metadata, usage, refusal, evaluated=refusals_evaluated)
    if details is not None:
        metadata["error_details"] = details
    pattern = compile_secrets(secrets)
    out = redact({"answer": answer, "metadata": metadata}, pattern)
    found = out["metadata"].get("refusal")
    write_verdict(work_dir, RefusalVerdict(**found) if found is not None else None)
    try:  # the final (possibly enriched) trajectory replaces the streamed one on disk
        _atomic_write_json(Path(work_dir) / TRAJECTORY_NAME, out["metadata"]["trajectory"])
    except OSError:
        pass
    return out


def program_run_summary(
    metadata: dict[str, Any], usage: ReportedUsage, refusal: RefusalVerdict | None, *, evaluated: bool
) -> dict[str, Any]:
    """The run summary of a program's run, from the metadata :func:`finish` assembled, with
    the usage as the provider reported it (``evaluated``: whether its events were searched
    for refusals)."""
    return run_summary(
        duration_s=metadata["duration_s"],
        n_turns=metadata["n_turns"],
        n_steps=metadata["n_steps"],
        usage=usage.model_dump(),
        cost_usd=metadata["cost_usd"],
        cost_source=metadata["cost_source"],
        pricing_version=metadata.get("pricing_version"),
        refusal=refusal_status(evaluated or refusal is not None, refusal is not None),
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a program's JSON-lines file, read leniently (it is the agent's own
    work, or cut short): a line that is no JSON object is skipped, an unreadable file is empty."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
    except OSError:
        pass
    return out


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def count(value: Any) -> int | None:
    """``value`` as a whole number >= 0 (a count a program claims), else None."""
    number = as_int(value)
    return number if number is not None and number >= 0 else None


def add(a: int | None, b: Any) -> int | None:
    b = as_int(b)
    if b is None:
        return a
    return (a or 0) + b
