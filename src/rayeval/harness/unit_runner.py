"""The unit runner: a fresh process that starts each unit's agent, and nothing else.

Started once per worker process by exec (under bubblewrap when sandboxed, see
``sandbox.py``), it never receives an eval, a grader config, a result or a credential. It
waits on its control socket for requests, each carrying one end of a socket pair, and forks
for each. The child (the unit's *keeper*) reads its unit's spec from that socket, enters new
namespaces (user, mount, pid, ipc, uts, and net when the network is off) and forks the agent
process, pid 1 of the unit's pid namespace, which builds the unit's view of the file system,
drops every capability and runs the agent. Killing that process ends the namespace: the
kernel kills every process in it, whatever session or process group they moved to.

Only JSON crosses: the spec in, the agent's return value out (at most ``max_output`` bytes;
beyond it the agent is killed and the unit reports it). The keeper sends two frames back: a
header (exit status, overflow) and the agent's payload, which trusted code parses.

Standard library only at import (plus ``namespaces``): the runner stays small, and forking
it is cheap.
"""
from __future__ import annotations

import array
import contextlib
import importlib
import json
import os
import pickle
import resource
import select
import signal
import socket
import struct
import sys
import traceback
from base64 import b64decode
from pathlib import Path
from typing import Any

from . import namespaces as ns

_FRAME = struct.Struct("!Q")
#: Largest spec a keeper reads (the task and a pickled agent): beyond it the unit fails.
MAX_SPEC_BYTES = 256 << 20
#: The uid and gid an agent has inside its user namespace when the runner is root outside
#: (root inside would give it every capability again on exec).
INNER_ID = 1000
SETUP_FAILED_EXIT = 111
KILL_REQUEST = b"K"


# ------------------------------------------------------------------------------------ frames
def send_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_FRAME.pack(len(data)) + data)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("connection closed mid-frame")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket, limit: int) -> bytes:
    (size,) = _FRAME.unpack(_read_exactly(sock, _FRAME.size))
    if size > limit:
        raise ValueError(f"frame of {size} bytes exceeds the limit of {limit}")
    return _read_exactly(sock, size)


