"""The unit runner: a fresh process that starts each unit's agent, and nothing else.

Started once per worker process by exec (under bubblewrap when sandboxed, see
``units.py``), it never receives an eval, a grader config, a result or a credential. It
waits on its control socket for requests, each a mode byte and one end of a socket pair, and
for each starts the unit's agent process with ``clone``: sandboxed, straight into new user,
mount, pid, ipc and uts namespaces (and net when the network is off), as pid 1 of its own pid
namespace. It hands the worker a pidfd of that process over the unit's socket: killing it
ends the namespace, and the kernel kills every process in it, whatever session or process
group they moved to. When the process has ended, the runner sends its exit status.

The agent process reads its unit's spec from the socket, builds its view of the file system,
drops every capability, gives up the kernel's keyrings (not namespaced), runs the agent (what
the spec's ``entry`` calls) and sends its return value back as JSON. Trusted code reads it with a size cap; nothing crosses but
JSON.

On the unit socket: the runner's pidfd message, then frames of one kind byte and a length:
``S`` the spec (worker to agent), ``R`` the result (agent to worker), ``X`` the exit status
(runner to worker), and ``C`` a chunk of a chunked session done (agent to worker, which saves
the unit's checkpoint and answers with one ``CHUNK_SAVED`` byte, so the session waits for it). Standard library only (plus ``namespaces`` and ``rayeval._json``): the
runner stays small, and starting a unit from it is cheap.
"""

from __future__ import annotations

import array
import contextlib
import gc
import importlib
import json
import os
import resource
import select
import signal
import socket
import stat
import struct
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._json import json_fallback
from ..errors import RayevalError
from . import namespaces as ns

_FRAME = struct.Struct("!cQ")
FRAME_HEADER_BYTES = _FRAME.size
SPEC, RESULT, EXIT = b"S", b"R", b"X"
#: The unit's process is set up and calls the agent next: only before this frame can the unit
#: report that its sandbox failed (after it, the agent's code holds the socket too).
READY = b"Y"
#: A chunk of the unit's session is done (see ``report_chunk``), and the worker's one-byte answer.
CHUNK, CHUNK_SAVED = b"C", b"c"
#: Largest chunk report the worker reads.
MAX_CHUNK_REPORT_BYTES = 4096
#: Largest spec an agent process reads (the task and a pickled agent).
MAX_SPEC_BYTES = 256 << 20
#: The uid and gid an agent has inside its user namespace when the runner is root outside
#: (root inside would give it every capability again on exec).
INNER_ID = 1000
SETUP_FAILED_EXIT = 111
PID_DIGITS = 20  # a pid handed over as text: this many digits, space-padded
#: Request modes: sandboxed with the network on, off, or off but for the model gateway (a
#: network namespace of its own either way), or a plain process.
MODES = {b"S": "sandbox", b"N": "sandbox-no-network", b"M": "sandbox-model-network", b"P": "process"}
#: the network of each sandboxed mode
NETWORK_OF_MODE = {b"S": "host", b"N": "none", b"M": "model"}
#: In ``model`` mode, the unit's process lends the trusted side a socket listening on the
#: gateway's port inside its network namespace (``LENT``), or says it has none (``NOT_LENT``).
LENT, NOT_LENT = b"L", b"l"
_NAMESPACES = ns.CLONE_NEWUSER | ns.CLONE_NEWNS | ns.CLONE_NEWPID | ns.CLONE_NEWIPC | ns.CLONE_NEWUTS


# ------------------------------------------------------------------------------------ frames
def send_frame(sock: socket.socket, kind: bytes, data: bytes) -> None:
    sock.sendall(_FRAME.pack(kind, len(data)) + data)


