"""A small TCP forwarder that can take the S3 endpoint "down" (connections refused), make it answer
HTTP errors, and bring it back up.

The moto server keeps its buckets in memory, so an outage is simulated in front of it instead of
restarting it: ``down()`` closes the listening socket and cuts every open connection (new
connections are refused, like a dead endpoint); ``fail(503)`` cuts them too but answers every
request with that HTTP status and an S3 error document (an overloaded or broken server);
``up()`` forwards to moto again on the same port.
"""

from __future__ import annotations

import socket
import threading

# S3's error codes for the statuses ``fail`` answers with
_ERROR_CODES = {500: ("InternalError", "Internal Server Error"), 503: ("SlowDown", "Service Unavailable")}


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.host = host
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._failing: int | None = None  # the HTTP status every request gets, while failing
        self._accept_thread: threading.Thread | None = None
        probe = socket.socket()
        probe.bind((host, 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.up()

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def is_up(self) -> bool:
        return self._listener is not None

    def up(self) -> None:
        """Forward to the server again (after ``down`` or ``fail``)."""
        with self._lock:
            self._failing = None
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(64)
            self._listener = listener
            self._accept_thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
            self._accept_thread.start()

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        for conn in conns:
            _close(conn)
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=5)

    def fail(self, status: int = 503) -> None:
        """Answer every request with HTTP ``status`` (500 or 503) until ``up``; open connections
        are cut, so no request reaches the server meanwhile."""
        if status not in _ERROR_CODES:
            raise ValueError(f"status must be one of {sorted(_ERROR_CODES)}")
        self.up()
        with self._lock:
            self._failing = status
            conns, self._conns = self._conns, set()
        for conn in conns:
            _close(conn)

    def close(self) -> None:
        self.down()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            failing = self._failing
            if failing is not None:
                threading.Thread(target=_answer_error, args=(client, failing), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:  # went down meanwhile
                    _close(client)
                    _close(upstream)
                    return
                self._conns.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                _close(sock)
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _answer_error(client: socket.socket, status: int) -> None:
    """Read one request (headers and body, unless the client waits for ``100 Continue``) and
    answer it with ``status`` and an S3 error document; then close the connection."""
    code, reason = _ERROR_CODES[status]
    try:
        client.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.decode("latin-1").partition(":") for line in head.split(b"\r\n")[1:])
        }
        if headers.get("expect", "").lower() != "100-continue":
            if headers.get("transfer-encoding", "").lower() == "chunked":
                while not body.endswith(b"0\r\n\r\n"):
                    chunk = client.recv(65536)
                    if not chunk:
                        break
                    body += chunk
            else:
                while len(body) < int(headers.get("content-length", "0")):
                    chunk = client.recv(65536)
                    if not chunk:
                        break
                    body += chunk
        document = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>{reason} (injected by the test)</Message></Error>"
        ).encode()
        client.sendall(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(document)}\r\nConnection: close\r\n\r\n".encode()
            + document
        )
    except OSError:
        pass
    finally:
        _close(client)
