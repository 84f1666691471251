"""The batch engine on an embedded Ray: real actors, real Parquet, real failures."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import ray

from rayeval import batch
from rayeval.batch.plan import plan_units, unit_id_for
from rayeval.batch.preview import preview_run
from rayeval.evals import Eval, load_evals
from rayeval.report import benchmark_table, read_units
from rayeval.storage import ManifestError, ResultStore, RunManifest, StorageError
from tests.batch.conftest import completed_units, read_invocations, write_mc_evals
from tests.conftest import read_jsonl, shared_path
from tests.processes import all_pids, cmdline, is_zombie

REPO = Path(__file__).resolve().parents[2]
FAST = {"show_progress": False, "flush_seconds": 0.5, "retry_backoff_s": 0.1}


@pytest.mark.usefixtures("shared_ray")  # the runs of consecutive tests asking for it share one Ray
def test_reference_agent_on_the_example_evals(tmp_path: Path) -> None:
    summary = batch.run(str(REPO / "evals"), agent="reference", output=str(tmp_path / "results"), run_id="demo", **FAST)
    frame = pd.read_parquet(tmp_path / "results" / "run_id=demo")
    assert len(frame) == 10 and frame["unit_id"].is_unique
    assert (frame["status"] == "passed").all(), frame[["eval_id", "status", "error_message"]]
    assert set(frame["model"]) == {"default"}
    assert summary.stored_rows == 10 and summary.models[0].passed == 10
    manifest = json.loads((tmp_path / "results" / "run_id=demo" / "_manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["total_units"] == 10 and "plan" not in manifest
    row = frame.iloc[0]
    assert row["rayeval_version"] and row["node"] and row["task"] and row["kit"] == "10x_chromium" or row["kit"]
    # where it ran: Ray's node id (two nodes of one host apart), the host beside it
    assert len(row["node"]) == 56 and int(row["node"], 16) and row["host"] == socket.gethostname()
    assert json.loads(row["metrics_json"])


@pytest.mark.usefixtures("shared_ray")
def test_units_that_raise_hang_or_return_garbage_get_their_own_rows(tmp_path: Path) -> None:
    """Sandboxed (the default): a unit that raises is retried, then stored as an error; a hung
    one is ended at its timeout; each unit gets exactly one row, which says its attempt."""
    evals = write_mc_evals(tmp_path / "evals", ["ok_1", "ok_2", "raise_1", "hang_1", "garbage_1"])
    summary = batch.run(
        str(evals),
        agent="tests.batch.agents:misbehaving",
        output=str(tmp_path / "out"),
        run_id="mixed",
        models=["m1", "m2"],
        timeout=6,  # time for a sandboxed unit to start on a loaded machine (CI: 6 test workers, 2 cores)
        retries=1,
        **FAST,
    )
    frame = pd.read_parquet(tmp_path / "out" / "run_id=mixed")
    assert len(frame) == 10 and frame["unit_id"].is_unique
    status = {(r.eval_id, r.model): r.status for r in frame.itertuples()}
    for model in ("m1", "m2"):
        assert status[("ok_1", model)] == "passed" and status[("ok_2", model)] == "passed"
        assert status[("raise_1", model)] == "error"
        assert status[("hang_1", model)] == "timeout"
        assert status[("garbage_1", model)] == "failed"
    raised = frame[frame["eval_id"] == "raise_1"].iloc[0]
    assert (
        raised["error_type"] == "RuntimeError"
        and "agent exploded" in raised["error_message"]
        and raised["attempt"] == 1
    )
    # A sandboxed agent cannot report to the test (no side channel out of the unit): the row
    # says which attempt it is. The agent's own exception is not run again (retries=1 is for
    # what may pass on a second try), nor is a hang or a wrong answer.
    assert set(frame["attempt"]) == {1}
    assert set(frame["isolation"]) == {"sandbox"}
    assert {m.model: m.errors for m in summary.models} == {"m1": 2, "m2": 2}


@pytest.mark.usefixtures("shared_ray")
def test_results_that_cannot_be_stored_are_their_own_units_errors(tmp_path: Path) -> None:
    """Inline, an agent's result reaches the row unchecked: one that no row can hold (text that
    is not Unicode, an integer or a nesting no JSON holds) makes that unit an error row saying
    why; the units beside it, on the same worker, are stored as they are."""
    evals = write_mc_evals(tmp_path / "evals", ["ok_1", "surrogate_1", "huge_1", "deep_1", "raise_1", "ok_2"])
    batch.run(
        str(evals),
        agent="tests.batch.agents:unstorable",
        output=str(tmp_path / "out"),
        run_id="r",
        isolation="inline",
        retries=0,
        max_concurrency=6,
        **FAST,
    )
    frame = pd.read_parquet(tmp_path / "out" / "run_id=r").set_index("eval_id")
    assert sorted(frame.index) == sorted(["ok_1", "surrogate_1", "huge_1", "deep_1", "raise_1", "ok_2"])
    assert frame.loc["ok_1", "passed"] and frame.loc["ok_2", "passed"]
    unstorable, unsendable = (
        "the unit's result cannot be stored: ",
        "the agent's return value cannot be stored as JSON: ",
    )
    for eval_id, kind, start, why in [
        ("surrogate_1", "UnstorableResult", unstorable, "surrogates not allowed"),
        ("raise_1", "UnstorableResult", unstorable, "surrogates not allowed"),
        ("huge_1", "UnsendableResult", unsendable, "integer string conversion"),
        ("deep_1", "UnsendableResult", unsendable, "RecursionError"),
    ]:
        row = frame.loc[eval_id]
        assert row["status"] == "error" and row["error_type"] == kind, (eval_id, row["error_type"])
        assert row["error_message"].startswith(start) and why in row["error_message"], row["error_message"]
        assert row["answer_json"] is None and row["attempt"] == 1


@pytest.mark.usefixtures("shared_ray")
@pytest.mark.parametrize(
    "options, isolation, network",
    [({}, "sandbox", "host"), ({"isolation": "process"}, "process", None)],
    ids=["default", "process"],
)
def test_rows_and_the_manifest_record_how_agents_ran(
    tmp_path: Path, options: dict, isolation: str, network: str | None
) -> None:
    """Sandboxed unless asked otherwise; every row and the run's manifest say which it was
    (and, sandboxed, the agents' network)."""
    evals = write_mc_evals(tmp_path / "evals", ["e1", "e2"])
    batch.run(
        str(evals), agent="tests.batch.agents:instant", output=str(tmp_path / "out"), run_id="iso", **options, **FAST
    )
    frame = pd.read_parquet(tmp_path / "out" / "run_id=iso")
    assert len(frame) == 2 and (frame["status"] == "passed").all() and list(frame["isolation"]) == [isolation] * 2
    manifest = ResultStore(str(tmp_path / "out")).read_manifest("iso")
    assert (manifest.isolation, manifest.network, manifest.status) == (isolation, network, "completed")


@pytest.mark.usefixtures("shared_ray")
def test_replay_of_the_scbench_corpus_gives_the_recorded_verdicts(tmp_path: Path) -> None:
    trials = shared_path("corpus", "scbench", "trials.jsonl")
    rows = read_jsonl(trials)
    pairs = sorted({(r["model"], r["harness"]) for r in rows})
    models = [f"{m}@{h}" for m, h in pairs]
    batch.run(
        str(shared_path("corpus", "scbench", "evals")),
        agent="replay",
        agent_args={"trials": str(trials)},
        models=models,
        seeds=[1, 2, 3],
        output=str(tmp_path / "out"),
        run_id="replay",
        max_concurrency=64,
        **FAST,
    )
    frame = pd.read_parquet(tmp_path / "out" / "run_id=replay")
    assert len(frame) == 6 * len(models) * 3 and frame["unit_id"].is_unique
    # rows name the model and the harness apart, errors included: model@harness is the unit's selector
    assert set(zip(frame["model"], frame["harness"])) == set(pairs)
    recorded = {(r["eval_id"], r["model"], r["harness"], r["trial"]): r for r in rows}
    answered = frame[frame["status"] != "error"]
    assert len(answered) == len(rows) == 273  # units with no recorded trial are error rows
    for r in answered.itertuples():
        expected = recorded[(r.eval_id, r.model, r.harness, r.seed)]
        assert r.passed is expected["recorded_passed"] or r.passed == expected["recorded_passed"]
        if expected["cost_usd"] is None:
            assert pd.isna(r.cost_usd)
        else:
            assert r.cost_usd == pytest.approx(expected["cost_usd"])
    missing = frame[frame["status"] == "error"]
    assert len(missing) and missing["error_message"].str.contains("no recorded trial").all()
    # one leaderboard row per model x harness, its errors counted in it as failures
    table = benchmark_table(read_units(tmp_path / "out"))
    assert len(table) == len(pairs) and table["Errors"].sum() == len(missing)
    assert set(zip(table["model_name"], table["harness"])) == set(pairs)


def test_unit_ids_are_stable_content_hashes(tmp_path: Path) -> None:
    folder = write_mc_evals(tmp_path / "e", ["x"])
    (eval_,) = load_evals(folder)
    same = unit_id_for(eval_, "m", 1, "agent")
    assert same == unit_id_for(load_evals(folder)[0], "m", 1, "agent")
    assert (
        len(
            {
                same,
                unit_id_for(eval_, "m", 2, "agent"),
                unit_id_for(eval_, "n", 1, "agent"),
                unit_id_for(eval_, "m", 1, "other"),
            }
        )
        == 4
    )
    body = json.loads((folder / "x.json").read_text())
    body["grader"]["config"]["correct_answer"] = "A"
    (folder / "x.json").write_text(json.dumps(body))
    assert unit_id_for(load_evals(folder)[0], "m", 1, "agent") != same
    assert len(plan_units([eval_], ["a", "b"], [1, 2, 3], "agent")) == 6


def test_unit_ids_do_not_change_between_versions() -> None:
    """Resuming a run made by an earlier version must recognise its units: the id is pinned."""
    eval_ = Eval.model_validate(
        {"id": "stable", "task": "A or B?", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    )
    assert unit_id_for(eval_, "claude-x", 3, "reference") == "06ccde98afcb4862b1e817b9deee88a8"
    units = plan_units([eval_, eval_], ["claude-x", "m2"], [3, 4], "reference")
    assert units[0].unit_id == "06ccde98afcb4862b1e817b9deee88a8"
    assert [u.position for u in units] == list(range(8))
    assert [(u.eval_index, u.model, u.seed) for u in units[:4]] == [
        (0, "claude-x", 3),
        (0, "claude-x", 4),
        (0, "m2", 3),
        (0, "m2", 4),
    ]


def test_bad_inputs_fail_before_any_work(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "e.json").write_text("{")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rayeval.cli",
            "run",
            str(bad),
            "--agent",
            "reference",
            "--output",
            str(tmp_path / "o"),
            "--no-progress",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "invalid JSON" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rayeval.cli",
            "run",
            str(REPO / "evals"),
            "--agent",
            "nope",
            "--output",
            str(tmp_path / "o"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "unknown agent" in done.stderr
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rayeval.cli",
            "run",
            str(REPO / "evals"),
            "--agent",
            "reference",
            "--output",
            str(blocker / "results"),
            "--no-progress",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "results root" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").rglob("*.parquet"))
    damaged = tmp_path / "d" / "run_id=r1" / "_manifest.json"  # a run whose manifest was cut short
    damaged.parent.mkdir(parents=True)
    damaged.write_text('{"run_id": "r1", "agent": "refer')
    for resume in ([], ["--resume"]):
        done = subprocess.run(
            [sys.executable, "-m", "rayeval.cli", "run", str(REPO / "evals"), "--agent", "reference", "--output", str(tmp_path / "d"),
             "--run-id", "r1", "--no-progress", *resume],
            check=False, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"{damaged} is not a valid run manifest (file: Invalid JSON" in done.stderr


def _session_processes(ray_tmp: Path) -> list[str]:
    """Command lines of the running processes of Ray sessions under ``ray_tmp``."""
    return [line for pid in all_pids() if not is_zombie(pid) and str(ray_tmp) in (line := cmdline(pid))]


def test_a_run_on_an_embedded_ray_ends_every_process_of_it(tmp_path: Path) -> None:
    """The embedded Ray's shutdown (which ends its autoscaler monitor itself) leaves nothing running."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(ray_tmp)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rayeval.cli", "run", str(REPO / "evals"), "--agent", "sleep",
             "--agent-arg", "seconds=0", "--output", str(tmp_path / "o"), "--no-progress"],
            cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "10/10 units stored" in done.stdout and "Token authentication" not in done.stderr, done.stderr
        deadline = time.monotonic() + 30
        while (left := _session_processes(ray_tmp)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _peak_concurrency(spans: list[dict]) -> int:
    edges = sorted([(s["start"], 1) for s in spans] + [(s["end"], -1) for s in spans])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


@pytest.mark.usefixtures("shared_ray")
def test_units_run_as_many_at_once_as_their_resources_allow(tmp_path: Path) -> None:
    """Each unit asks Ray for its CPUs: units of a twentieth of a CPU fill --max-concurrency 16,
    units of a whole CPU run as many at once as the embedded Ray has CPUs."""
    evals = write_mc_evals(tmp_path / "evals", [f"q{i}" for i in range(16)])
    spans = tmp_path / "spans.jsonl"
    options = {
        "agent": "tests.batch.agents:timed_sleep", "agent_args": {"seconds": "0.3", "log": str(spans)},
        "output": str(tmp_path / "out"), "max_concurrency": 16, "isolation": "inline", **FAST,
    }  # fmt: skip
    summary = batch.run(str(evals), seeds=[1, 2], run_id="light", unit_cpus=0.05, **options)
    assert summary.stored_rows == 32 and summary.models[0].passed == 32
    assert _peak_concurrency(read_invocations(spans)) >= 10
    spans.unlink()
    cpus = int(ray._private.utils.get_num_cpus())
    summary = batch.run(str(evals), seeds=[1], run_id="heavy", unit_cpus=1, **options)
    assert summary.stored_rows == 16
    assert 1 <= _peak_concurrency(read_invocations(spans)) <= cpus


@pytest.mark.usefixtures("shared_ray")
def test_the_run_and_its_dry_run_say_how_many_units_run_at_once_and_why(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Units of a whole CPU with --max-concurrency 16: as many run at once as the embedded Ray
    has CPUs, and the run says so at start, with the option that changes it (by its keyword: a
    Python caller's run); --dry-run, which starts no Ray, says the same from what Ray would find here."""
    cpus = int(ray._private.utils.get_num_cpus())
    evals = write_mc_evals(tmp_path / "evals", [f"q{i}" for i in range(8)])
    spans = tmp_path / "spans.jsonl"
    options = {
        "agent": "tests.batch.agents:timed_sleep", "agent_args": {"seconds": "0.3", "log": str(spans)},
        "output": str(tmp_path / "out"), "max_concurrency": 16, "isolation": "inline", "unit_cpus": 1, "seeds": [1, 2],
        **FAST,
    }  # fmt: skip
    said = (
        f"units at once: {cpus}, not the 16 of max_concurrency: each unit asks for CPU 1 and this machine's Ray "
        f"has CPU {cpus} in all (unit_cpus changes what a unit asks for)"
    )
    assert preview_run(batch.BatchConfig(evals=[str(evals)], **options)).capacity == said
    batch.run(str(evals), run_id="held", **{**options, "show_progress": True})
    start = [line for line in capfd.readouterr().err.splitlines() if line.startswith("[rayeval]")][:2]
    assert start[1] == f"[rayeval] {said}"
    assert _peak_concurrency(read_invocations(spans)) <= cpus


@pytest.mark.usefixtures("shared_ray")
def test_a_unit_bigger_than_the_machine_is_refused_before_any_work(tmp_path: Path) -> None:
    evals = write_mc_evals(tmp_path / "evals", ["e1"])
    with pytest.raises(batch.UnitsDoNotFit, match=r"a unit asks for CPU 4096.*more than this machine's Ray has"):
        batch.run(str(evals), agent="sleep", output=str(tmp_path / "out"), run_id="big", unit_cpus=4096, **FAST)
    assert not (tmp_path / "out" / "run_id=big" / "_manifest.json").exists()


def _ran_now(stdout: str) -> tuple[int, int]:
    """(units run now, units already done) from the summary ``rayeval run`` prints."""
    match = re.search(r"\((\d+) run now, (\d+) already done\)", stdout)
    assert match, stdout
    return int(match[1]), int(match[2])


@pytest.mark.slow  # a driver killed mid-run, then resumed: ~18 s
def test_killed_driver_then_resume_runs_every_unit_exactly_once(tmp_path: Path) -> None:
    """Sandboxed (the default): the agent cannot tell the test it ran, so the rows do. The rows
    stored before the kill are the ones the run ends with; every other unit ran on resume."""
    evals = write_mc_evals(tmp_path / "evals", [f"e{i}" for i in range(12)])
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "rayeval.cli", "run", str(evals), "--agent", "tests.batch.agents:counting_sleep",
        "--agent-arg", "seconds=0.5", "--seeds", "3", "--output", str(out), "--run-id", "r1",
        "--max-concurrency", "4", "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    driver = subprocess.Popen(
        command, cwd=REPO, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(completed_units(out, "r1")) < 8:
        time.sleep(0.1)
    assert driver.poll() is None, driver.communicate()
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and everything it started
    driver.wait(timeout=30)
    completed = completed_units(out, "r1")
    killed_at = pd.Timestamp.now(tz="UTC")
    assert 8 <= len(completed) < 36

    done = subprocess.run(
        command + ["--resume"], cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert _ran_now(done.stdout) == (36 - len(completed), len(completed))
    frame = pd.read_parquet(out / "run_id=r1")
    assert len(frame) == 36 and frame["unit_id"].is_unique and (frame["status"] == "passed").all()
    assert set(zip(frame["eval_id"], frame["seed"])) == {(f"e{i}", s) for i in range(12) for s in (1, 2, 3)}
    before = frame[[unit in completed for unit in zip(frame["eval_id"], frame["seed"])]]
    assert (before["finished_at"] < killed_at).all(), "a completed unit ran again"
    assert (frame.drop(before.index)["started_at"] > killed_at).all()  # the rest ran on resume
    assert (frame["attempt"] == 1).all() and set(frame["isolation"]) == {"sandbox"}
    assert not list((out / "run_id=r1").glob("_wal/*.jsonl"))  # recovered and compacted


# ``python -m rayeval.cli ARGS`` with Ctrl-C's handler in place whatever the parent left.
_WITH_CTRL_C = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('rayeval.cli', run_name='__main__', alter_sys=True)"
)


@pytest.mark.slow  # a driver stopped mid-run by a signal, then resumed: ~30 s
@pytest.mark.parametrize(
    "stop, isolation",
    [(signal.SIGTERM, "sandbox"), (signal.SIGINT, "process")],
    ids=["SIGTERM-sandbox", "SIGINT-process"],
)
def test_a_stopped_run_stores_its_finished_units_then_resumes(
    tmp_path: Path, invocation_log: Path, stop: int, isolation: str
) -> None:
    """Ctrl-C, or SIGTERM as ``ray job stop`` and Kubernetes send it: the units finished by then
    go to Parquet at once (not only to the driver's local WAL, which on a cluster may go with
    the head node), the manifest says cancelled, and --resume runs the rest."""
    evals = write_mc_evals(tmp_path / "evals", [f"e{i}" for i in range(12)])
    out = tmp_path / "out"
    run = out / "run_id=r1"
    command = [
        sys.executable, "-m", "rayeval.cli", "run", str(evals), "--agent", "tests.batch.agents:counting_sleep",
        "--agent-arg", "seconds=0.5", "--seeds", "3", "--output", str(out), "--run-id", "r1",
        "--max-concurrency", "4", "--no-progress", "--isolation", isolation,
    ]  # fmt: skip
    if isolation == "process":  # counts the agent's invocations: a side channel the sandbox blocks
        command += ["--agent-env", "RAYEVAL_TEST_INVOCATION_LOG"]
    env = {**os.environ, "RAYEVAL_TEST_INVOCATION_LOG": str(invocation_log), "RAY_USAGE_STATS_ENABLED": "0"}
    # As started from a terminal: a test suite run in the background (``cmd &``) passes SIGINT on
    # ignored, and Python then leaves it ignored instead of raising KeyboardInterrupt.
    as_from_a_terminal = [sys.executable, "-c", _WITH_CTRL_C, *command[3:]]
    driver = subprocess.Popen(
        as_from_a_terminal,
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(completed_units(out, "r1")) < 4:
            time.sleep(0.05)
        finished = completed_units(out, "r1")
        assert driver.poll() is None, driver.communicate()
        # rows are flushed to Parquet every 5 s: these are still buffered in the driver
        assert not list(run.rglob("*.parquet")), "flushed before the stop: the test would prove nothing"
        driver.send_signal(stop)
        stdout, stderr = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode == 128 + stop, stderr
    assert "--resume --run-id r1" in stderr and "Traceback" not in stderr
    # the workers ended with their calls in flight: Ray says nothing of those calls
    assert "ray.kill" not in stdout + stderr and "retries remaining" not in stdout + stderr, stdout + stderr
    stored = pd.read_parquet(run)
    assert finished <= set(zip(stored["eval_id"], stored["seed"])) and stored["unit_id"].is_unique
    assert not list(run.glob("_wal/*.jsonl")), "rows left in the WAL only"
    assert json.loads((run / "_manifest.json").read_text())["status"] == "cancelled"

    done = subprocess.run(
        [*command, "--resume"], cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert _ran_now(done.stdout) == (36 - len(stored), len(stored))
    frame = pd.read_parquet(run)
    assert len(frame) == 36 and frame["unit_id"].is_unique and (frame["status"] == "passed").all()
    assert set(frame["isolation"]) == {isolation}
    # the rows stored at the stop are the run's rows of those units: none of them ran again
    kept = frame.set_index("unit_id").loc[stored["unit_id"]]
    assert (kept["started_at"].to_numpy() == stored["started_at"].to_numpy()).all(), "a stored unit ran again"
    if isolation == "process":
        invocations = Counter((i["eval_id"], i["seed"]) for i in read_invocations(invocation_log))
        assert set(invocations) == set(zip(frame["eval_id"], frame["seed"]))
        assert all(invocations[unit] == 1 for unit in set(zip(stored["eval_id"], stored["seed"]))), (
            "a stored unit ran again"
        )
    assert json.loads((run / "_manifest.json").read_text())["status"] == "completed"


class _FailingWriter:
    def close(self) -> None:
        raise StorageError("could not store 3 rows; they remain in the WAL")


def _manifest(run_id: str) -> RunManifest:
    return RunManifest.model_validate(
        {"run_id": run_id, "agent": "a", "models": ["m"], "seeds": [1], "eval_files": [], "plan": []}
    )


def test_rows_that_cannot_be_stored_at_the_end_fail_the_run_and_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's final flush fails (storage down): the manifest says failed, not completed,
    and the writer's error (naming the WAL) is what the caller sees, even when the manifest
    cannot be written either."""
    store = ResultStore(str(tmp_path / "out"))
    with pytest.raises(StorageError, match="remain in the WAL"):
        store.end_run(_FailingWriter(), _manifest("r1"), "completed")
    assert store.read_manifest("r1").status == "failed"

    def storage_down(manifest: RunManifest) -> None:
        raise OSError("connection refused")

    monkeypatch.setattr(store, "write_manifest", storage_down)
    with pytest.raises(StorageError, match="remain in the WAL"):
        store.end_run(_FailingWriter(), _manifest("r2"), "cancelled")


@pytest.mark.usefixtures("shared_ray")
def test_resume_refuses_inputs_that_changed_the_plan(tmp_path: Path) -> None:
    """An eval edited between a run and its resume gets new unit ids: its old rows would stay
    beside the new ones and the run would mix two experiments. Resume names what changed and
    runs nothing; with the original inputs it finishes the run."""
    evals = write_mc_evals(tmp_path / "evals", ["e1", "e2", "e3"])
    options = {
        "evals": [str(evals)],
        "agent": "tests.batch.agents:instant",
        "models": ["m1"],
        "seeds": [1, 2],
        "output": str(tmp_path / "out"),
        "run_id": "r",
        **FAST,
    }
    first = batch.run_batch(batch.BatchConfig(**options))
    assert first.stored_rows == 6
    original = (evals / "e2.json").read_text()
    (evals / "e2.json").write_text(original.replace("A or B?", "A or B, really?"))
    with pytest.raises(batch.RunConflict, match=r"\n  evals changed since: e2\n") as raised:
        batch.run_batch(batch.BatchConfig(**options, resume=True))
    assert "(another run_id)" in str(raised.value) and "force=True" in str(raised.value)  # a Python caller's names
    (evals / "e2.json").write_text(original)
    with pytest.raises(batch.RunConflict, match=r"\n  seeds: 1, 2 → 1..3\n"):
        batch.run_batch(batch.BatchConfig(**{**options, "seeds": [1, 2, 3]}, resume=True))
    with pytest.raises(batch.RunConflict, match=r"\n  models: m1 → m2\n"):
        batch.run_batch(batch.BatchConfig(**{**options, "models": ["m2"]}, resume=True))
    with pytest.raises(batch.RunConflict, match=r"\n  timeout: None → 5.0\n"):
        batch.run_batch(batch.BatchConfig(**{**options, "timeout": 5.0}, resume=True))
    (evals / "e3.json").unlink()
    with pytest.raises(batch.RunConflict, match=r"\n  evals removed: e3\n"):
        batch.run_batch(batch.BatchConfig(**options, resume=True))
    assert len(pd.read_parquet(tmp_path / "out" / "run_id=r")) == 6  # nothing ran
    write_mc_evals(evals, ["e3"])  # as it was: the run's own plan again
    resumed = batch.run_batch(batch.BatchConfig(**options, resume=True))
    assert (resumed.ran, resumed.skipped) == (0, 6)


@pytest.mark.usefixtures("shared_ray")
def test_progress_says_which_run_it_is_and_where_its_results_go(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Printed first: a run killed outright never prints its summary, and is resumed by its id."""
    evals = write_mc_evals(tmp_path / "evals", ["e1", "e2"])
    options = {**FAST, "show_progress": True}
    summary = batch.run(
        str(evals), agent="tests.batch.agents:instant", output=str(tmp_path / "out"), seeds=[1, 2], **options
    )
    lines = capfd.readouterr().err.splitlines()
    progress = [line for line in lines if line.startswith("[rayeval]")]
    assert (
        progress[0]
        == f"[rayeval] run {summary.run_id}: 4 units to run (0 already done); results: {tmp_path / 'out'}/run_id={summary.run_id}"
    )
    assert progress[-1].startswith("[rayeval] 4/4 units done (100.0%), pass rate 100.0%, 0 errors")


def test_console_script_runs_an_agent_module_of_the_working_folder(tmp_path: Path) -> None:
    """`rayeval run --agent my_agents:f` from a project folder: the driver and every Ray worker
    import the project's module (the script's own sys.path does not hold the folder)."""
    project = tmp_path / "project"
    write_mc_evals(project / "evals", ["p1", "p2", "p3"])
    (project / "my_agents.py").write_text("def answer_b(task_prompt, work_dir, context):\n    return {'answer': 'B'}\n")
    script = Path(sys.executable).with_name("rayeval")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [
            str(script),
            "run",
            "evals",
            "--agent",
            "my_agents:answer_b",
            "--seeds",
            "2",
            "--output",
            "out",
            "--run-id",
            "p",
            "--no-progress",
        ],
        cwd=project,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    frame = pd.read_parquet(project / "out" / "run_id=p")
    assert len(frame) == 6 and (frame["status"] == "passed").all(), frame[["status", "error_message"]]


def test_seeds_must_fit_the_stored_int64_column() -> None:
    with pytest.raises(ValueError, match="seeds.0"):
        batch.BatchConfig(evals=["e"], agent="reference", output="o", seeds=[2**63])
    assert batch.BatchConfig(evals=["e"], agent="reference", output="o", seeds=[2**63 - 1]).seeds == [2**63 - 1]


@pytest.mark.parametrize("name", ["timeout", "grade_timeout"])
def test_timeouts_beyond_thirty_days_are_refused(name: str) -> None:
    """1e300 s overflowed the waits of every unit (each an OverflowError row): a typo, refused."""
    with pytest.raises(ValueError, match=f"{name}\n.*less than or equal to 2592000"):
        batch.BatchConfig(evals=["e"], agent="reference", output="o", **{name: 1e300})
    assert (
        getattr(batch.BatchConfig(evals=["e"], agent="reference", output="o", **{name: 2_592_000}).execution, name)
        == 2_592_000
    )


@pytest.mark.usefixtures("shared_ray")
def test_a_damaged_manifest_is_resumed_only_with_force(tmp_path: Path) -> None:
    """A run's manifest that is not a manifest any more leaves its inputs unknown: --resume says
    so and that --force goes on; --resume --force finishes the run with the current inputs,
    without running its stored units again, and writes their manifest."""
    evals = write_mc_evals(tmp_path / "evals", ["e1", "e2"])
    options = {"evals": [str(evals)], "agent": "tests.batch.agents:instant", "seeds": [1, 2],
               "output": str(tmp_path / "out"), "run_id": "r", "isolation": "inline", **FAST}  # fmt: skip
    batch.run_batch(batch.BatchConfig(**{**options, "seeds": [1]}))
    manifest = tmp_path / "out" / "run_id=r" / "_manifest.json"
    manifest.write_text('{"run_id": "r", "status": ')
    for resume in (batch.run_batch, preview_run):  # --dry-run says the same
        with pytest.raises(
            ManifestError, match=r"_manifest.json is not a valid run manifest .*resume=True, force=True"
        ):
            resume(batch.BatchConfig(**options, resume=True))
    with pytest.raises(ManifestError):
        batch.run_batch(batch.BatchConfig(**options))  # nor started afresh over it
    forced = batch.BatchConfig(**options, resume=True, force=True)
    assert preview_run(forced).to_run == 2
    done = batch.run_batch(forced)
    assert (done.ran, done.skipped) == (2, 2)
    assert json.loads(manifest.read_text())["status"] == "completed"
    assert len(pd.read_parquet(tmp_path / "out" / "run_id=r")) == 4