def read_exactly(sock: socket.socket, size: int, wait: Callable[[], None] | None = None) -> bytes:
    """``size`` bytes. ``wait``, when given, is called before every read: it returns once
    there is something to read, or raises (``TimeoutError`` at a deadline: bytes trickled in
    one at a time never renew it)."""
    chunks, left = [], size
    while left:
        if wait is not None:
            wait()
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("connection closed mid-frame")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket, limit: int, wait: Callable[[], None] | None = None) -> tuple[bytes, bytes]:
    """The next frame's kind and data; ``FrameTooLarge`` (nothing read of its data) past
    ``limit``. ``wait``: see ``read_exactly``."""
    kind, size = _FRAME.unpack(read_exactly(sock, _FRAME.size, wait))
    if size > limit:
        raise FrameTooLarge(kind, size)
    return kind, read_exactly(sock, size, wait)


class FrameTooLarge(RayevalError, ValueError):
    def __init__(self, kind: bytes, size: int):
        self.kind = kind
        self.size = size
        super().__init__(f"a frame of {size} bytes")


def send_fds(sock: socket.socket, fds: list[int], message: bytes = b"F") -> None:
    sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def recv_fds(sock: socket.socket, count: int) -> tuple[bytes, list[int]] | None:
    """The next message's byte and descriptors; None when the other side has closed."""
    fds = array.array("i")
    message, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(count * fds.itemsize))
    if not message:
        return None
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return message, list(fds)


