"""The sandbox shows agents an allow-list of the host, not the host minus a list of hidden
folders: copies of answer keys wherever people and programs leave them (backups, exports,
reports next to a project, an eval file reached through a link) are out of sight, and what an
agent needs (the Python environment, its own code, the files its options name) is there at its
own path, under /tmp included.

Each test runs ``rayeval run`` (or ``run-one``) as a user would, in a subprocess with its own
embedded Ray, from a project folder holding the agent's module.
"""

from __future__ import annotations

import html
import json
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from rayeval.sandbox.allowlist import bwrap_mounts, code_content, file_system_view, sys_path_code
from tests.security.attack_agents import MARKER

REPO = Path(__file__).resolve().parents[2]
KEY = 5821.75


def _eval(name: str) -> dict[str, Any]:
    return {
        "id": f"copied_{name}",
        "task": 'Find the value. <EVAL_ANSWER>{"value": <number>}</EVAL_ANSWER>',
        "canary": MARKER,
        "grader": {
            "type": "numeric_tolerance",
            "config": {"ground_truth": {"value": KEY}, "tolerances": {"value": {"type": "absolute", "value": 0.01}}},
        },
    }


@pytest.fixture
def copies(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A project (the agent's module, an HTML report and a backup of the evals beside it), the
    evals folder with one eval reached through a link from a folder elsewhere, and copies of an
    eval file in the home folder, /var/tmp and /srv."""
    token = secrets.token_hex(4)
    elsewhere = [
        Path.home() / f".rayeval-copies-{token}",
        Path("/var/tmp") / f"rayeval-copies-{token}",
        Path("/srv") / f"rayeval-copies-{token}",
    ]
    project = tmp_path / "project"
    (project / "evals-backup").mkdir(parents=True)
    (project / "project_agent.py").write_text("from tests.security.attack_agents import search_everything\n")
    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "plain.json").write_text(json.dumps(_eval("plain")))
    (project / "evals-backup" / "plain.json").write_text(json.dumps(_eval("plain")))
    report = f"<html><body><pre>{html.escape(json.dumps(_eval('plain')))}</pre></body></html>"
    (project / "rayeval-report.html").write_text(report)
    try:
        for folder in elsewhere:
            folder.mkdir(parents=True)
            (folder / "backup.json").write_text(json.dumps(_eval("backup")))
        (elsewhere[1] / "linked.json").write_text(json.dumps(_eval("linked")))
        (evals / "linked.json").symlink_to(elsewhere[1] / "linked.json")  # reaches the evals from elsewhere
        yield {"project": project, "evals": evals, "places": [str(p) for p in [*elsewhere, project / "evals-backup"]]}
    finally:
        for folder in elsewhere:
            shutil.rmtree(folder, ignore_errors=True)


def _run(project: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "rayeval.cli", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def _rows(out: Path) -> list[dict[str, Any]]:
    return ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist()


@pytest.mark.slow
@pytest.mark.parametrize("where", ["where_the_copies_are", "everywhere"])
def test_copies_of_answer_keys_anywhere_on_the_host_are_out_of_sight(
    copies: dict[str, Any], tmp_path: Path, where: str
) -> None:
    """The agent reads every file under the folders holding the copies (and the project), or,
    in the slow run, every file of the host it can see (minutes of reading)."""
    project = copies["project"]
    options = ["--agent", "project_agent:search_everything", "--agent-arg", f"places={json.dumps(copies['places'])}"]
    if where == "where_the_copies_are":
        options += ["--agent-arg", f"roots={json.dumps([*copies['places'], str(project)])}"]
    done = _run(project, "run", str(copies["evals"]), *options, "--output", str(tmp_path / "s"), "--no-progress")
    assert done.returncode == 0, done.stderr
    rows = _rows(tmp_path / "s")
    assert len(rows) == 2
    for row in rows:
        seen = json.loads(row["metadata_json"])["attack"]
        assert row["status"] == "failed" and seen["seen"] == [], seen
        assert seen["looked"] > 1000 if where == "everywhere" else seen["looked"] >= 1, seen  # its own module
    control = _run(
        project, "run", str(copies["evals"]), *options, "--isolation", "process", "--output", str(tmp_path / "p"),
        "--no-progress",
    )  # fmt: skip
    assert control.returncode == 0, control.stderr
    assert all(row["passed"] for row in _rows(tmp_path / "p"))  # without the sandbox the copies are in reach


HONEST = """
import json, os, subprocess, sys
from pathlib import Path

import helper_module  # beside this module: the project's own code


def solve(task_prompt, work_dir, context):
    notes = Path(context.args["notes"]).read_text()
    python = subprocess.run(["python", "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True)
    return {"answer": {"value": -1.0}, "metadata": {
        "executable": sys.executable, "helper": helper_module.VALUE, "notes": notes,
        "python_on_path": python.stdout.strip(), "python_error": python.stderr[-300:],
        "report_seen": os.path.exists(os.path.join(os.path.dirname(__file__), "report.html")),
    }}
"""


def _venv_over_this_environment(venv: Path) -> None:
    """A virtual environment at ``venv`` that sees the packages of the one running the tests
    (rayeval, Ray...), however that one was made: a venv's ``--system-site-packages`` would
    show the base interpreter's instead, which has no rayeval when the tests run in a venv."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    here = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    lines = "".join(f"import site; site.addsitedir({folder!r})\n" for folder in here)
    (venv / "lib" / version / "site-packages" / "tested_environment.pth").write_text(lines)


def test_a_project_and_its_environment_under_tmp_are_there_for_its_agent(tmp_path: Path) -> None:
    """A clone under /tmp (each unit's /tmp is its own) with a virtual environment inside it:
    the agent runs on that environment's python, imports its project's modules, reads the
    file bound for it, and finds ``python`` on its PATH; the project's other files are not
    there."""
    assert str(tmp_path).startswith("/tmp/")
    project = tmp_path / "clone"
    project.mkdir()
    venv = project / ".venv"
    _venv_over_this_environment(venv)
    (project / "honest_agent.py").write_text(HONEST)
    (project / "helper_module.py").write_text("VALUE = 42\n")
    (project / "report.html").write_text("<html>a report</html>")
    (project / "notes.txt").write_text("the agent's own notes")
    eval_file = project / "evals" / "one.json"
    eval_file.parent.mkdir()
    eval_file.write_text(json.dumps({**_eval("one"), "id": "one"}))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "rayeval.cli", "run-one", str(eval_file), "--agent", "honest_agent:solve",
         "--agent-arg", f"notes={project / 'notes.txt'}", "--sandbox-bind", str(project / "notes.txt")],
        cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # answered -1: failed, not an error
    result = json.loads(done.stdout)
    metadata = result["metadata"]
    assert metadata["executable"] == str(venv / "bin" / "python"), metadata
    assert metadata["helper"] == 42 and metadata["notes"] == "the agent's own notes"
    assert metadata["python_on_path"] == str(venv), metadata
    assert metadata["report_seen"] is False


def test_a_missing_sandbox_bind_is_refused_before_any_unit(tmp_path: Path) -> None:
    eval_file = tmp_path / "one.json"
    eval_file.write_text(json.dumps({**_eval("one"), "id": "one"}))
    done = _run(tmp_path, "run-one", str(eval_file), "--agent", "sleep", "--sandbox-bind", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "--sandbox-bind: no such file or folder" in done.stderr, done.stderr


# ----------------------------------------------------------------------------- the view itself


def test_a_code_folder_shows_its_code_only(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("")
    (tmp_path / "native.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg.dist-info").mkdir()
    (tmp_path / "__pycache__").mkdir()
    for other in ("data", "evals", "results"):
        (tmp_path / other).mkdir()
    for other in ("report.html", "eval.json", "notes.txt", "rows.parquet"):
        (tmp_path / other).write_text("")
    shown = {Path(path).name for path in code_content(str(tmp_path))}
    assert shown == {"agent.py", "native.cpython-311-x86_64-linux-gnu.so", "pkg", "pkg.dist-info", "__pycache__"}


def test_library_folders_are_shown_whole_and_code_folders_by_their_code(tmp_path: Path) -> None:
    library = tmp_path / "lib" / "site-packages"
    library.mkdir(parents=True)
    (library / "data.json").write_text("{}")
    code = tmp_path / "code"
    code.mkdir()
    (code / "mod.py").write_text("")
    (code / "secret.json").write_text("{}")
    inside_shown = tmp_path / "shown" / "lib"
    inside_shown.mkdir(parents=True)
    found = sys_path_code(
        [str(library), str(code), str(inside_shown), str(tmp_path / "missing")], [str(tmp_path / "shown")]
    )
    assert found == [str(library), str(code / "mod.py")]


def test_trusted_folders_inside_what_is_shown_are_covered_and_mounted_over_it(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "evals").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    view = file_system_view(
        sys_path=[str(tmp_path)], modules=[], bound=[], trusted=[str(package / "evals"), str(tmp_path / "elsewhere")]
    )
    assert str(package) in view.read_only and view.covered == (str(package / "evals"),)
    arguments = bwrap_mounts(view, writable=str(tmp_path / "work"), read_only_extra=[])
    assert arguments.index(str(package / "evals")) > arguments.index(str(package))  # the cover lies over
    assert arguments[:2] == ["--tmpfs", "/"] and arguments[-4:] == ["--remount-ro", "/dev", "--remount-ro", "/"]
    assert "/home" not in view.read_only and "/" not in view.read_only and "/tmp" not in view.read_only
