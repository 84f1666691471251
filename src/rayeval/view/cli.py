"""``rayeval view``: serve the per-sample viewer on this machine, or write it as a folder."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..report.cli import _guarded, _split, add_command, add_results_options

if TYPE_CHECKING:
    from .data import ViewData

DEFAULT_PORT = 8765
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@_guarded
def cmd_view(args: argparse.Namespace) -> int:
    """browse results per unit in a local web page (or write it as a static folder)

    Runs, a units table with filters and sorting, each unit's task, answer, verdict, reasoning,
    metrics, trajectory, artifacts and error, two models side by side, and the leaderboard."""
    from ..report.reader import ReportError, ResultsReader
    from .data import ViewData

    reader = ResultsReader(args.root, args.s3_endpoint)
    runs = reader.resolve_runs(_split(args.run))
    data = ViewData(reader, runs)
    if not data.run_ids():
        raise ReportError(f"no runs under {args.root}")
    if args.static:
        from .static import check_out_dir, write_static

        check_out_dir(args.static, reader.root)  # before any reading
        try:
            out = write_static(
                data,
                args.static,
                progress=lambda text: print(f"rayeval view: {text}", file=sys.stderr),
            )
        except OSError as exc:  # a full disk, a folder it may not write: nothing was left behind
            raise ReportError(f"--static {args.static}: cannot write the view: {exc}; nothing was written") from None
        print(f"wrote {out / 'index.html'}")
        return 0
    return _serve(data, args.host, args.port)


def _serve(data: ViewData, host: str, port: int) -> int:
    from ..report.reader import ReportError
    from .server import ViewServer

    try:
        server = ViewServer(data, host, port)
    except OSError as exc:
        raise ReportError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    if host not in LOOPBACK:
        print(
            f"rayeval: warning: serving on {host}: anyone who reaches it can read these results (no login)",
            file=sys.stderr,
        )
    print(
        f"rayeval view: serving {data.reader.root} at {server.url} (Ctrl-C stops)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        return 130
    finally:
        server.server_close()
    return 0


def add_view_command(subparsers: argparse._SubParsersAction) -> None:
    """Register ``view`` on the main CLI's subparsers."""
    view = add_command(subparsers, "view", cmd_view)
    add_results_options(view)
    view.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    view.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0: any free port)",
    )
    view.add_argument(
        "--static",
        metavar="OUT_DIR",
        help="write a self-contained folder (index.html, assets, data) instead of serving",
    )


__all__ = ["add_view_command", "cmd_view"]