def send_fds(sock: socket.socket, fds: list[int]) -> None:
    sock.sendmsg([b"F"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def recv_fds(sock: socket.socket, count: int) -> list[int] | None:
    """The descriptors of the next message; None when the other side has closed the socket."""
    fds = array.array("i")
    message, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(count * fds.itemsize))
    if not message:
        return None
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


# ------------------------------------------------------------------------------------ runner
def serve(control: socket.socket) -> None:
    """Fork a keeper per request until the worker closes the control socket."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # keepers are reaped by the kernel
    while True:
        fds = recv_fds(control, 1)
        if fds is None:
            return
        if not fds:
            continue
        fd = fds[0]
        try:
            pid = os.fork()
        except OSError:  # the worker sees the socket close: the unit reports it
            os.close(fd)
            continue
        if pid == 0:
            code = 1
            try:
                control.close()
                code = _keep(socket.socket(fileno=fd))
            finally:
                os._exit(code)
        os.close(fd)


# ------------------------------------------------------------------------------------ keeper
def _keep(unit: socket.socket) -> int:
    """Run one unit: read its spec, start its agent in new namespaces, relay the outcome."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    ns.set_parent_death_signal(signal.SIGKILL)  # the runner gone: so is the unit
    spec = json.loads(recv_frame(unit, MAX_SPEC_BYTES))
    if spec["cgroups"]:  # join the unit's control groups: everything it starts counts there
        for fd in recv_fds(unit, spec["cgroups"]) or []:
            os.write(fd, b"0")
            os.close(fd)
    if spec["sandbox"]:
        uid, gid = os.geteuid(), os.getegid()
        flags = ns.CLONE_NEWUSER | ns.CLONE_NEWNS | ns.CLONE_NEWPID | ns.CLONE_NEWIPC | ns.CLONE_NEWUTS
        if spec["network"] == "none":
            flags |= ns.CLONE_NEWNET
        ns.unshare(flags)
        ns.map_user(uid or INNER_ID, gid or INNER_ID, uid, gid)
    read_end, write_end = os.pipe()
    agent_pid = os.fork()
    if agent_pid == 0:
        os.close(read_end)
        unit.close()
        os._exit(_agent_process(spec, write_end))
    os.close(write_end)
    payload, overflow = _collect(agent_pid, read_end, unit, spec["max_output"], spec["sandbox"])
    _, status = os.waitpid(agent_pid, 0)
    header = {
        "exit_code": os.waitstatus_to_exitcode(status),
        "overflow": overflow,
        "killed": payload is None,
    }
    send_frame(unit, json.dumps(header).encode())
    send_frame(unit, payload or b"")
    return 0


def _kill(agent_pid: int, sandbox: bool) -> None:
    """pid 1 of the unit's namespace: its death ends every process in it. Without a
    namespace, the agent's own process group is all that can be found."""
    with contextlib.suppress(ProcessLookupError):
        if sandbox:
            os.kill(agent_pid, signal.SIGKILL)
        else:
            os.killpg(agent_pid, signal.SIGKILL)


def _collect(agent_pid: int, read_end: int, unit: socket.socket, limit: int, sandboxed: bool) -> tuple[bytes | None, bool]:
    """The agent's payload (None: killed at the worker's request), and whether it passed
    ``limit`` (the agent is then killed). Reading stops when the agent process ends, even if
    something it started still holds the pipe (possible only without a namespace)."""
    exited = os.pidfd_open(agent_pid)
    chunks: list[bytes] = []
    size = 0
    poller = select.poll()
    for fd in (read_end, unit.fileno(), exited):
        poller.register(fd, select.POLLIN)
    open_fds = {read_end, unit.fileno(), exited}
    result: tuple[bytes | None, bool] | None = None
    while result is None:
        for fd, _ in poller.poll():
            if fd == read_end:
                chunk = os.read(read_end, 1 << 20)
                if not chunk:
                    poller.unregister(read_end)
                    open_fds.discard(read_end)
                    continue
                size += len(chunk)
                if size > limit:
                    _kill(agent_pid, sandboxed)
                    result = (b"", True)
                    break
                chunks.append(chunk)
            elif fd == exited:
                os.set_blocking(read_end, False)
                with contextlib.suppress(BlockingIOError):
                    while chunk := os.read(read_end, 1 << 20):
                        size += len(chunk)
                        if size > limit:
                            result = (b"", True)
                            break
                        chunks.append(chunk)
                if result is None:
                    result = (b"".join(chunks), False)
                break
            else:  # the worker asks for the kill (its deadline passed), or is gone
                _kill(agent_pid, sandboxed)
                result = (None, False)
                break
    os.close(exited)
    os.close(read_end)
    return result


# ------------------------------------------------------------------------------------ agent
def _agent_process(spec: dict[str, Any], out_fd: int) -> int:
    """pid 1 of the unit (sandboxed) or its process-group leader: set up, run, answer."""
    try:
        ns.set_parent_death_signal(signal.SIGKILL)  # the keeper gone: so is the unit
        _enter(spec)
    except BaseException as exc:  # noqa: BLE001 - reported as the unit's sandbox failure
        _write_all(out_fd, _encode({"kind": "setup_failed", "message": f"{type(exc).__name__}: {exc}"}))
        return SETUP_FAILED_EXIT
    try:
        payload = {"kind": "returned", "value": _call_agent(spec)}
    except BaseException as exc:  # noqa: BLE001 - the agent's exception is its outcome
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        payload = {"kind": "raised", "error_type": type(exc).__name__, "error_message": str(exc), "traceback": trace}
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken stream: the payload still goes back
            stream.flush()
    _write_all(out_fd, _encode(payload))
    return 0


def _enter(spec: dict[str, Any]) -> None:
    """The unit's view of the machine, its limits, its environment and its streams."""
    os.setsid()
    work_dir = spec["work_dir"]
    if spec["sandbox"]:
        _build_view(spec)
        if spec["network"] == "none":
            ns.bring_loopback_up()
        ns.drop_privileges()
    limits = spec["limits"]
    ns.set_limit(resource.RLIMIT_NPROC, limits.get("processes"))
    ns.set_limit(resource.RLIMIT_DATA, limits.get("memory_bytes"))
    ns.set_limit(resource.RLIMIT_FSIZE, limits.get("file_bytes"))
    ns.set_limit(resource.RLIMIT_CORE, 0)
    os.chdir(work_dir)
    for folder in (spec["env"].get("HOME"), spec["env"].get("TMPDIR")):
        if folder:
            os.makedirs(folder, exist_ok=True)
    os.environ.clear()
    os.environ.update(spec["env"])
    _redirect_streams(spec["log_path"])


def _build_view(spec: dict[str, Any]) -> None:
    """Read-only everything (the runner's own view), with the unit's work folder writable, its
    inputs read-only, a private /tmp and /dev/shm, and ``hide`` (the work root, the data
    cache, ...) replaced by empty folders. Runs as root of the unit's user namespace."""
    work_dir = spec["work_dir"]
    ns.mount(None, "/", None, ns.MS_REC | ns.MS_PRIVATE)
    # detached copies first: the folders they come from are hidden next
    work_tree = ns.clone_tree(work_dir)
    input_trees = [(ns.clone_tree(source), target) for source, target in spec["inputs"]]
    # what must stay readable under a covered folder: the agent's modules on sys.path
    kept_trees = [(ns.clone_tree(path), path, os.path.isdir(path)) for path in spec["keep"] if os.path.exists(path)]
    tmp_options = f"size={spec['limits']['tmp_bytes']},mode=1777"
    covers = [(path, "size=1m,mode=755") for path in spec["hide"]]
    covers += [("/tmp", tmp_options), ("/dev/shm", tmp_options)]
    _cover(covers)
    for tree, path, directory in kept_trees:
        _mount_point(path, directory=directory)
        ns.attach_tree(tree, path)
        ns.remount_read_only(path)
    # what a kept folder brought back of the covered ones is covered again
    _cover([(path, options) for path, options in covers if any(_inside(path, kept) for _, kept, _ in kept_trees)])
    os.makedirs(work_dir, exist_ok=True)
    ns.attach_tree(work_tree, work_dir)
    data_dir = os.path.join(work_dir, "data")
    if input_trees:
        ns.mount(data_dir, data_dir, None, ns.MS_BIND)  # nothing added to or removed from the inputs
    for tree, target in input_trees:
        ns.attach_tree(tree, target)
        ns.remount_read_only(target)
    if input_trees:
        ns.remount_read_only(data_dir)
    ns.mount("proc", "/proc", "proc", ns.MS_NOSUID | ns.MS_NODEV | ns.MS_NOEXEC)


def _cover(covers: list[tuple[str, str]]) -> None:
    """An empty tmpfs over each existing folder (outer ones first), /dev/null over a file."""
    for path, options in sorted(covers, key=lambda cover: len(cover[0])):
        if os.path.isdir(path) and not os.path.islink(path):
            ns.mount("tmpfs", path, "tmpfs", ns.MS_NOSUID | ns.MS_NODEV, options)
        elif os.path.lexists(path):
            ns.mount("/dev/null", path, None, ns.MS_BIND)


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def _mount_point(path: str, *, directory: bool) -> None:
    """An empty folder or file at ``path`` (on a covering tmpfs) to attach a tree onto."""
    if directory:
        os.makedirs(path, exist_ok=True)
    elif not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def _redirect_streams(log_path: str) -> None:
    """The agent's prints go to its log in the work folder; it reads nothing on stdin."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115 - the agent's stdout
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115 - the agent's stderr


def _call_agent(spec: dict[str, Any]) -> Any:
    from .context import AgentContext, call_agent

    agent = spec["agent"]
    if "pickle" in agent:
        function = pickle.loads(b64decode(agent["pickle"]))  # the caller's own agent object
    else:
        function = importlib.import_module("rayeval.agents.resolve").resolve_agent(agent["ref"])
    if spec["probe"]:  # the run's start-up check: the sandbox starts, the agent is found
        return {"probe": callable(function)}
    context = AgentContext.model_validate(spec["context"])
    return call_agent(function, spec["task"], Path(spec["work_dir"]), context)


def _fallback(value: Any) -> Any:
    """Numpy values as Python ones, sets as sorted lists, anything else as its text."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return item()
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return str(value)


def _encode(payload: dict[str, Any]) -> bytes:
    try:
        return json.dumps(payload, default=_fallback).encode("ascii")
    except (TypeError, ValueError, RecursionError) as exc:  # e.g. a cycle
        message = f"the agent's return value cannot be sent back as JSON: {type(exc).__name__}: {exc}"
        return json.dumps({"kind": "raised", "error_type": "UnsendableResult", "error_message": message}).encode("ascii")


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError):  # the keeper stopped reading: too large
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]


def main() -> None:
    """``python -c ... <sys.path as JSON> <preload as JSON> <control socket fd>``."""
    sys.path[:] = json.loads(sys.argv[1])
    for module in json.loads(sys.argv[2]):  # rayeval's own modules, never an agent's
        importlib.import_module(module)
    serve(socket.socket(fileno=int(sys.argv[3])))
