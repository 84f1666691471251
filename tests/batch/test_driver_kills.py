"""A driver SIGKILLed at a random point, as a user's ``kill -9`` or the OOM killer would: the
next ``--resume`` takes its run over at once and finishes it with every unit stored exactly
once, and nothing the killed driver started keeps running (issue 16).

Each trial's kill points come from an RNG seeded with the base seed plus the trial's number; a
failure names both, and ``RAYEVAL_KILL_SEED=<base seed>`` with the same test id replays it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd
import pytest

from rayeval.batch.plan import plan_units
from rayeval.evals import load_evals
from rayeval.storage import ResultStore, run_lease
from tests.batch.conftest import write_mc_evals

REPO = Path(__file__).resolve().parents[2]
EVALS, SEEDS = 6, 2
UNITS = EVALS * SEEDS
KillPoint = Literal["starting", "running", "closing"]
# Ray's dashboard and runtime-env agents see their raylet die within seconds, then spend ~60 s
# trying to tell the (dead) GCS before they exit: Ray's own clean-up, not left running for good.
RAY_AGENTS = (
    "ray::DashboardAgent",
    "ray/dashboard/agent.py",
    "ray::RuntimeEnvAgent",
    "ray/_private/runtime_env/agent/main.py",
)
_BASE_SEED = int(os.environ.get("RAYEVAL_KILL_SEED", random.SystemRandom().randrange(2**31)))


def _process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, start time, state) of every process now."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        table[int(entry)] = (int(fields[1]), fields[19], fields[0])
    return table


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


@dataclass
class Descendants:
    """Every process started under ``root`` (sandboxes and unit runners start sessions of their
    own, so a process group would miss them), sampled every 0.1 s until :meth:`stop`."""

    root: int
    # (pid, start time) -> command line
    seen: dict[tuple[int, str], str] = field(default_factory=dict)
    _done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(0.1):
            table = _process_table()
            children: dict[int, list[int]] = {}
            for pid, (ppid, _, _) in table.items():
                children.setdefault(ppid, []).append(pid)
            stack = list(children.get(self.root, []))
            while stack:
                pid = stack.pop()
                key = (pid, table[pid][1])
                if not self.seen.get(key):  # read again while empty: a title being rewritten reads empty
                    self.seen[key] = _command_line(pid)
                stack.extend(children.get(pid, []))

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def alive(self) -> dict[int, str]:
        """pid -> command line (as first seen, else as now, with its state) of those still running."""
        table = _process_table()
        return {
            pid: f"{cmd or _command_line(pid)} [state {table[pid][2]}]"
            for (pid, start), cmd in self.seen.items()
            if pid in table and table[pid][1] == start and table[pid][2] != "Z"
        }


def _end_of_the_killed_driver(tree: Descendants, why: str) -> None:
    """Waits for what the killed driver started to end; fails naming any that outlive it by a
    minute, besides Ray's agents, which are then ended (by pid) so no trial leaks into the next."""
    deadline = time.monotonic() + 60
    while (
        left := {p: c for p, c in tree.alive().items() if not any(agent in c for agent in RAY_AGENTS)}
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in tree.alive():
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{why}: still running a minute after the driver was killed: {left}"


@dataclass
class Trial:
    """One run driven to completion through kills, on a local or an S3 results root (``output``;
    ``endpoint``: the S3 server's)."""

    seed: int
    tmp: Path
    output: str
    endpoint: str | None = None
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.evals = write_mc_evals(self.tmp / "evals", [f"e{i}" for i in range(EVALS)])
        self.store = ResultStore(self.output, s3_endpoint_url=self.endpoint)
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        self.root_options = ["--s3-endpoint", self.endpoint] if self.endpoint else []

    def why(self) -> str:
        base = f"RAYEVAL_KILL_SEED={_BASE_SEED}"
        return f"seed {self.seed} ({base} replays it with the same trial number): " + "; ".join(self.log)

    def command(self, resume: bool) -> list[str]:
        return [
            sys.executable, "-m", "rayeval.cli", "run", str(self.evals), "--agent", "tests.batch.agents:counting_sleep",
            "--agent-arg", "seconds=0.4", "--seeds", str(SEEDS), "--output", self.output, *self.root_options,
            "--run-id", "r1", "--max-concurrency", "4", "--no-progress", *(["--resume"] if resume else []),
        ]  # fmt: skip

    def stored(self) -> set[str]:
        """Units with a stored row: in the write-ahead log or in Parquet parts, read in that
        order: a log the driver folds into a part and removes meanwhile is gone when read (its
        rows are in the part, read after)."""
        units: set[str] = set()
        for wal in self.store.wal_run_dir("r1").glob("*.jsonl"):
            try:
                lines = wal.read_bytes().splitlines()
            except FileNotFoundError:
                continue
            for line in lines:
                try:
                    units.add(json.loads(line)["unit_id"])
                except (ValueError, KeyError):
                    continue  # a line cut by the kill
        return units | set(self.store.stored_unit_ids("r1"))

    def drive(self, kill_at: KillPoint | None) -> None:
        """One ``rayeval run``: ``--resume`` once the run has a manifest (before it, a user's
        ``--resume`` is told there is no such run), killed at ``kill_at`` unless None."""
        resume = self.store.read_manifest_data("r1") is not None
        driver = subprocess.Popen(
            self.command(resume), cwd=REPO, env=self.env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )  # fmt: skip
        tree = Descendants(driver.pid)
        try:
            if kill_at is not None:
                self._wait_for(kill_at, driver)
                driver.kill()  # the driver alone, as `kill -9 <pid>` does
            _, stderr = driver.communicate(timeout=600)
        finally:
            tree.stop()
            if driver.poll() is None:
                driver.kill()
                driver.wait()
        verb = "resume" if resume else "run"
        self.log.append(
            f"{verb} killed {kill_at or 'never'}: exit {driver.returncode}, {len(self.stored())} units stored"
        )
        if driver.returncode == -signal.SIGKILL:
            _end_of_the_killed_driver(tree, self.why())
        else:
            # never 2 (run held by another driver): a killed driver's lease is taken over at once
            assert driver.returncode == 0, f"{self.why()}: {stderr}"

    def _wait_for(self, kill_at: KillPoint, driver: subprocess.Popen) -> None:
        """Starting: within the first seconds (loading, Ray starting); running: once some units
        are stored; closing: once all are (final flush, manifest, Ray's shutdown). A driver that
        ends first is simply not killed."""
        stored = {
            "starting": 0,
            "running": self.rng.randint(1, UNITS - 1),
            "closing": UNITS,
        }[kill_at]
        delay = self.rng.uniform(0, 4 if kill_at == "starting" else 0.5)
        deadline = time.monotonic() + 300
        while len(self.stored()) < stored and driver.poll() is None:
            assert time.monotonic() < deadline, f"{self.why()}: {stored} units not stored within 300 s"
            time.sleep(0.1)
        time.sleep(delay)

    def check(self) -> None:
        """Every planned unit exactly once in the Parquet parts, the run completed and released,
        nothing left in its write-ahead log or the work root, and its report works."""
        why = self.why()
        manifest = self.store.read_manifest("r1")
        assert manifest is not None and manifest.status == "completed", why
        assert manifest.total_units == UNITS, why
        plan = plan_units(
            load_evals(self.evals), ["default"], list(range(1, SEEDS + 1)), "tests.batch.agents:counting_sleep"
        )
        planned = Counter(unit.unit_id for unit in plan)
        assert len(planned) == UNITS, why
        # every Parquet file of the run, as pandas reads it (leaving _wal/ and _quarantine/ out)
        options = {"client_kwargs": {"endpoint_url": self.endpoint}} if self.endpoint else None
        rows = pd.read_parquet(self.store.run_uri("r1"), storage_options=options)
        assert Counter(rows["unit_id"]) == planned, f"{why}: not every planned unit exactly once"
        assert (rows["status"] == "passed").all(), why
        assert not list(self.store.wal_run_dir("r1").glob("*.jsonl")), why
        assert run_lease(self.store, "r1").read() is None, why
        leftovers = [p for p in Path(os.environ["RAYEVAL_WORK_ROOT"]).rglob("*") if not p.is_dir()]
        assert not leftovers, f"{why}: files left in the work root: {leftovers[:5]}"
        report = subprocess.run(
            [sys.executable, "-m", "rayeval.cli", "report", self.output, *self.root_options, "--run", "r1", "--format", "json"],
            cwd=REPO, env=self.env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert report.returncode == 0, f"{why}: {report.stderr}"
        assert json.loads(report.stdout), why


def _kill_point(rng: random.Random) -> KillPoint:
    return rng.choice(["starting", "running", "running", "closing"])


def _run_trial(request: pytest.FixtureRequest, trial: int) -> None:
    """Even trials on a local root, odd ones on S3 (moto on loopback)."""
    tmp_path: Path = request.getfixturevalue("tmp_path")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("RAYEVAL_WORK_ROOT", str(tmp_path / "work"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # an S3 root's WAL lives here
    if trial % 2:
        bucket = request.getfixturevalue("s3_bucket")
        run = Trial(_BASE_SEED + trial, tmp_path, bucket.uri("results"), bucket.endpoint_url)
    else:
        run = Trial(_BASE_SEED + trial, tmp_path, str(tmp_path / "out"))
    run.drive(_kill_point(run.rng))
    for _ in range(run.rng.randint(0, 2)):  # resumes killed in turn
        run.drive(_kill_point(run.rng))
    run.drive(None)
    run.check()


@pytest.mark.slow  # drivers killed and resumed, one trial on a local root and one on S3: ~35 s
@pytest.mark.parametrize("trial", range(2))
def test_a_killed_driver_is_resumed_to_every_unit_exactly_once(request: pytest.FixtureRequest, trial: int) -> None:
    _run_trial(request, trial)


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(2, 22))
def test_many_killed_drivers_are_each_resumed_to_every_unit_exactly_once(
    request: pytest.FixtureRequest, trial: int
) -> None:
    _run_trial(request, trial)