# ------------------------------------------------------------------------------------ runner
class _Runner:
    """The runner's loop: start units on request, report each one's exit to its worker."""

    def __init__(self, control: socket.socket):
        self.control = control
        self.ids = (os.geteuid(), os.getegid())
        self.units: dict[int, socket.socket] = {}  # agent pid -> the runner's end of its unit socket
        self.exits: dict[int, tuple[socket.socket, bytes]] = {}  # socket fd -> exit frame not yet sent
        self.wake_read, wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the loop through the pipe
        self.wake_write = wake_write

    def serve(self) -> None:
        """Until the worker closes the control socket (then every unit ends with the runner)."""
        while True:
            poller = select.poll()
            poller.register(self.control, select.POLLIN)
            poller.register(self.wake_read, select.POLLIN)
            for fd in self.exits:
                poller.register(fd, select.POLLOUT)
            for fd, _ in poller.poll():
                if fd == self.control.fileno():
                    request = recv_fds(self.control, 1)
                    if request is None:
                        return
                    self._start(*request)
                elif fd == self.wake_read:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_read, 4096)
                    self._reap()
                else:
                    self._send_exit(fd)

    def _start(self, mode: bytes, fds: list[int]) -> None:
        if len(fds) != 1 or mode not in MODES:
            for fd in fds:
                os.close(fd)
            return
        (fd,) = fds
        flags = 0 if mode == b"P" else _NAMESPACES | (ns.CLONE_NEWNET if mode in (b"N", b"M") else 0)
        try:
            pid = ns.clone(flags)
        except OSError:  # the worker sees the socket close: the unit reports it
            os.close(fd)
            return
        if pid == 0:
            self._become_unit(fd, mode)
        unit = socket.socket(fileno=fd)
        try:
            _hand_over(unit, pid)
        except OSError:  # the worker is gone: the unit ends when it finds no spec
            os.kill(pid, signal.SIGKILL)
        self.units[pid] = unit

    def _become_unit(self, fd: int, mode: bytes) -> None:
        """In the new process: drop the runner's state, keep only this unit's socket."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.closerange(3, fd)
            os.closerange(fd + 1, 1 << 20)  # other units' sockets, the control socket, the pipe
            code = _unit(socket.socket(fileno=fd), self.ids, mode)
        finally:
            os._exit(code)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            unit = self.units.pop(pid, None)
            if unit is not None:
                code = str(os.waitstatus_to_exitcode(status)).encode()
                self.exits[unit.fileno()] = (unit, _FRAME.pack(EXIT, len(code)) + code)

    def _send_exit(self, fd: int) -> None:
        unit, frame = self.exits[fd]
        try:
            sent = unit.send(frame, socket.MSG_DONTWAIT)
        except BlockingIOError:  # the worker has not read the result yet
            return
        except OSError:  # the worker is gone
            sent = len(frame)
        if sent < len(frame):
            self.exits[fd] = (unit, frame[sent:])
            return
        del self.exits[fd]
        unit.close()


def _hand_over(unit: socket.socket, pid: int) -> None:
    """Tell the worker its unit's process: a pidfd (Linux: it can end the process, whatever
    pid namespace it is in), else its pid, as text (no pid namespace there)."""
    if not hasattr(os, "pidfd_open"):
        unit.sendall(b"p" + str(pid).encode().rjust(PID_DIGITS))
        return
    pidfd = os.pidfd_open(pid)
    try:
        send_fds(unit, [pidfd], b"P")
    finally:
        os.close(pidfd)


def serve(control: socket.socket) -> None:
    _Runner(control).serve()


# ------------------------------------------------------------------------------------ unit
def _unit(sock: socket.socket, ids: tuple[int, int], mode: bytes) -> int:
    """The agent's process: its user mapping, spec, control groups; then set up and run.
    Whether it is sandboxed is what it was started as (``mode``), whatever the spec says."""
    if sys.platform == "linux":
        ns.set_parent_death_signal(signal.SIGKILL)  # the runner gone: so is the unit
    if mode != b"P":
        uid, gid = ids
        ns.map_user(uid or INNER_ID, gid or INNER_ID, uid, gid)
    kind, data = recv_frame(sock, MAX_SPEC_BYTES)
    if kind != SPEC:
        return SETUP_FAILED_EXIT
    spec = json.loads(data)
    spec["sandbox"] = mode != b"P"
    spec["network"] = NETWORK_OF_MODE.get(mode, "host")
    if spec["cgroups"]:  # join the unit's control groups: everything it starts counts there
        received = recv_fds(sock, spec["cgroups"])
        for group in received[1] if received else []:
            os.write(group, b"0")
            os.close(group)
    sock.set_inheritable(False)
    return _agent_process(spec, sock)


# ------------------------------------------------------------------------------------ agent
#: In a unit's process: its socket to the worker (None elsewhere).
_unit_socket: socket.socket | None = None


def report_chunk(report: bytes) -> bool:
    """In a unit's process: tell the worker a chunk of the unit's session is done, and wait
    until it has saved the unit's checkpoint. False where no worker listens (not a unit's
    process, or the worker gone)."""
    if _unit_socket is None or len(report) > MAX_CHUNK_REPORT_BYTES:
        return False
    try:
        send_frame(_unit_socket, CHUNK, report)
        return read_exactly(_unit_socket, 1) == CHUNK_SAVED
    except (OSError, EOFError):
        return False


def _agent_process(spec: dict[str, Any], sock: socket.socket) -> int:
    """pid 1 of the unit (sandboxed) or its process-group leader: set up, run, answer."""
    global _unit_socket
    _unit_socket = sock
    lending = spec["network"] == "model"
    try:
        _enter(spec)
        if lending:
            _lend_gateway_port(sock, spec["gateway_port"])
            lending = False
        send_frame(sock, READY, b"")
    except BaseException as exc:  # noqa: BLE001 - reported as the unit's sandbox failure
        if lending:  # the trusted side waits for the socket first
            with contextlib.suppress(OSError):
                sock.sendall(NOT_LENT)
        _send_result(sock, _encode({"kind": "setup_failed", "message": f"{type(exc).__name__}: {exc}"}))
        return SETUP_FAILED_EXIT
    try:
        payload = {"kind": "returned", "value": _call_entry(spec)}
    except BaseException as exc:  # noqa: BLE001 - the agent's exception is its outcome
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        payload = {"kind": "raised", "error_type": type(exc).__name__, "error_message": str(exc), "traceback": trace}
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken stream: the payload still goes back
            stream.flush()
    with contextlib.suppress(OSError):  # an empty log is no artifact, and an empty folder is cheaper to retire
        if os.lstat(spec["log_path"]).st_size == 0:
            os.unlink(spec["log_path"])
    _send_result(sock, _encode(payload))
    return 0


def _lend_gateway_port(sock: socket.socket, port: int | None) -> None:
    """A socket listening on 127.0.0.1:``port`` in the unit's own network namespace, handed to
    the trusted side, whose gateway answers on it: the unit reaches the gateway at the address
    its variables name, and nothing else (no port: a unit that calls no model, a probe)."""
    if port is None:
        sock.sendall(NOT_LENT)
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        send_fds(sock, [listener.fileno()], LENT)


def _enter(spec: dict[str, Any]) -> None:
    """The unit's view of the machine, its limits, its environment and its streams."""
    os.setsid()
    work_dir = spec["work_dir"]
    if spec["sandbox"]:
        _build_view(spec)
        if spec["network"] in ("none", "model"):
            ns.bring_loopback_up()
        ns.drop_privileges()
        ns.forbid_keyrings()
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
    if sys.platform == "linux":
        ns.forbid_dumping()


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
    # the program binaries shown execute-only, copies from the runner's cache (covered next)
    exec_only_trees = [(ns.clone_tree(copy), _binary_in_view(path)) for copy, path in spec["exec_only"]]
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
    for tree, path in exec_only_trees:
        ns.attach_tree(tree, path)
        ns.remount_read_only(path)
        _check_execute_only(path)
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
    # the kernel's keys are not namespaced: their names stay out of sight, as Docker masks them
    if os.path.exists("/proc/keys"):
        ns.mount("/dev/null", "/proc/keys", None, ns.MS_BIND)
    # terminals of its own: the runner's pseudo-terminals are every unit's, and their times too
    if os.path.isdir("/dev/pts"):
        ns.mount("devpts", "/dev/pts", "devpts", ns.MS_NOSUID | ns.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


def _cover(covers: list[tuple[str, str]]) -> None:
    """An empty tmpfs over each existing folder (outer ones first), /dev/null over a file."""
    for path, options in sorted(covers, key=lambda cover: len(cover[0])):
        if os.path.isdir(path) and not os.path.islink(path):
            ns.mount("tmpfs", path, "tmpfs", ns.MS_NOSUID | ns.MS_NODEV, options)
        elif os.path.lexists(path):
            ns.mount("/dev/null", path, None, ns.MS_BIND)


def _binary_in_view(path: str) -> str:
    """``path``, where the runner's view must hold a program binary to show execute-only: a
    view that has it by another name would run it readable, so the unit does not start."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no program binary at {path} to show execute-only")
    return path


def _check_execute_only(path: str) -> None:
    """The binary at ``path`` cannot be read now: else the unit does not start."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o444:
        raise PermissionError(f"{path} is still readable (mode {mode:o}) where it should be execute-only")


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


def _call_entry(spec: dict[str, Any]) -> Any:
    """What the unit is for: the spec's ``entry`` (``module:function``, named by the worker)
    called with its ``call`` and the work folder (the harness's: find the agent, call it)."""
    module, _, name = spec["entry"].partition(":")
    return getattr(importlib.import_module(module), name)(spec["call"], Path(spec["work_dir"]))


def _encode(payload: dict[str, Any]) -> bytes:
    try:
        return json.dumps(payload, default=json_fallback).encode("ascii")
    except (TypeError, ValueError, RecursionError) as exc:  # e.g. a cycle
        message = f"the agent's return value cannot be sent back as JSON: {type(exc).__name__}: {exc}"
        return json.dumps({"kind": "raised", "error_type": "UnsendableResult", "error_message": message}).encode(
            "ascii"
        )


def _send_result(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the worker stopped reading (too large, or gone)
        send_frame(sock, RESULT, data)


def main() -> None:
    """``python -c ... <sys.path as JSON> <preload as JSON> <control socket fd>``."""
    sys.path[:] = json.loads(sys.argv[1])
    for module in json.loads(sys.argv[2]):  # rayeval's own modules and a grading's graders, never an agent's
        with contextlib.suppress(Exception):  # one that fails here fails again, reported, where a unit imports it
            importlib.import_module(module)
    # what is loaded now is shared by every unit: the collector leaves it alone, so that a
    # unit's collections do not copy the whole heap page by page
    gc.freeze()
    serve(socket.socket(fileno=int(sys.argv[3])))
