"""Grading under a wall-time limit, in a pool of long-lived grading subprocesses.

Graders are pure functions, but some take far longer on a crafted answer than on any honest
one, and answers are hostile. A thread cannot be stopped, so each grading runs in a
subprocess that is killed (and later replaced) when it overruns: the CPU it burned stops too.

The subprocesses are fresh interpreters (``python -m rayeval.unit.grading_server``), never
forks of the caller (a multi-threaded Ray worker), started with a minimal environment (no
credentials) and shared by every thread of a process, one request at a time each.

Protocol, one JSON line each way (UTF-8, lone surrogates passed through; JSON escapes every
newline in a string, so a line never holds another):

* on start, the subprocess writes ``READY``;
* request ``{"eval": <content hash>, "answer": <answer>}``, plus ``"specs"`` (the eval's grader
  entries) and ``"single"`` (whether it has one ``grader``) the first time that subprocess sees
  the eval: it keeps them by hash; optionally ``"judgments"`` (the outcomes of its LLM-judged
  graders' judge calls, see ``rayeval.graders.judging``) or ``"collect": true``;
* reply ``{"result": <GraderResult fields>}`` (with ``collect``: ``{"requests": <judge requests
  by key>}``) or ``{"error": <why>}``.

Values are plain JSON plus NaN and ±Infinity, so a result comes back as the grader made it.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from .._json import json_fallback
from ..errors import RayevalError
from ..evals import Eval
from ..graders.judging import Judgments
from ..graders.registry import GRADER_REGISTRY, is_registered, named_grader_types
from ..graders.result import GraderResult
from ..sandbox.process_tree import end_process_tree
from .grading import collect_judge_requests, grade_with_outcomes

DEFAULT_TIMEOUT_S = 30.0
POOL_SIZE = 4
MAX_REQUEST_BYTES = 128 << 20
"""A subprocess refuses longer requests: answers are capped at 10 MB before grading, and JSON
escapes at most make six bytes of one."""
STARTUP_TIMEOUT_S = 60.0
SERVER_MODULE = "rayeval.unit.grading_server"
READY = b'{"ready": true}\n'
RESULT_FIELDS = tuple(field.name for field in dataclasses.fields(GraderResult))

# The only variables a grading subprocess inherits: enough to run Python, nothing secret.
_ENV_ALLOWED = ("PATH", "PYTHONPATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
_OWN_GRADERS = "rayeval.graders."
_READ_CHUNK = 1 << 20


class GradingError(RayevalError):
    """A bounded grading that gave no verdict."""


class GradingTimeout(GradingError):
    """The grading ran past its time limit; its subprocess was killed."""


class GradingCrashed(GradingError):
    """The grading subprocess died, or could not be started."""


class GradingRefused(GradingError):
    """The answer could not be graded in a subprocess: not sendable as JSON, over the size
    limit, or the subprocess reported an error."""


def encode_line(value: Any) -> bytes:
    """One protocol line; numpy values and the like become JSON as everywhere else."""
    return json.dumps(value, default=json_fallback, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"


def decode_line(line: bytes) -> Any:
    return json.loads(line.decode("utf-8", "surrogatepass"))


def _server_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in _ENV_ALLOWED if name in os.environ}


def _exit_status(process: subprocess.Popen) -> str:
    code = process.poll()
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:  # a signal without a name
            return f"killed by signal {-code}"
    return f"exit code {code}"


class EvalGraders(NamedTuple):
    """What a grading subprocess needs of an eval: its grader entries, keyed by its content hash."""

    key: str
    specs: list[dict[str, Any]]
    single: bool


class _Server:
    """One grading subprocess, talked to through non-blocking pipes under a deadline."""

    def __init__(self, max_request_bytes: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, str(max_request_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_server_environment(),
            # the rayeval this process runs is the one the subprocess imports
            cwd=Path(__file__).resolve().parents[2],
            start_new_session=True,  # a Ctrl-C meant for the caller does not kill a grading
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stdin, self._stdout = self.process.stdin.fileno(), self.process.stdout.fileno()
        os.set_blocking(self._stdin, False)
        os.set_blocking(self._stdout, False)
        self._writable, self._readable = select.poll(), select.poll()
        self._writable.register(self._stdin, select.POLLOUT)
        self._readable.register(self._stdout, select.POLLIN)
        self.known: set[str] = set()  # the evals whose specs it holds

    @classmethod
    def start(cls, max_request_bytes: int) -> _Server:
        """A subprocess that has imported the graders and is ready for requests."""
        try:
            server = cls(max_request_bytes)
        except OSError as exc:
            raise GradingCrashed(f"the grading subprocess could not be started: {exc}") from exc
        try:
            ready = server._read_line(time.monotonic() + STARTUP_TIMEOUT_S)
        except GradingTimeout:
            server.stop()
            raise GradingCrashed(f"the grading subprocess was not ready within {STARTUP_TIMEOUT_S:g} s") from None
        except GradingCrashed as exc:
            server.stop()
            raise GradingCrashed(f"{exc} before it was ready") from None
        if ready != READY:
            server.stop()
            raise GradingCrashed(f"the grading subprocess wrote {ready[:200]!r} instead of being ready")
        return server

    def exchange(self, request: bytes, deadline: float) -> bytes:
        """Send one request line and read its reply line, both by ``deadline``."""
        view = memoryview(request)
        while view:
            try:
                view = view[os.write(self._stdin, view) :]
            except BlockingIOError:  # the pipe is full: it reads on
                self._wait(self._writable, deadline)
            except OSError as exc:  # BrokenPipeError: it died
                raise self._crashed() from exc
        return self._read_line(deadline)

    def _read_line(self, deadline: float) -> bytes:
        line = bytearray()
        while not line.endswith(b"\n"):  # a line holds no other newline: it is complete
            self._wait(self._readable, deadline)
            try:
                chunk = os.read(self._stdout, _READ_CHUNK)
            except BlockingIOError:  # woken without data after all
                continue
            except OSError as exc:
                raise self._crashed() from exc
            if not chunk:
                raise self._crashed()
            line += chunk
        return bytes(line)

    def _wait(self, poller: select.poll, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(math.ceil(remaining * 1000)):
            raise GradingTimeout

    def _crashed(self) -> GradingCrashed:
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        return GradingCrashed(f"the grading subprocess died ({_exit_status(self.process)})")

    def kill(self) -> None:
        """Stop it, and anything a grader started, at once; safe while another thread waits on
        its pipes (they stay open)."""
        end_process_tree(self.process, "session")

    def stop(self) -> None:
        """Kill it, reap it and close its pipes."""
        self.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            assert pipe is not None
            try:
                pipe.close()
            except OSError:  # a write it never read
                pass


def verdict_of(reply: dict[str, Any]) -> GraderResult:
    """The verdict a grading subprocess sent, every field named: a reply without one (its score,
    say) is the subprocess's fault, never a verdict with a default score."""
    try:
        sent = reply["result"]
        return GraderResult(
            passed=sent["passed"],
            score=sent["score"],
            score_max=sent["score_max"],
            metrics=sent["metrics"],
            reasoning=sent["reasoning"],
            agent_answer=sent["agent_answer"],
            field_scores=sent["field_scores"],
        )
    except (KeyError, TypeError) as exc:
        raise GradingRefused(f"the grading subprocess sent no whole verdict (missing {exc})") from None


