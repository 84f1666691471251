"""``rayeval run`` on a real two-node Ray cluster: job submission, and surviving dead workers/nodes.

Every run is a real ``rayeval run`` subprocess (or a ``scripts/submit_run.py`` subprocess that
submits one as a Ray job) against the ``ray_cluster`` fixture. Each subprocess has a timeout;
the module takes about a minute and a half on a 2-core machine. The node-killing test leaves the
cluster without its second node; the last test starts it again mid-run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from rayeval.batch.plan import plan_units
from rayeval.evals import load_evals
from tests.batch.conftest import write_mc_evals

from .conftest import NODE_CPUS, RAY, REPO, RayNode, RayTestCluster, kill_pids, wait_until

pytestmark = pytest.mark.cluster

EVALS = REPO / "evals"
SUBMIT = REPO / "scripts" / "submit_run.py"
JOB_TIMEOUT_S = 150
RUN_TIMEOUT_S = 120
SLEEP_SEEDS = 4  # 10 evals x seeds 1..4 = 40 units of 1 s at concurrency 4: ~10 s of work


def planned_unit_ids(agent: str, seeds: int, models: tuple[str, ...] = ("default",)) -> set[str]:
    units = plan_units(load_evals(str(EVALS)), list(models), list(range(1, seeds + 1)), agent)
    return {unit.unit_id for unit in units}


def read_rows(root: Path, run_id: str) -> pd.DataFrame:
    return pd.read_parquet(root / f"run_id={run_id}")


def _outputs(done: subprocess.CompletedProcess | subprocess.Popen, out: str = "", err: str = "") -> str:
    return f"exit {done.returncode}\n--- stdout ---\n{out[-6000:]}\n--- stderr ---\n{err[-6000:]}"


def start_sleep_run(
    cluster: RayTestCluster, tmp_path: Path, run_id: str, *, seeds: int = SLEEP_SEEDS, unit_cpus: float | None = None
) -> tuple[subprocess.Popen, Path]:
    """A ``rayeval run`` of the sleep agent (units of 1 s, 4 at a time) against the cluster, in
    the background, on two workers; ``unit_cpus``: units of that many CPUs instead (and as many
    workers as Ray's resources call for)."""
    output = tmp_path / "results"
    command = [
        "rayeval", "run", str(EVALS),
        "--agent", "sleep", "--agent-arg", "seconds=1",
        "--seeds", str(seeds),
        "--max-concurrency", "4",
        *(["--unit-cpus", str(unit_cpus)] if unit_cpus else ["--workers", "2"]),
        "--address", cluster.gcs_address,
        "--output", str(output), "--run-id", run_id, "--no-progress",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return process, output


def finish(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_pids([process.pid])
        out, err = process.communicate(timeout=10)
        pytest.fail(f"rayeval run did not finish within {timeout} s\n{_outputs(process, out, err)}")


def assert_every_unit_once(output: Path, run_id: str, expected: set[str]) -> pd.DataFrame:
    rows = read_rows(output, run_id)
    counts = rows["unit_id"].value_counts()
    assert set(rows["unit_id"]) == expected, (
        f"missing {len(expected - set(rows['unit_id']))}, unexpected {len(set(rows['unit_id']) - expected)}"
    )
    assert (counts == 1).all(), f"units stored more than once: {counts[counts > 1].to_dict()}"
    # a unit Ray could not run at all would be stored as an engine error row
    lost = rows[rows["error_message"].fillna("").str.startswith("Ray could not run the unit")]
    assert lost.empty, lost[["eval_id", "seed", "error_type", "error_message"]].to_string()
    return rows


def finish_sleep_run(process: subprocess.Popen, output: Path, run_id: str, seeds: int) -> None:
    """Wait for a ``start_sleep_run``: it must succeed with every planned unit stored once."""
    out, err = finish(process, RUN_TIMEOUT_S)
    assert process.returncode == 0, _outputs(process, out, err)
    rows = assert_every_unit_once(output, run_id, planned_unit_ids("sleep", seeds))
    assert len(rows) == 10 * seeds


# ------------------------------------------------------------------------------ before a run


def test_dry_run_on_the_cluster_says_what_its_nodes_hold_and_what_it_cannot_check(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    """--dry-run joins the cluster for a moment to read its nodes (both, NODE_CPUS each): units
    of half a CPU run 8 at once whatever --max-concurrency says, an autoscaler may add more; a
    rubric judge's key is read on the nodes, which the driver cannot check."""
    evals = tmp_path / "evals"
    evals.mkdir()
    rubric = {"type": "rubric", "config": {"answer_field": "why", "criteria": [{"description": "x", "score_delta": 1}]}}
    (evals / "judged.json").write_text(json.dumps({"id": "judged", "task": "Why?", "grader": rubric}))
    command = ["rayeval", "run", str(evals), "--agent", "sleep", "--unit-cpus", "0.5", "--max-concurrency", "250",
               "--seeds", "300", "--address", ray_cluster.gcs_address, "--output", str(tmp_path / "out"), "--dry-run"]  # fmt: skip
    env = {k: v for k, v in ray_cluster.env.items() if k != "ANTHROPIC_API_KEY"}
    done = subprocess.run(
        command, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, _outputs(done, done.stdout, done.stderr)
    cpus = 2 * NODE_CPUS
    assert (
        f"units at once: {2 * cpus}, not the 250 of --max-concurrency: each unit asks for CPU 0.5 and the cluster's "
        f"nodes now have CPU {cpus} in all (--unit-cpus changes what a unit asks for); a cluster's autoscaler, where "
        "it has one, may add nodes for more\n"
    ) in done.stdout, done.stdout
    assert (
        "judges anthropic/claude-sonnet-5: names checked; their keys are read on the cluster's nodes, not checked here"
        in done.stdout
    )
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ job submission


def test_submit_run_as_ray_job(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    """scripts/submit_run.py → `ray job submit --working-dir <repo> -- rayeval run evals ...`."""
    output = tmp_path / "results"
    command = [
        sys.executable, str(SUBMIT), "--address", ray_cluster.dashboard_url, "--working-dir", str(REPO),
        "--", "rayeval", "run", "evals", "--agent", "reference",
        "--output", str(output), "--run-id", "job1", "--no-progress",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        command, check=False, cwd=tmp_path, env=ray_cluster.env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S
    )
    assert done.returncode == 0, _outputs(done, done.stdout, done.stderr)
    assert "SUCCEEDED" in done.stderr

    expected = planned_unit_ids("reference", 1)
    assert len(expected) == 10  # the example evals
    rows = assert_every_unit_once(output, "job1", expected)
    assert len(rows) == 10
    assert rows["passed"].all(), rows.loc[
        ~rows["passed"], ["eval_id", "status", "reasoning", "error_message"]
    ].to_string()
    assert (output / "run_id=job1" / "_manifest.json").is_file()
    print(f"job run: {time.monotonic() - started:.1f} s")


def test_the_readmes_ray_job_submit_runs_as_written(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    """The README's two lines, run from the repository as written: the cluster's address and
    token, and a local results root for the S3 one, are the only substitutions. Without the
    token, the same submission is refused."""
    block = next(
        b
        for b in re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
        if "ray job submit" in b
    )
    lines = re.sub(r"\\\n\s*", " ", block).splitlines()
    export = next(line for line in lines if line.startswith("export RAY_AUTH_MODE=token"))
    submit = next(line for line in lines if line.startswith("ray job submit"))
    output = tmp_path / "results"
    script = "\n".join([
        export.replace("<the cluster's token>", ray_cluster.env["RAY_AUTH_TOKEN"]),
        submit.replace("http://127.0.0.1:8265", ray_cluster.dashboard_url).replace("s3://bucket/results", str(output)),
    ])  # fmt: skip
    env = {k: v for k, v in ray_cluster.env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    done = subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, _outputs(done, done.stdout, done.stderr)
    (run_id,) = [p.name.removeprefix("run_id=") for p in output.iterdir()]
    assert len(assert_every_unit_once(output, run_id, planned_unit_ids("reference", 1))) == 10

    wrong = script.replace(ray_cluster.env["RAY_AUTH_TOKEN"], "not-the-token")
    refused = subprocess.run(
        ["bash", "-c", wrong], cwd=REPO, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, check=False
    )
    assert refused.returncode != 0 and len(list(output.iterdir())) == 1  # no second run


def test_submit_run_exit_status_follows_the_job(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    """A failing job makes the helper fail too, with the driver's exit code (rayeval: 2 = bad input)."""
    command = [
        sys.executable, str(SUBMIT), "--address", ray_cluster.dashboard_url, "--working-dir", str(REPO),
        "--", "evals/no_such_folder", "--agent", "reference", "--output", str(tmp_path / "results"), "--no-progress",
    ]  # fmt: skip
    done = subprocess.run(
        command, check=False, cwd=tmp_path, env=ray_cluster.env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S
    )
    assert done.returncode == 2, _outputs(done, done.stdout, done.stderr)
    assert "FAILED" in done.stderr
    assert "no_such_folder" in done.stdout  # the job's own log was followed


USER_AGENT = """
import os, sys


def solve(task_prompt, work_dir):
    here = os.path.dirname(__file__)
    looked = ("evals", "results", "notes.txt", os.path.join(here, "notes.txt"), os.path.join(here, "evals"))
    return {"answer": {"answer": "B"}, "metadata": {"where": {
        "module": __file__, "executable": sys.executable, "seen": [p for p in looked if os.path.exists(p)],
        "processes": len([p for p in os.listdir("/proc") if p.isdigit()]),
    }}}
"""


def build_wheel(folder: Path, name: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel of ``files``, written as the format says (no build tool needed)."""
    info = f"{name}-0.1.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: rayeval-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return wheel


def _submit(cluster: RayTestCluster, cwd: Path, *options: str, command: list[str]) -> subprocess.CompletedProcess:
    """``ray job submit`` as a user types it (the cluster's token in the environment)."""
    return subprocess.run(
        [RAY, "job", "submit", "--address", cluster.dashboard_url, *options, "--", *command],
        check=False, cwd=cwd, env=cluster.env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
    )  # fmt: skip


def _user_agent_rows(output: Path) -> pd.DataFrame:
    rows = pd.read_parquet(output)
    assert len(rows) == 6 and (rows["isolation"] == "sandbox").all()
    assert rows["passed"].all(), rows[["eval_id", "status", "error_type", "error_message"]].to_string()
    # the cluster's two nodes share this host: a row names its Ray node by id, the host beside it
    assert set(rows["host"]) == {socket.gethostname()} and rows["node"].str.fullmatch("[0-9a-f]{56}").all()
    return rows


def _where(row: pd.Series) -> dict:
    return json.loads(row["metadata_json"])["where"]


@pytest.fixture
def job_project(tmp_path: Path) -> Path:
    """A user's folder: evals, a note beside them, and (per test) the agent's code."""
    project = tmp_path / "project"
    write_mc_evals(project / "evals", ["e1", "e2", "e3"])
    (project / "notes.txt").write_text("not the agent's")
    return project


def test_a_job_runs_the_agent_in_its_working_dir_sandboxed(
    ray_cluster: RayTestCluster, job_project: Path, tmp_path: Path
) -> None:
    """``ray job submit --working-dir DIR -- rayeval run evals --agent myagent:solve``, with
    ``myagent.py`` beside ``evals/`` in DIR: Ray unpacks DIR under its own session folder, which
    the sandbox does not show; the module is shown, read-only, and nothing else of DIR."""
    (job_project / "myagent.py").write_text(USER_AGENT)
    output = tmp_path / "results"
    command = [
        "rayeval",
        "run",
        "evals",
        "--agent",
        "myagent:solve",
        "--seeds",
        "2",
        "--output",
        str(output),
        "--no-progress",
    ]
    done = _submit(ray_cluster, job_project, "--working-dir", ".", command=command)
    assert done.returncode == 0, _outputs(done, done.stdout, done.stderr)
    for _, row in _user_agent_rows(output).iterrows():
        where = _where(row)
        assert "/runtime_resources/working_dir_files/" in where["module"] and where["seen"] == [], where
        assert where["processes"] <= 3, where


def test_a_job_runs_the_agent_of_its_py_modules_sandboxed(
    ray_cluster: RayTestCluster, job_project: Path, tmp_path: Path
) -> None:
    """``py_modules: ["jobagent"]`` beside ``--working-dir .``, the run's evals in the package:
    Ray unpacks a second copy of it onto the workers' import path, not the one the run loads
    its evals from. Of that copy, as of any package, the unit sees the code only."""
    package = job_project / "jobagent"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "solver.py").write_text(USER_AGENT)
    (package / "notes.txt").write_text("the package's own data")
    write_mc_evals(package / "evals", ["p1", "p2", "p3"])
    output = tmp_path / "results"
    runtime_env = json.dumps({"py_modules": ["jobagent"]})
    command = [
        "rayeval",
        "run",
        "jobagent/evals",
        "--agent",
        "jobagent.solver:solve",
        "--seeds",
        "2",
        "--output",
        str(output),
        "--no-progress",
    ]
    done = _submit(ray_cluster, job_project, "--working-dir", ".", "--runtime-env-json", runtime_env, command=command)
    assert done.returncode == 0, _outputs(done, done.stdout, done.stderr)
    for _, row in _user_agent_rows(output).iterrows():
        where = _where(row)
        assert "/runtime_resources/py_modules_files/" in where["module"], where
        assert where["seen"] == [], where  # neither the package's data nor its evals


def test_a_job_runs_the_agent_of_its_pip_environment_sandboxed(
    ray_cluster: RayTestCluster, job_project: Path, tmp_path: Path
) -> None:
    """The agent as a wheel built locally, installed by Ray into the job's own virtual
    environment (under Ray's session folder): that environment is the unit's Python."""
    wheel = build_wheel(tmp_path / "dist", "wheelagent", {"wheelagent/__init__.py": USER_AGENT})
    output = tmp_path / "results"
    runtime_env = json.dumps({"pip": [str(wheel)]})
    command = [
        "rayeval",
        "run",
        "evals",
        "--agent",
        "wheelagent:solve",
        "--seeds",
        "2",
        "--output",
        str(output),
        "--no-progress",
    ]
    done = _submit(ray_cluster, job_project, "--working-dir", ".", "--runtime-env-json", runtime_env, command=command)
    assert done.returncode == 0, _outputs(done, done.stdout, done.stderr)
    for _, row in _user_agent_rows(output).iterrows():
        where = _where(row)
        assert "/runtime_resources/pip/" in where["module"] and "/runtime_resources/pip/" in where["executable"], where
        assert where["seen"] == [], where


def test_the_readmes_own_agent_jobs_run_as_written(
    ray_cluster: RayTestCluster, job_project: Path, tmp_path: Path
) -> None:
    """The README's jobs with the user's own agent, from a folder holding what they name:
    ``myagent.py`` and ``evals/``, and the package ``agents/mypkg``; the cluster's address and a
    local results root for the S3 one are the only substitutions."""
    block = next(
        b for b in re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL) if "myagent:solve" in b
    )
    commands = [line for line in re.sub(r"\\\n\s*", " ", block).splitlines() if line.strip()]
    (job_project / "myagent.py").write_text(USER_AGENT)
    (job_project / "agents" / "mypkg").mkdir(parents=True)
    (job_project / "agents" / "mypkg" / "__init__.py").write_text("")
    (job_project / "agents" / "mypkg" / "solver.py").write_text(USER_AGENT)
    for index, command in enumerate(commands):
        output = tmp_path / f"results-{index}"
        line = command.replace("http://127.0.0.1:8265", ray_cluster.dashboard_url).replace(
            "s3://bucket/results", str(output)
        )
        done = subprocess.run(
            ["bash", "-c", line], cwd=job_project, env=ray_cluster.env, capture_output=True, text=True,
            timeout=JOB_TIMEOUT_S, check=False,
        )  # fmt: skip
        assert done.returncode == 0, _outputs(done, done.stdout, done.stderr)
        rows = pd.read_parquet(output)
        assert len(rows) == 3 and rows["passed"].all() and (rows["isolation"] == "sandbox").all()
    assert len(commands) == 2


def test_a_job_whose_agent_does_not_load_where_units_run_fails_before_any_unit(
    ray_cluster: RayTestCluster, job_project: Path, tmp_path: Path
) -> None:
    (job_project / "brokenagent.py").write_text("import no_such_module_anywhere\n")
    output = tmp_path / "results"
    command = ["rayeval", "run", "evals", "--agent", "brokenagent:solve", "--output", str(output), "--no-progress"]
    done = _submit(ray_cluster, job_project, "--working-dir", ".", command=command)
    assert done.returncode != 0
    assert (
        "cannot be loaded in its sandbox" in done.stdout + done.stderr
        and "no_such_module_anywhere" in done.stdout + done.stderr
    )
    assert not output.exists() or not list(output.rglob("*.parquet"))


@pytest.mark.slow  # a driver stopped mid-run, then resumed: ~30 s
def test_ray_job_stop_stores_the_finished_units_and_cancels_the_run(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    """``ray job stop`` sends the driver SIGTERM (then SIGKILL after a few seconds): the rows of
    the units finished by then are in Parquet, none left in the driver's WAL, the manifest says
    cancelled, and --resume runs the rest."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    output = tmp_path / "results"
    run = output / "run_id=stopped"
    args = f"{EVALS} --agent sleep --agent-arg seconds=1 --seeds 8 --max-concurrency 4 --output {output} --run-id stopped --no-progress"
    # the token in a header: Ray reads its auth mode once per process, maybe before the fixture set it
    client = JobSubmissionClient(
        ray_cluster.dashboard_url, headers={"Authorization": f"Bearer {ray_cluster.env['RAY_AUTH_TOKEN']}"}
    )
    job_id = client.submit_job(entrypoint=f"rayeval run {args}")
    try:
        wal_rows = wait_until(
            lambda: sum(len(wal.read_bytes().splitlines()) for wal in run.glob("_wal/*.jsonl"))
            or client.get_job_status(job_id) in (JobStatus.SUCCEEDED, JobStatus.FAILED),
            JOB_TIMEOUT_S, 0.1, "rows in the driver's WAL",
        )  # fmt: skip
        assert wal_rows is not True, client.get_job_logs(job_id)
        assert not list(run.rglob("*.parquet")), "flushed before the stop (every 5 s): the test would prove nothing"
    finally:
        client.stop_job(job_id)
    wait_until(lambda: client.get_job_status(job_id) == JobStatus.STOPPED, 60, 0.5, "the job STOPPED")
    logs = client.get_job_logs(job_id)
    assert "stopped by SIGTERM" in logs
    assert "ray.kill" not in logs and "retries remaining" not in logs, logs  # Ray says nothing of the calls ended
    rows = pd.read_parquet(run)
    assert len(rows) >= wal_rows and rows["unit_id"].is_unique
    assert not list(run.glob("_wal/*.jsonl")), "rows left in the driver's WAL only"
    assert json.loads((run / "_manifest.json").read_text())["status"] == "cancelled"

    command = ["rayeval", "run", *args.split(), "--resume", "--address", ray_cluster.gcs_address]
    done = subprocess.run(
        command, check=False, cwd=tmp_path, env=ray_cluster.env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, _outputs(done, done.stdout, done.stderr)
    assert_every_unit_once(output, "stopped", planned_unit_ids("sleep", 8))


# ------------------------------------------------------------------------------ faults


@pytest.mark.slow  # a worker killed mid-run: ~15 s
def test_killed_unit_worker_process_loses_no_unit(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    """kill -9 of a busy UnitWorker actor process mid-run: the run finishes, every unit stored once."""
    process, output = start_sleep_run(ray_cluster, tmp_path, "kill-worker")
    try:
        wait_until(
            lambda: ray_cluster.actor_pids("UnitWorker", busy=True) or process.poll() is not None,
            60, 0.2, "a busy UnitWorker process",
        )  # fmt: skip
        assert process.poll() is None, "rayeval run ended before any UnitWorker was seen busy"
        time.sleep(2.0)  # mid-run: some units done, some in flight
        # a threaded actor's title reads idle whenever one of its calls ends, even with others
        # running: one snapshot can miss every busy worker, so look again for a while
        busy = wait_until(
            lambda: ray_cluster.actor_pids("UnitWorker", busy=True) or process.poll() is not None,
            10,
            0.05,
            "a busy UnitWorker",
        )
        assert busy is not True and process.poll() is None, "the run finished before the kill: make it longer"
        victim = busy[0]
        before = set(ray_cluster.actor_pids("UnitWorker"))
        kill_pids([victim])
        killed_at = time.monotonic()
        wait_until(lambda: victim not in ray_cluster.actor_pids("UnitWorker"), 10, 0.1, f"UnitWorker {victim} gone")
        # Ray restarts the actor in a new process (max_restarts=-1) while the run goes on
        restarted = wait_until(
            lambda: set(ray_cluster.actor_pids("UnitWorker")) - before or process.poll() is not None,
            30,
            0.2,
            "the actor's restart",
        )
        assert restarted is not True, "the run ended before the killed actor was restarted"
    except BaseException:
        kill_pids([process.pid])
        raise
    finish_sleep_run(process, output, "kill-worker", SLEEP_SEEDS)
    print(f"worker {victim} killed; run finished {time.monotonic() - killed_at:.1f} s later")


@pytest.mark.slow  # a node killed mid-run: ~17 s
def test_killed_second_node_loses_no_unit(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    """The second node's raylet and workers die mid-run: the run finishes on the head, every unit once."""
    node2 = ray_cluster.node2
    process, output = start_sleep_run(ray_cluster, tmp_path, "kill-node")
    try:
        wait_until(
            lambda: ray_cluster.actor_pids("UnitWorker", node=node2, busy=True) or process.poll() is not None,
            60, 0.2, "a busy UnitWorker on the second node",
        )  # fmt: skip
        assert process.poll() is None, "rayeval run ended before a UnitWorker on node 2 was busy"
        time.sleep(1.0)
        assert process.poll() is None, "the run finished before the kill: make it longer"
        assert node2.raylet_pids(), "node 2 has no raylet"
        head_actors = set(ray_cluster.actor_pids("UnitWorker", node=ray_cluster.head))
        killed = ray_cluster.kill_node2(wait_dead=False)
        killed_at = time.monotonic()
        assert not node2.pids(), f"node 2 processes survived: {node2.pids()}"
        # node 2's actor restarts on the head once the GCS declares node 2 dead
        moved = wait_until(
            lambda: set(ray_cluster.actor_pids("UnitWorker", node=ray_cluster.head)) - head_actors or process.poll() is not None,
            60, 0.2, "node 2's actor restarting on the head",
        )  # fmt: skip
        assert moved is not True, "the run ended before node 2's actor was restarted on the head"
    except BaseException:
        kill_pids([process.pid])
        raise
    finish_sleep_run(process, output, "kill-node", SLEEP_SEEDS)
    finished_after = time.monotonic() - killed_at
    wait_until(lambda: ray_cluster.node_state(node2.node_id) == "DEAD", 30, 0.5, "node 2 reported DEAD")
    assert ray_cluster.alive_node_ids() == {ray_cluster.head.node_id}
    print(f"node 2 killed ({len(killed)} processes); run finished {finished_after:.1f} s later")


# ------------------------------------------------------------------------------ growth


GROW_SEEDS = 12  # 120 units of 1 s, 4 at a time: ~30 s, time for a node to join and be used


def _workers_on(ray_cluster: RayTestCluster, node: RayNode, process: subprocess.Popen) -> None:
    """Units of a CPU each: the node runs one worker per CPU, no more (Ray's placement)."""
    wait_until(
        lambda: len(ray_cluster.actor_pids("UnitWorker", node=node)) >= NODE_CPUS or process.poll() is not None,
        30, 0.2, f"a worker per CPU of {node.name}",
    )  # fmt: skip
    assert len(ray_cluster.actor_pids("UnitWorker", node=node)) == NODE_CPUS


def _start_node2_until_busy(ray_cluster: RayTestCluster, process: subprocess.Popen, what: str) -> tuple[RayNode, float]:
    """Start the second node again; returns it, and when it started, once one of its workers runs a unit."""
    node2 = ray_cluster.start_node2()
    started_at = time.monotonic()
    wait_until(
        lambda: ray_cluster.actor_pids("UnitWorker", node=node2, busy=True) or process.poll() is not None,
        60, 0.2, f"a busy UnitWorker on {what}",
    )  # fmt: skip
    assert process.poll() is None, f"the run ended before {what} ran a unit"
    return node2, started_at


@pytest.mark.slow  # a node started mid-run, 120 units: ~37 s
def test_a_node_that_joins_mid_run_gets_the_units_waiting_for_room(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    """Units of a CPU each, 4 at a time, on a head of 2 CPUs: two workers run, two wait for room
    (the demand an autoscaler sees). A node that joins (an autoscaler's, a RayJob's worker pods
    starting after its driver) gets them, and units run there."""
    if ray_cluster.workers:
        ray_cluster.kill_node2()  # the run starts on the head alone
    process, output = start_sleep_run(ray_cluster, tmp_path, "grow", seeds=GROW_SEEDS, unit_cpus=1)
    try:
        wait_until(
            lambda: ray_cluster.actor_pids("UnitWorker", busy=True) or process.poll() is not None,
            60,
            0.2,
            "a busy UnitWorker",
        )
        assert process.poll() is None, "rayeval run ended before any UnitWorker was seen busy"
        _workers_on(ray_cluster, ray_cluster.head, process)
        node2, joined_at = _start_node2_until_busy(ray_cluster, process, "the node that joined")
        first_busy_s = time.monotonic() - joined_at
        _workers_on(ray_cluster, node2, process)
        assert len(ray_cluster.actor_pids("UnitWorker", node=ray_cluster.head)) == NODE_CPUS  # none added there
    except BaseException:
        kill_pids([process.pid])
        raise
    finish_sleep_run(process, output, "grow", GROW_SEEDS)
    print(f"node 2 joined mid-run; its workers ran a unit {first_busy_s:.1f} s later")


RETURN_SEEDS = 24  # 240 units of 1 s, 4 at a time: ~60 s, time for a node to die and come back


@pytest.mark.slow  # a node killed and started again mid-run, 240 units: ~70 s
def test_workers_return_to_a_node_that_comes_back(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    """Units of a CPU each: the second node dies mid-run (its workers wait for room, the head
    being full: the run goes on at half speed) and comes back (an autoscaler replacing a lost
    node): Ray places the waiting workers there again, and the head never runs more than it has
    CPUs for."""
    if not ray_cluster.workers:
        ray_cluster.start_node2()
    process, output = start_sleep_run(ray_cluster, tmp_path, "return", seeds=RETURN_SEEDS, unit_cpus=1)
    try:
        wait_until(
            lambda: ray_cluster.actor_pids("UnitWorker", node=ray_cluster.node2, busy=True) or process.poll() is not None,
            60, 0.2, "a busy UnitWorker on the second node",
        )  # fmt: skip
        assert process.poll() is None, "rayeval run ended before a UnitWorker on node 2 was busy"
        total = 2 * NODE_CPUS  # a worker per unit at once (--max-concurrency 4)
        wait_until(lambda: len(ray_cluster.actor_pids("UnitWorker")) == total, 30, 0.2, f"{total} workers")
        ray_cluster.kill_node2(wait_dead=False)
        time.sleep(5)  # time for node 2's death to be noticed and its workers to be placed where they can
        assert process.poll() is None, "the run ended before node 2 came back: make it longer"
        assert len(ray_cluster.actor_pids("UnitWorker", node=ray_cluster.head)) == NODE_CPUS
        node2, returned_at = _start_node2_until_busy(ray_cluster, process, "the node that came back")
        _workers_on(ray_cluster, node2, process)
        assert len(ray_cluster.actor_pids("UnitWorker", node=ray_cluster.head)) == NODE_CPUS
        back_s = time.monotonic() - returned_at
    except BaseException:
        kill_pids([process.pid])
        raise
    finish_sleep_run(process, output, "return", RETURN_SEEDS)
    print(f"node 2 came back; its workers ran there again {back_s:.1f} s later")


# ------------------------------------------------------------------------------ versions

_CLUSTER_METADATA = """
import json, sys
import ray._common.usage.usage_constants as usage
from ray._private import ray_constants
from ray._raylet import GcsClient

client = GcsClient(address=sys.argv[1])
key, namespace = usage.CLUSTER_METADATA_KEY, ray_constants.KV_NAMESPACE_CLUSTER
if len(sys.argv) > 2:
    client.internal_kv_put(key, sys.argv[2].encode(), overwrite=True, namespace=namespace)
print(client.internal_kv_get(key, namespace=namespace).decode())
"""


def _cluster_metadata(cluster: RayTestCluster, replace: str | None = None) -> str:
    """The cluster's metadata in its GCS (the Ray and Python versions it was started with),
    replaced by ``replace`` first when given."""
    done = subprocess.run(
        [sys.executable, "-c", _CLUSTER_METADATA, cluster.gcs_address, *([replace] if replace else [])],
        env=cluster.env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_a_driver_whose_ray_differs_from_the_clusters_is_told_so(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    """A cluster started with another Ray (its GCS says 2.59.0, as a cluster image of that
    version does): the run stops at connect time, exit 2, naming both versions and the fix."""
    import ray

    original = _cluster_metadata(ray_cluster)
    older = json.dumps({**json.loads(original), "ray_version": "2.59.0"})
    _cluster_metadata(ray_cluster, older)
    try:
        done = subprocess.run(
            ["rayeval", "run", str(EVALS), "--agent", "sleep", "--address", ray_cluster.gcs_address,
             "--output", str(tmp_path / "results"), "--no-progress"],
            cwd=tmp_path, env=ray_cluster.env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
        )  # fmt: skip
    finally:
        _cluster_metadata(ray_cluster, original)
    assert done.returncode == 2, _outputs(done, done.stdout, done.stderr)
    assert f"the Ray cluster at {ray_cluster.gcs_address} runs Ray 2.59.0" in done.stderr
    assert f"this driver Ray {ray.__version__}" in done.stderr and "Install ray[default]==2.59.0" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list((tmp_path / "results").rglob("*.parquet"))
