"""The README's ``rayeval view`` commands run as written, on the viewer tests' results root
(``rayeval-results``) and, for the S3 one, on a copy of its crafted run in moto's S3."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rayeval.report import ResultsReader
from rayeval.storage import ResultStore
from tests.fixtures_s3 import S3Bucket

from .conftest import crafted_rows
from .test_api import api

REPO = Path(__file__).resolve().parents[2]
SECTION = (REPO / "README.md").read_text().split("## Viewing results", 1)[1].split("\n## ", 1)[0]
COMMANDS = [line.split("#")[0].strip() for line in re.findall(r"^rayeval view .*$", SECTION, re.MULTILINE)]


def test_the_section_shows_every_mode() -> None:
    assert len(COMMANDS) == 4
    assert any("--static" in c for c in COMMANDS) and any("--run latest" in c for c in COMMANDS)
    assert any(c.startswith("rayeval view s3://") for c in COMMANDS)


def _args(command: str, root: str, site: Path) -> list[str]:
    args = shlex.split(command)[2:]
    args = [
        root if a in ("rayeval-results", "s3://bucket/results") else str(site) if a == "rayeval-view" else a
        for a in args
    ]
    if "--port" in args:
        args[args.index("--port") + 1] = "0"
    return args


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rayeval.cli", "view", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("command", [c for c in COMMANDS if "s3://" not in c])
def test_readme_view_command(command: str, view_root: Path, tmp_path: Path) -> None:
    args = _args(command, str(view_root), tmp_path / "rayeval-view")
    if "--static" in args:
        done = _run(args)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "rayeval-view" / "index.html").is_file() and (
            tmp_path / "rayeval-view" / "data" / "runs.js"
        ).is_file()
        return
    if "--port" not in args:
        args += ["--port", "0"]  # the default port may be taken on a shared machine
    server = subprocess.Popen(
        [sys.executable, "-m", "rayeval.cli", "view", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        assert "serving" in line, line + server.stderr.read()
        runs = api(line.split(" at ")[1].split()[0], "runs")["runs"]
        assert len(runs) == (1 if "--run" in args else 3)
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_readme_view_command_on_s3(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    (command,) = [c for c in COMMANDS if "s3://" in c]
    root = s3_bucket.uri("results")
    store = ResultStore(root, s3_endpoint_url=s3_bucket.endpoint_url)
    store.write_rows("crafted", crafted_rows("h"))
    args = _args(command, root, tmp_path / "rayeval-view")
    args[args.index("--s3-endpoint") + 1] = s3_bucket.endpoint_url
    done = _run(args)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "rayeval-view" / "index.html").is_file()
    assert "count_cells" in (tmp_path / "rayeval-view" / "data" / "r0" / "index-0.js").read_text()
    assert ResultsReader(root, s3_bucket.endpoint_url).run_ids() == ["crafted"]  # nothing written into the root
    assert {o["Key"].split("/")[1] for o in s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name)["Contents"]} == {
        "run_id=crafted"
    }
