"""Remote data nodes are checked before a run, from the driver: one request per distinct node,
against a real S3 server (moto on 127.0.0.1) and a loopback HTTP server; what is missing is
a problem of each eval file and field that names it."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pandas as pd
import pytest

from rayeval.cli import main
from rayeval.data.remote_data import SKIP_HINT, remote_data_problems
from rayeval.evals import load_evals
from tests.fixtures_s3 import S3Bucket

GRADER = {"type": "multiple_choice", "config": {"correct_answer": "B"}}


class _Files(http.server.BaseHTTPRequestHandler):
    """``/data.csv`` (HEAD and GET), ``/get-only.csv`` (HEAD refused with 405, as some servers
    and presigned URLs do), anything else 404; every request is counted by method and path."""

    seen: ClassVar[Counter] = Counter()
    lock: ClassVar[threading.Lock] = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, body: bool) -> None:
        with self.lock:
            self.seen[(self.command, self.path)] += 1
        if self.path == "/get-only.csv" and self.command == "HEAD":
            self.send_error(405)
            return
        if self.path not in ("/data.csv", "/get-only.csv"):
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        if body:
            self.wfile.write(b"a,b\n")

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)


@pytest.fixture
def http_base() -> Iterator[str]:
    _Files.seen = Counter()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _eval(folder: Path, eval_id: str, nodes: list[str] | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{eval_id}.json"
    path.write_text(json.dumps({"id": eval_id, "task": "A or B?", "data_node": nodes, "grader": GRADER}))
    return path


def test_each_remote_node_is_asked_for_once_and_what_is_missing_is_named(
    tmp_path: Path, s3_bucket: S3Bucket, http_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_bucket
    present = [
        bucket.put("inputs/counts.csv", "a,b\n"),
        bucket.uri("inputs/"),  # a prefix with objects: staged as a folder
        bucket.uri("inputs"),  # no such object, but objects under inputs/: a folder too
        f"{http_base}/data.csv",
        f"{http_base}/get-only.csv",
    ]
    missing = {
        bucket.uri("inputs/count.csv"): f"no such S3 key: {bucket.uri('inputs/count.csv')}",
        "s3://no-such-bucket-here/x.csv": "no such S3 bucket: no-such-bucket-here",
        bucket.uri("empty/"): f"no objects under S3 prefix {bucket.uri('empty/')}",
        f"{http_base}/gone.csv": f"HTTP 404 Not Found from {http_base}/gone.csv",
    }
    unreachable = f"http://127.0.0.1:{_closed_port()}/data.csv"
    evals = tmp_path / "evals"
    first = _eval(evals, "e1", present)
    second = _eval(evals, "e2", [present[0], *missing, unreachable])
    third = _eval(evals, "e3", next(iter(missing)))  # one node, named by two evals
    loaded = load_evals(evals)

    problems = remote_data_problems(loaded, s3_endpoint_url=bucket.endpoint_url)
    found = {(p.path, p.field): p.message for p in problems}
    s3_fix = (
        ": correct the URI, or the S3 endpoint (--s3-endpoint or AWS_ENDPOINT_URL) and credentials this machine "
        f"uses; {SKIP_HINT}"
    )
    expected = {
        (str(second), f"data_node[{index}]"): f"remote data node {node!r}: {reason}"
        + (s3_fix if node.startswith("s3://") else f": correct the URL; {SKIP_HINT}")
        for index, (node, reason) in enumerate(missing.items(), start=1)
    }
    expected[(str(third), "data_node")] = expected[(str(second), "data_node[1]")]
    assert {key: found[key] for key in expected} == expected
    assert found[(str(second), "data_node[5]")].startswith(f"remote data node {unreachable!r}: cannot reach ")
    assert len(found) == len(expected) + 1 and not any(path == str(first) for path, _ in found)
    # one HEAD per distinct node, a GET of one byte only where HEAD is refused
    assert _Files.seen == Counter(
        {("HEAD", "/data.csv"): 1, ("HEAD", "/get-only.csv"): 1, ("GET", "/get-only.csv"): 1, ("HEAD", "/gone.csv"): 1}
    )

    # the endpoint as staging reads it: AWS_ENDPOINT_URL when no --s3-endpoint is given
    monkeypatch.setenv("AWS_ENDPOINT_URL", bucket.endpoint_url)
    assert remote_data_problems(load_evals(first)) == []


@pytest.mark.slow  # a remote data node missing, through the CLI: ~18 s on a loaded machine
def test_validate_dry_run_and_run_stop_on_a_missing_remote_node_unless_told_not_to_check(
    tmp_path: Path, s3_bucket: S3Bucket, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the tests' agent module imports from here
    evals = tmp_path / "evals"
    path = _eval(evals, "e1", s3_bucket.uri("inputs/misspelled.csv"))
    out = tmp_path / "out"
    endpoint = ["--s3-endpoint", s3_bucket.endpoint_url]
    run = ["run", str(evals), "--agent", "tests.batch.agents:instant", "--isolation", "process", "--output", str(out)]
    # no retries: the unit that cannot stage its data would wait out their backoff (2 s, 4 s)
    run += ["--run-id", "r", "--no-progress", "--retries", "0", *endpoint]
    said = f"{path}: data_node: remote data node {s3_bucket.uri('inputs/misspelled.csv')!r}: no such S3 key"

    for command in (["validate", str(evals), *endpoint], [*run, "--dry-run"], run):
        assert main(command) == 2, command
        assert capsys.readouterr().err.startswith(said), command
    assert not out.exists()  # nothing written, not even the run's folder

    assert main(["validate", str(evals), "--no-check-data"]) == 0
    assert capsys.readouterr().out == "1 eval(s) valid\n"
    assert main([*run, "--no-check-data"]) == 1  # it ran: its one unit could not stage its data
    rows = pd.read_parquet(out / "run_id=r")
    assert list(rows["error_type"]) == ["StagingError"] and "misspelled.csv" in rows["error_message"].iloc[0]


def test_a_misspelled_local_data_file_stops_validate_dry_run_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newcomer's case: every check said yes and the run exited 0 with StagingError rows."""
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    evals = tmp_path / "evals"
    (evals / "data").mkdir(parents=True)
    (evals / "data" / "pbmc68k_reduced.h5ad").write_bytes(b"data")
    path = _eval(evals / "pbmc", "e1", "../data/pbmc68k_reduce.h5ad")
    out = tmp_path / "out"
    run = ["run", str(evals), "--agent", "tests.batch.agents:instant", "--isolation", "process", "--output", str(out)]
    said = (
        f"{path}: data_node: local data node '../data/pbmc68k_reduce.h5ad' ({evals / 'data' / 'pbmc68k_reduce.h5ad'}) "
        f"does not exist: correct the path; a relative path is relative to the eval file's folder, {evals / 'pbmc'}\n"
    )
    for command in (["validate", str(evals)], [*run, "--dry-run"], run):
        assert main(command) == 2, command
        assert capsys.readouterr().err.startswith(said), command
    assert not out.exists()
