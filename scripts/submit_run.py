#!/usr/bin/env python
"""Submit a ``rayeval run`` to a Ray cluster as a Ray job, follow its logs, exit with its status.

    python scripts/submit_run.py --address http://127.0.0.1:8265 --working-dir . -- \\
        rayeval run evals --agent reference --models m1,m2 --seeds 3 --output s3://bucket/results

Everything after ``--`` is the job's command. It may start with ``rayeval run`` (as above) or be
only the arguments of ``rayeval run`` (``-- evals --agent reference --output ...``), in which
case ``rayeval run`` is prepended. This is what ``ray job submit --address URL --working-dir DIR
-- rayeval run ...`` does, through the Python ``JobSubmissionClient`` so that the exit status is
exact:

* 0 when the job SUCCEEDED;
* the driver's exit code when the job FAILED and Ray reports one (``rayeval run`` exits 2 on bad
  input), else 1;
* 1 when the job was STOPPED; 3 when the job could not be submitted (cluster unreachable,
  auth refused); 124 when ``--timeout`` expired (the job is stopped); 130 on Ctrl-C (the job is
  stopped unless ``--detach-on-interrupt``).

The working directory is uploaded to the cluster (Ray honours ``.gitignore``/``.rayignore``;
``--exclude`` adds patterns) and becomes the job's current directory, so relative eval paths
work. Nothing secret is put in the job's runtime environment: API keys reach the agents through
the cluster nodes' own environment (see ``cluster/README.md``).

The client honours ``RAY_AUTH_MODE`` / the Ray token like ``ray job submit`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
EXIT_STOPPED, EXIT_UNREACHABLE, EXIT_TIMEOUT, EXIT_INTERRUPTED = 1, 3, 124, 130
POLL_S = 1.0


def default_address() -> str:
    for name in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        value = os.environ.get(name, "")
        if value.startswith(("http://", "https://")):
            return value
    return DEFAULT_ADDRESS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="submit_run.py",
        description="Submit `rayeval run ...` as a Ray job, follow its logs, exit with its status.",
        usage="%(prog)s [options] -- [rayeval run] EVALS... --agent NAME --output ROOT [...]",
    )
    parser.add_argument(
        "--address",
        default=None,
        help=f"Ray dashboard URL (default: $RAY_API_SERVER_ADDRESS, an http $RAY_ADDRESS, or {DEFAULT_ADDRESS})",
    )
    parser.add_argument(
        "--working-dir", default=".", help="local folder uploaded as the job's working directory (default: .)"
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="extra runtime_env excludes pattern (repeatable)",
    )
    parser.add_argument("--submission-id", help="job submission id (default: chosen by Ray)")
    parser.add_argument("--entrypoint-num-cpus", type=float, help="CPUs reserved for the driver process")
    parser.add_argument("--timeout", type=float, help="seconds: stop the job and exit 124 when it runs longer")
    parser.add_argument(
        "--detach-on-interrupt", action="store_true", help="on Ctrl-C leave the job running instead of stopping it"
    )
    parser.add_argument("--quiet", action="store_true", help="do not print the job's logs")
    return parser


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    argv = list(argv)
    if "--" not in argv:
        return argv, None
    index = argv.index("--")
    return argv[:index], argv[index + 1 :]


def entrypoint_from(command: list[str]) -> str:
    if not command:
        raise SystemExit("submit_run.py: nothing after `--`: give the rayeval run arguments")
    if command[:2] != ["rayeval", "run"]:
        if command[0] in ("rayeval", "run"):
            raise SystemExit(
                f"submit_run.py: expected `rayeval run ...` or only its arguments after `--`, got {shlex.join(command[:2])!r}"
            )
        command = ["rayeval", "run", *command]
    return shlex.join(command)


def _print(text: str, *, quiet: bool) -> None:
    if not quiet and text:
        sys.stdout.write(text)
        sys.stdout.flush()


async def _tail(client, job_id: str, quiet: bool, shown: list[int]) -> None:
    async for lines in client.tail_job_logs(job_id):
        _print(lines, quiet=quiet)
        shown[0] += len(lines)


def follow(client, job_id: str, *, quiet: bool, deadline: float | None):
    """Stream the job's logs until it ends; return its final JobInfo (None when the deadline passed)."""
    from ray.job_submission import JobStatus

    terminal = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    shown = [0]
    polling = False
    try:
        stream = _tail(client, job_id, quiet, shown)
        if deadline is not None:
            stream = asyncio.wait_for(stream, timeout=max(0.0, deadline - time.monotonic()))
        asyncio.run(stream)
    except asyncio.TimeoutError:
        return None
    except Exception as exc:  # noqa: BLE001  (websocket refused or cut: poll the whole log instead)
        print(f"submit_run.py: log streaming failed ({exc!r}); polling instead", file=sys.stderr)
        polling = True
    while True:
        info = client.get_job_info(job_id)
        if polling:
            logs = client.get_job_logs(job_id)
            _print(logs[shown[0] :], quiet=quiet)
            shown[0] = max(shown[0], len(logs))
        if info.status in terminal:
            return info
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(POLL_S)


def exit_code_for(info) -> int:
    from ray.job_submission import JobStatus

    if info.status == JobStatus.SUCCEEDED:
        return 0
    if info.status == JobStatus.FAILED:
        code = getattr(info, "driver_exit_code", None)
        return code if isinstance(code, int) and 0 < code < 256 else 1
    return EXIT_STOPPED


def main(argv: Sequence[str] | None = None) -> int:
    own, command = split_argv(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(own)
    if command is None:
        parser.error("the rayeval run arguments go after `--`")
    entrypoint = entrypoint_from(command)
    working_dir = Path(args.working_dir).expanduser().resolve()
    if not working_dir.is_dir():
        raise SystemExit(f"submit_run.py: --working-dir {working_dir} is not a folder")
    address = args.address or default_address()

    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    runtime_env: dict = {"working_dir": str(working_dir)}
    if args.exclude:
        runtime_env["excludes"] = list(args.exclude)
    options = {}
    if args.entrypoint_num_cpus is not None:
        options["entrypoint_num_cpus"] = args.entrypoint_num_cpus
    try:
        client = JobSubmissionClient(address)
        job_id = client.submit_job(
            entrypoint=entrypoint, runtime_env=runtime_env, submission_id=args.submission_id, **options
        )
    except (AuthenticationError, ConnectionError, RuntimeError, ValueError) as exc:
        print(f"submit_run.py: cannot submit to {address}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print(f"submit_run.py: submitted job {job_id} to {address}: {entrypoint}", file=sys.stderr, flush=True)

    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    try:
        info = follow(client, job_id, quiet=args.quiet, deadline=deadline)
    except KeyboardInterrupt:
        if args.detach_on_interrupt:
            print(f"\nsubmit_run.py: detached; job {job_id} keeps running (ray job stop {job_id})", file=sys.stderr)
        else:
            print(f"\nsubmit_run.py: stopping job {job_id}", file=sys.stderr)
            client.stop_job(job_id)
        return EXIT_INTERRUPTED
    if info is None:
        print(f"submit_run.py: job {job_id} still running after {args.timeout} s: stopping it", file=sys.stderr)
        client.stop_job(job_id)
        return EXIT_TIMEOUT
    code = exit_code_for(info)
    first_line = (info.message or "").strip().splitlines()[:1]
    detail = f" ({first_line[0]})" if first_line and code else ""
    print(f"submit_run.py: job {job_id} {info.status.value}{detail}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
