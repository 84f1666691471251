"""``rayeval view``'s local web server: the page's own assets and a read-only JSON API.

Everything is served under a secret path, ``/<token>/`` (:attr:`ViewServer.url`): the results
hold expected answers, and whatever runs on this machine can reach a loopback port, a
sandboxed agent with the host's network included; any other path is "not found".

Routes under it (GET and HEAD only): ``/`` the page; ``/assets/<name>`` one of the packaged assets
(:data:`rayeval.view.assets.ASSETS`, by exact name: no path ever reaches the file system);
``/api/runs``, ``/api/units``, ``/api/unit``, ``/api/compare``, ``/api/leaderboard`` (JSON) and
``/api/plot`` (SVG). Every response carries a strict Content-Security-Policy: scripts, styles
and images from this server only, nothing inline, no frames, nowhere else to connect.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..errors import RayevalError
from ..report.reader import ReportError
from .assets import ASSETS, CONTENT_SECURITY_POLICY, asset_bytes, index_html
from .data import NotFound, UnitQuery, ViewData, json_text

log = logging.getLogger(__name__)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class BadRequest(RayevalError, ValueError):
    """A request parameter missing or malformed (HTTP 400)."""


def _required(params: dict[str, str], name: str) -> str:
    value = params.get(name, "")
    if not value:
        raise BadRequest(f"missing parameter {name!r}")
    return value


def _seed(params: dict[str, str]) -> int:
    text = _required(params, "seed")
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"seed: not an integer: {text[:40]!r}") from None


def _api(data: ViewData) -> dict[str, Callable[[dict[str, str]], Any]]:
    def units(params: dict[str, str]) -> Any:
        try:
            query = UnitQuery.parse(params)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        return data.units(_required(params, "run"), query)

    return {
        "/api/runs": lambda params: {"root": data.reader.root, "runs": data.runs()},
        "/api/units": units,
        "/api/unit": lambda params: data.unit(_required(params, "run"), _required(params, "id")),
        "/api/compare": lambda params: data.compare(
            _required(params, "run"),
            _required(params, "eval"),
            _seed(params),
            (_required(params, "a"), _required(params, "b")),
        ),
        "/api/leaderboard": lambda params: data.leaderboard(_required(params, "run")),
    }


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "rayeval-view"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        body = json_text(value).encode("ascii")
        self._send(status, body, "application/json; charset=utf-8")

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._json(status, {"error": message, "status": int(status)})

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        try:
            self._route(self._within(url.path), params)
        except NotFound as exc:
            self._error(HTTPStatus.NOT_FOUND, str(exc))
        except BadRequest as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
        except ReportError as exc:
            self._error(HTTPStatus.BAD_GATEWAY, f"cannot read the results: {exc}")
        except Exception:
            log.exception("rayeval view: %s failed", url.path)
            self._error(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                "internal error (see the server's log)",
            )

    def _within(self, path: str) -> str:
        """The path under the server's secret prefix (NotFound for any other, naming nothing)."""
        prefix = f"/{self.server.token}/"
        if not hmac.compare_digest(path[: len(prefix)].encode(), prefix.encode()):
            raise NotFound("no such page")
        return "/" + path[len(prefix) :]

    def _route(self, path: str, params: dict[str, str]) -> None:
        if path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, index_html(static=False), "text/html; charset=utf-8")
        elif path.startswith("/assets/") and path[len("/assets/") :] in ASSETS:
            name = path[len("/assets/") :]
            self._send(HTTPStatus.OK, asset_bytes(name), ASSETS[name])
        elif path == "/api/plot":
            svg = self.server.data.plot(_required(params, "run"), _required(params, "name"))
            self._send(HTTPStatus.OK, svg, "image/svg+xml")
        elif path in self.server.api:
            self._json(HTTPStatus.OK, self.server.api[path](params))
        else:
            raise NotFound(f"no such page or API: {path[:200]}")

    def do_POST(self) -> None:
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, "the viewer is read-only")

    do_PUT = do_DELETE = do_PATCH = do_POST


class ViewServer(ThreadingHTTPServer):
    """The viewer's HTTP server over one :class:`ViewData` (``port=0``: a free port)."""

    daemon_threads = True

    def __init__(self, data: ViewData, host: str = "127.0.0.1", port: int = 0):
        super().__init__((host, port), _Handler)
        self.data = data
        self.api = _api(data)
        #: the secret first segment of every path served (see the module doc)
        self.token = secrets.token_urlsafe(24)

    @property
    def url(self) -> str:
        """The page's address, with the server's secret path."""
        host, port = self.server_address[:2]
        # typeshed types server_address for every socket family; a TCP server's host is a str
        return f"http://{host}:{port}/{self.token}/"  # type: ignore[str-bytes-safe]

    def start(self) -> threading.Thread:
        """Serve in a background thread (stop with ``shutdown()`` then ``server_close()``)."""
        thread = threading.Thread(target=self.serve_forever, name="rayeval-view", daemon=True)
        thread.start()
        return thread


__all__ = ["SECURITY_HEADERS", "ViewServer"]