class GradingPool:
    """Up to ``size`` grading subprocesses shared by a process's threads.

    A grading takes an idle subprocess, or starts one while fewer than ``size`` run, or waits
    for one to be free. A subprocess that overruns or dies is discarded, and a new one starts
    when next needed.
    """

    def __init__(self, size: int = POOL_SIZE, max_request_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.size = size
        self.max_request_bytes = max_request_bytes
        self._changed = threading.Condition()
        self._idle: list[_Server] = []
        self._busy: set[_Server] = set()
        self._starting = 0
        self._closed = False  # no prestarted subprocess is kept once closed

    def grade(
        self, graders: EvalGraders, answer: Any, timeout: float, *, judgments: Judgments | None = None
    ) -> GraderResult:
        """The verdict of an eval's ``graders`` on ``answer``, or a GradingError; ``timeout``
        bounds the grading, not the wait for a free subprocess. ``judgments``: the outcomes of
        its LLM-judged graders' judge calls (see ``rayeval.graders.judging``)."""
        reply = self._exchange(graders, answer, timeout, {"judgments": judgments} if judgments else {})
        return verdict_of(reply)

    def judge_requests(self, graders: EvalGraders, answer: Any, timeout: float) -> Judgments:
        """The judge calls the LLM-judged graders of ``graders`` would make on ``answer`` (none is made)."""
        return self._exchange(graders, answer, timeout, {"collect": True})["requests"]

    def _exchange(self, graders: EvalGraders, answer: Any, timeout: float, extra: dict[str, Any]) -> dict[str, Any]:
        server = self._acquire()
        healthy = True
        try:
            request: dict[str, Any] = {"eval": graders.key, "answer": answer, **extra}
            if graders.key not in server.known:
                request.update(specs=graders.specs, single=graders.single)
            try:
                line = encode_line(request)
            except (ValueError, RecursionError) as exc:
                raise GradingRefused(f"the answer cannot be sent to grading as JSON: {exc}") from exc
            healthy = False  # until its reply is in, whatever goes wrong leaves it unusable
            try:
                reply = decode_line(server.exchange(line, time.monotonic() + timeout))
            except GradingTimeout:
                raise GradingTimeout(f"grading took longer than {timeout:g} s and was stopped") from None
            healthy = True
            if "error" in reply:
                raise GradingRefused(f"the grading subprocess could not grade the answer: {reply['error']}")
            server.known.add(graders.key)
            return reply
        finally:
            self._release(server, healthy)

    def close(self) -> None:
        """Stop every subprocess: idle ones at once, busy ones by killing them (their callers
        then get GradingCrashed and discard them)."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
            self._changed.notify_all()
        for server in busy:
            server.kill()
        for server in idle:
            server.stop()

    def prestart(self, count: int) -> None:
        """Start ``count`` subprocesses (at most ``size``) now, in the background, instead of on
        the first gradings: a batch's first units end together and would each wait for one to
        start.  A subprocess that fails to start is left to the first grading to report."""
        threading.Thread(target=self._fill, args=(min(count, self.size),), name="grading-prestart", daemon=True).start()

    def _fill(self, count: int) -> None:
        while True:
            with self._changed:
                if self._closed or len(self._idle) + len(self._busy) + self._starting >= count:
                    return
                self._starting += 1
            try:
                self._start_one(busy=False)
            except GradingError:
                return

    def _acquire(self) -> _Server:
        with self._changed:
            while not self._idle and len(self._busy) + self._starting >= self.size:
                self._changed.wait()
            if self._idle:
                server = self._idle.pop()
                self._busy.add(server)
                return server
            self._starting += 1
        return self._start_one(busy=True)

    def _start_one(self, *, busy: bool) -> _Server:
        """A new subprocess, counted in ``_starting`` by the caller: busy (the caller's) or idle."""
        try:
            server = _Server.start(self.max_request_bytes)
        except GradingError:
            with self._changed:
                self._starting -= 1
                self._changed.notify()
            raise
        with self._changed:
            self._starting -= 1
            kept = busy or not self._closed  # a prestarted one is not kept once the pool closed
            if busy:
                self._busy.add(server)
            elif kept:
                self._idle.append(server)
            self._changed.notify()
        if not kept:
            server.stop()
        return server

    def _release(self, server: _Server, healthy: bool) -> None:
        if not healthy:
            server.stop()
        with self._changed:
            self._busy.discard(server)
            if healthy:
                self._idle.append(server)
            self._changed.notify()


_graders: dict[str, EvalGraders | None] = {}
_shared: GradingPool | None = None
_shared_lock = threading.Lock()


def _own_graders_only(value: Any) -> bool:
    """Whether no grader type named in ``value`` (grader entries, composite children included)
    is registered to a class outside rayeval's graders, which a fresh interpreter would lack."""
    return not any(
        is_registered(kind) and not GRADER_REGISTRY[kind].__module__.startswith(_OWN_GRADERS)
        for kind in named_grader_types(value)
    )


def _survives_json(value: Any) -> bool:
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError, RecursionError):
        return False


def eval_graders(eval_: Eval) -> EvalGraders | None:
    """``eval_``'s grader entries for a grading subprocess, or None when it must be graded in
    this process: it uses graders other than rayeval's own, or entries that JSON would change."""
    key = eval_.content_hash()
    if key not in _graders:
        specs = [spec.model_dump() for spec in eval_.grader_specs]
        sendable = _own_graders_only(specs) and _survives_json(specs)
        _graders[key] = EvalGraders(key, specs, eval_.grader is not None) if sendable else None
    return _graders[key]


def shared_pool() -> GradingPool:
    """This process's grading pool, created on first use and closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = GradingPool()
        return _shared


def prestart_grading(evals: list[Eval], at_once: int) -> None:
    """Start this process's grading subprocesses in the background, ahead of the gradings of
    ``evals``, as many as ``at_once`` gradings need (none when each eval is graded in this
    process, see ``eval_graders``)."""
    if any(eval_graders(eval_) is not None for eval_ in evals):
        shared_pool().prestart(at_once)


def grade_bounded(
    eval_: Eval, answer: Any, timeout: float | None = DEFAULT_TIMEOUT_S, *, judgments: Judgments | None = None
) -> GraderResult:
    """``grade(eval_, answer)`` in a grading subprocess, stopped after ``timeout`` seconds:
    GradingTimeout then, another GradingError when the subprocess fails. ``timeout=None``, or
    an eval that ``eval_graders`` cannot send, grades in this process, without a limit.
    ``judgments``: see ``GradingPool.grade``."""
    graders = None if timeout is None else eval_graders(eval_)
    if timeout is None or graders is None:
        return grade_with_outcomes(eval_.grader_specs, answer, single=eval_.grader is not None, judgments=judgments)
    return shared_pool().grade(graders, answer, timeout, judgments=judgments)


def judge_requests_bounded(eval_: Eval, answer: Any, timeout: float | None = DEFAULT_TIMEOUT_S) -> Judgments:
    """The judge calls ``eval_``'s LLM-judged graders would make on ``answer``, collected as
    ``grade_bounded`` grades (the answer is hostile input: in a grading subprocess)."""
    graders = None if timeout is None else eval_graders(eval_)
    if timeout is None or graders is None:
        return collect_judge_requests(eval_.grader_specs, answer, single=eval_.grader is not None)
    return shared_pool().judge_requests(graders, answer, timeout)


def _close_shared_pool() -> None:
    if _shared is not None:
        _shared.close()


def _forget_shared_pool() -> None:
    """In a forked child: the parent's subprocesses are not its own to use or stop."""
    global _shared, _shared_lock
    _shared, _shared_lock = None, threading.Lock()


atexit.register(_close_shared_pool)
os.register_at_fork(after_in_child=_forget_shared_pool)
