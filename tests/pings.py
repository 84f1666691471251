"""A loopback TCP server that processes started by agents report to, every 0.1 s: whether they
still run, told from outside. (A sandboxed unit has a pid namespace of its own: the pids an
agent sees there are not the host's, and a process it moves to a new session is out of reach
of its process group.)"""

from __future__ import annotations

import contextlib
import os
import signal
import socketserver
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path


class Pings(socketserver.ThreadingTCPServer):
    """Counts the pings of each tag, and the last pid each tag reported."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.pids: dict[str, int] = {}
        self._lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _PingHandler)

    @classmethod
    @contextlib.contextmanager
    def serving(cls) -> Iterator[Pings]:
        server = cls()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield server
        finally:
            server.shutdown()
            server.server_close()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def record(self, tag: str, pid: int) -> None:
        with self._lock:
            self.counts[tag] += 1
            self.pids[tag] = pid

    def pings_after(self, settle: float = 1.0, window: float = 2.0) -> Counter[str]:
        """The pings of a ``window`` that starts ``settle`` seconds from now (a ping under way
        when a process was killed may still arrive in between)."""
        time.sleep(settle)
        with self._lock:
            self.counts.clear()
        time.sleep(window)
        with self._lock:
            return Counter(self.counts)

    def kill(self, tag: str) -> None:
        """End the process that pinged as ``tag`` (by the pid it reported: only for processes
        outside any pid namespace, and only if that pid still runs the pinger of that tag)."""
        pid = self.pids.get(tag)
        if pid is None:
            return
        with contextlib.suppress(OSError):
            if tag.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)


def pinger_code(port: int, tag: str, *, spawn: str | None = None) -> str:
    """Python code (for ``python -c``) that pings the server on ``port`` as ``tag`` every 0.1 s
    for a minute, having created ``<tag>.started`` in its working folder after its first ping.
    First, with ``spawn`` (more such code), it starts that in a new session with an empty
    environment: out of its own process group and session."""
    lines = ["import os, socket, subprocess, sys, time"]
    if spawn is not None:
        lines.append(
            f"subprocess.Popen([sys.executable, '-c', {spawn!r}], start_new_session=True, env={{}}, "
            "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)"
        )
    lines += [
        "started = False",
        "for _ in range(600):",
        "    try:",
        f"        with socket.create_connection(('127.0.0.1', {port}), timeout=1) as s:",
        f"            s.sendall(b'%s %d\\n' % ({tag!r}.encode(), os.getpid()))",
        "        if not started:",
        f"            open({tag + '.started'!r}, 'w').close()",
        "            started = True",
        "    except OSError:",
        "        pass",
        "    time.sleep(0.1)",
    ]
    return "\n".join(lines) + "\n"


class _PingHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        words = self.rfile.readline(200).decode("ascii", "replace").split()
        if len(words) == 2 and words[1].isdigit():
            self.server.record(words[0], int(words[1]))  # type: ignore[attr-defined]
