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

from rayeval.sandbox import allowlist
from rayeval.sandbox.allowlist import (
    bwrap_mounts,
    code_content,
    file_system_view,
    inside,
    module_location,
    sys_path_code,
)
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


def _run(project: Path, *args: str, path: str = "", timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """This repository's ``rayeval`` run in ``project``, with ``path`` after it on ``PYTHONPATH``."""
    python_path = os.pathsep.join(filter(None, [str(REPO / "src"), str(REPO), path]))
    env = {**os.environ, "PYTHONPATH": python_path, "RAY_USAGE_STATS_ENABLED": "0"}
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
    bound = tmp_path / "bound"
    (bound / "evals").mkdir(parents=True)
    view = file_system_view(
        sys_path=[], modules=[], bound=[str(bound)], trusted=[str(bound / "evals"), str(tmp_path / "elsewhere")]
    )
    assert str(bound) in view.read_only and view.covered == (str(bound / "evals"),)
    arguments = bwrap_mounts(view, writable=str(tmp_path / "work"), read_only_extra=[])
    assert arguments.index(str(bound / "evals")) > arguments.index(str(bound))  # the cover lies over
    assert arguments[:2] == ["--tmpfs", "/"] and arguments[-4:] == ["--remount-ro", "/dev", "--remount-ro", "/"]
    assert "/home" not in view.read_only and "/" not in view.read_only and "/tmp" not in view.read_only


def _package(folder: Path, files: list[str]) -> Path:
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}" if name.endswith(".json") else "")
    return folder


def test_a_package_shows_its_code_only_however_deep(tmp_path: Path) -> None:
    """Evals, a held-out split, a prompt template in a package: none there, at any depth. Its
    modules, markers, caches, subpackages and namespace subpackages are; a folder of code only is
    shown as one path; a trusted folder is not looked into."""
    package = _package(
        tmp_path / "pkg",
        ["__init__.py", "agent.py", "stubs.pyi", "py.typed", "prompt.txt", "__pycache__/agent.cpython-311.pyc",
         "evals/one.json", "heldout/two.json", "tools/__init__.py", "tools/run.py", "tools/__pycache__/run.pyc",
         "deep/__init__.py", "deep/deeper/__init__.py", "deep/deeper/mod.py", "deep/deeper/answers.json",
         "ns/mod.py", "ns/table.csv", "test-data/x.py", "hidden/mod.py"],
    )  # fmt: skip
    _package(tmp_path / "other", ["__init__.py", "mod.py"])
    shown = code_content(str(tmp_path), hidden=[str(package / "hidden")])
    expected = ["__init__.py", "__pycache__", "agent.py", "deep/__init__.py", "deep/deeper/__init__.py",
                "deep/deeper/mod.py", "ns/mod.py", "py.typed", "stubs.pyi", "tools"]  # fmt: skip
    assert shown == [str(tmp_path / "other"), *(str(package / name) for name in expected)]


def test_a_module_s_package_is_shown_by_its_code_unless_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``module:function`` agent's package found by its import path (an editable install's
    finder may place it anywhere): of the user's own, the code; of an installed one, all."""
    own = _package(tmp_path / "code" / "f1ownpkg", ["__init__.py", "agent.py", "evals/one.json", "prompt.txt"])
    installed = _package(tmp_path / "site-packages" / "f1installedpkg", ["__init__.py", "data.json"])
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    assert module_location("f1ownpkg.agent") == [str(own / "__init__.py"), str(own / "agent.py")]
    assert module_location("f1installedpkg.mod") == [str(installed)]


def test_a_code_folder_is_looked_at_only_up_to_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Names are counted over a code folder's packages together: a huge tree costs no more."""
    monkeypatch.setattr(allowlist, "MAX_CODE_ENTRIES", 6)
    _package(tmp_path / "a", ["__init__.py", "one.py", "data.txt", "sub/__init__.py", "sub/x.py", "sub/y.py"])
    _package(tmp_path / "b", ["__init__.py"])
    with caplog.at_level("WARNING", logger=allowlist.__name__):
        shown = code_content(str(tmp_path))
    # a, b; then a's 4 names: __init__.py, data.txt, one.py, sub; then none of sub's
    assert shown == [str(tmp_path / "a" / "__init__.py"), str(tmp_path / "a" / "one.py")]
    assert "holds more than 6 names" in caplog.text


def test_a_code_folder_is_looked_at_only_so_deep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allowlist, "MAX_CODE_DEPTH", 2)
    package = _package(tmp_path / "pkg", ["__init__.py", "a/x.py", "a/b/y.py"])
    assert code_content(str(tmp_path)) == [str(package / "__init__.py"), str(package / "a" / "x.py")]


def test_a_view_shows_no_more_paths_of_code_than_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each path is a mount: a package split by its data files into many costs no more."""
    monkeypatch.setattr(allowlist, "MAX_CODE_PATHS", 3)
    package = _package(tmp_path / "pkg", ["__init__.py", "a.py", "b.py", "c.py", "data.txt"])
    with caplog.at_level("WARNING", logger=allowlist.__name__):
        view = file_system_view(sys_path=[str(tmp_path)], modules=[], bound=[], trusted=[])
    assert [path for path in view.read_only if inside(path, str(tmp_path))] == [
        str(package / name) for name in ("__init__.py", "a.py", "b.py")
    ]
    assert "takes 4 paths: only the first 3 are shown" in caplog.text


def test_evals_in_a_package_on_the_import_path_are_out_of_sight_by_any_path(tmp_path: Path) -> None:
    """The agent's package holds the evals the run loads and a held-out split, and a copy of it
    is on the import path too, as Ray's ``py_modules`` unpacks one: of either, its code only."""
    project = tmp_path / "project"
    package = project / "benchpkg"
    (package / "evals").mkdir(parents=True)
    (package / "heldout").mkdir()
    (package / "__init__.py").write_text("")
    (package / "agent.py").write_text("from tests.security.attack_agents import search_everything\n")
    (package / "evals" / "one.json").write_text(json.dumps({**_eval("one"), "id": "one"}))
    (package / "heldout" / "two.json").write_text(json.dumps({**_eval("two"), "id": "two"}))
    copy = tmp_path / "py_modules_files" / "_ray_pkg_0123"
    shutil.copytree(package, copy / "benchpkg")
    roots = json.dumps([str(copy / "benchpkg"), str(package)])
    command = ["run-one", str(package / "evals" / "one.json"), "--agent", "benchpkg.agent:search_everything",
               "--agent-arg", f"roots={roots}"]  # fmt: skip
    done = _run(project, *command, path=str(copy))
    assert done.returncode == 1, done.stderr  # answered -1: failed
    seen = json.loads(done.stdout)["metadata"]["attack"]
    assert seen["looked"] >= 4 and "where" not in seen, seen  # the two packages' modules, nothing else
    control = _run(project, *command, "--isolation", "process", path=str(copy))
    assert control.returncode == 0, control.stderr  # without the sandbox both copies are in reach
