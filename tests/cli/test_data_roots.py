"""The data_node policy as a user meets it: `rayeval validate`, `run` and `run-one` refuse
local data outside the data roots with `file: field: message`, exit 2, before any work starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "evals/pbmc/pbmc_bulk_label_composition.json"  # its data is in evals/data
GRADER = {"type": "multiple_choice", "config": {"correct_answer": "B"}}
# eval file name -> a data node it must not be able to hand the agent
REFUSED = {
    "shadow.json": "/etc/shadow",
    "environ.json": "/proc/self/environ",
    "passwd.json": "file:///etc/passwd",
    "up.json": "../../..",
    "link.json": "link.csv",
    "dev.json": "/dev/null",
}
# eval file name -> (a folder node holding what it must not hand the agent, the problem named)
REFUSED_FOLDERS = {
    "folder.json": ("inputs", "holds leak.txt, which resolves to "),  # a link out, in the folder
    "keys/keys.json": (".", "holds keys.json, which resolves to "),  # its own eval file: the answer key
}
# an agent answering with the names of the files staged for it
LISTING_AGENT = (
    "def agent(task_prompt, work_dir):\n    return {'staged': sorted(p.name for p in (work_dir / 'data').iterdir())}\n"
)


def rayeval(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rayeval.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def write_eval(path: Path, data_node: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"id": path.stem, "task": "A or B?", "data_node": data_node, "grader": GRADER}))


def hostile_evals(root: Path) -> Path:
    """``root/evals`` with one eval per refused node (``link.csv`` links to ``root/secret.txt``)
    and one listing an allowed node, then a refused one."""
    evals = root / "evals"
    (root / "secret.txt").write_text("host secret")
    for name, node in REFUSED.items():
        write_eval(evals / name, node)
    (evals / "link.csv").symlink_to(root / "secret.txt")
    for name, (node, _) in REFUSED_FOLDERS.items():
        write_eval(evals / name, node)
    (evals / "inputs").mkdir()
    (evals / "inputs" / "leak.txt").symlink_to(root / "secret.txt")
    (evals / "ok.csv").write_text("a,b\n")
    write_eval(evals / "list.json", ["ok.csv", "/etc/shadow"])
    return evals


def assert_every_node_refused(stderr: str, evals: Path) -> None:
    lines = stderr.splitlines()
    for name, node in REFUSED.items():
        assert any(
            line.startswith(f"{evals / name}: data_node: local data node {node!r} resolves to ") for line in lines
        ), (name, stderr)
    for name, (node, problem) in REFUSED_FOLDERS.items():
        assert any(
            line.startswith(f"{evals / name}: data_node: local data node {node!r} {problem}") for line in lines
        ), (
            name,
            stderr,
        )
    assert any(
        line.startswith(f"{evals / 'list.json'}: data_node[1]: local data node '/etc/shadow' ") for line in lines
    ), stderr
    assert "Traceback" not in stderr


def test_validate_names_the_file_and_field_of_every_refused_node(tmp_path: Path) -> None:
    evals = hostile_evals(tmp_path)
    done = rayeval("validate", str(evals))
    assert done.returncode == 2, done.stderr
    assert_every_node_refused(done.stderr, evals)
    assert f"{len(REFUSED) + len(REFUSED_FOLDERS) + 1} problem(s) found; 0 eval(s) valid" in done.stderr
    assert "an eval file: its answer key would reach the agent" in done.stderr
    assert (
        f"{evals / 'link.json'}: data_node: local data node 'link.csv' resolves to {tmp_path / 'secret.txt'}, outside"
        in done.stderr
    )


def test_run_refuses_before_any_unit_runs(tmp_path: Path) -> None:
    evals = hostile_evals(tmp_path)
    done = rayeval("run", str(evals), "--agent", "reference", "--output", str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 2, done.stderr
    assert_every_node_refused(done.stderr, evals)
    assert not (tmp_path / "out").exists()  # no run was made: no unit ran, no row was stored


def test_validate_accepts_a_data_root_outside_the_evals_folder(tmp_path: Path) -> None:
    write_eval(tmp_path / "evals" / "e.json", "../shared/ref.csv")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "ref.csv").write_text("ref")
    refused = rayeval("validate", str(tmp_path / "evals"))
    assert refused.returncode == 2 and "pass --data-root DIR" in refused.stderr
    done = rayeval("validate", str(tmp_path / "evals"), "--data-root", str(tmp_path / "shared"))
    assert done.returncode == 0 and "1 eval(s) valid" in done.stdout, done.stderr


def test_example_eval_given_directly_needs_its_data_root() -> None:
    assert rayeval("validate", "evals").returncode == 0  # the evals root holds evals/data
    done = rayeval("validate", EXAMPLE)
    assert done.returncode == 2 and done.stderr.startswith(
        f"{EXAMPLE}: data_node: local data node '../data/pbmc68k_reduced.h5ad' "
    )
    assert rayeval("validate", EXAMPLE, "--data-root", "evals").returncode == 0


def test_run_one_refuses_before_the_agent_runs_and_runs_with_data_root(tmp_path: Path) -> None:
    (tmp_path / "listing.py").write_text(LISTING_AGENT)
    args = ("--agent", "listing:agent", "--work-root", str(tmp_path / "w"))
    done = rayeval("run-one", str(REPO / EXAMPLE), *args, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stdout  # no result: the agent never ran
    assert ": data_node: " in done.stderr and "--data-root" in done.stderr and "Traceback" not in done.stderr
    done = rayeval("run-one", str(REPO / EXAMPLE), *args, "--data-root", str(REPO / "evals"), cwd=tmp_path)
    result = json.loads(done.stdout)
    assert result["status"] == "failed" and result["agent_answer"] == {"staged": ["pbmc68k_reduced.h5ad"]}, done.stdout


def test_run_stages_from_a_data_root_on_the_workers(tmp_path: Path) -> None:
    """The roots travel with the evals to the Ray workers, whose staging checks them again."""
    out = tmp_path / "out"
    args = ("--agent", "reference", "--output", str(out), "--no-progress", "--data-root", "evals")
    done = rayeval("run", EXAMPLE, *args, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = [line.split() for line in done.stdout.splitlines() if line.startswith("default ")]
    assert row[1:6] == ["reference", "1", "1", "0", "0"], done.stdout  # harness, units, passed, failed, errors
