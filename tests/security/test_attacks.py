"""Hostile agents, each run end to end through ``rayeval run`` on a real (embedded) Ray: every
attack must fail in the sandbox. Where the attack works without the sandbox, a control run
shows it does (``--isolation process`` or ``inline``), so that each test can fail.

The evals under attack grade ``value`` against a secret number: a unit passes only if its
agent got hold of the answer key. See tests/security/attack_agents.py.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import ray

from rayeval.cli import main as rayeval_main
from rayeval.sandbox.units import spill_folders
from rayeval.storage import ResultStore
from tests.fixtures_s3 import S3Bucket
from tests.pings import Pings
from tests.security.attack_agents import HUNTED_PREFIX, MARKER

KEY = 7391.25
HUNTED_SECRET = HUNTED_PREFIX.decode() + "0123456789abcdef"
AGENTS = "tests.security.attack_agents"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One embedded Ray for the module (its workers inherit a secret in their environment and
    the data cache folder), the evals under attack and their input file."""
    base = tmp_path_factory.mktemp("attacks")
    evals = base / "evals"
    (evals / "data").mkdir(parents=True)
    (evals / "data" / "input.txt").write_text("the original input\n")
    for name in ("alpha", "beta"):
        body = {
            "id": f"attack_{name}",
            "task": 'Find the value. <EVAL_ANSWER>{"value": <number>}</EVAL_ANSWER>',
            "data_node": "data/input.txt",
            "canary": MARKER,
            "grader": {
                "type": "numeric_tolerance",
                "config": {
                    "ground_truth": {"value": KEY},
                    "tolerances": {"value": {"type": "absolute", "value": 0.01}},
                },
            },
        }
        (evals / f"{name}.json").write_text(json.dumps(body))
    saved = {k: os.environ.get(k) for k in ("ANTHROPIC_API_KEY", "RAYEVAL_CACHE_DIR", "RAYEVAL_WORK_ROOT")}
    os.environ["ANTHROPIC_API_KEY"] = HUNTED_SECRET
    os.environ["RAYEVAL_CACHE_DIR"] = str(base / "cache")
    os.environ["RAYEVAL_WORK_ROOT"] = str(base / "work")
    # where objects spill, outside the temp folder (every unit's /tmp is its own anyway)
    spill = Path(tempfile.mkdtemp(prefix="rayeval-spill-", dir="/var/tmp"))
    ray.init(
        address="local",
        include_dashboard=False,
        object_store_memory=256 << 20,
        object_spilling_directory=str(spill),
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield {"base": base, "evals": evals, "eval_file": evals / "alpha.json", "cache": base / "cache", "spill": spill}
    finally:
        ray.shutdown()
        shutil.rmtree(spill, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def rayeval_run(
    site: dict[str, Any], out: Path, agent: str, *options: str, evals: str | None = None
) -> list[dict[str, Any]]:
    """``rayeval run`` in this process (on the module's Ray); the stored rows. ``agent``: one
    of ``attack_agents``, or a ``module:function``."""
    argv = [
        "run",
        evals or str(site["evals"]),
        "--agent",
        agent if ":" in agent else f"{AGENTS}:{agent}",
        "--output",
        str(out),
        "--no-progress",
        "--retries",
        "0",
        *options,
    ]
    code = rayeval_main(argv)
    stored = rows(out)
    # 1: every unit errored (an attack ending in its unit's timeout or limit), as documented
    errored = bool(stored) and all(row["status"] in ("error", "timeout") for row in stored)
    assert code == (1 if errored else 0), f"rayeval run exited {code}"
    return stored


def rows(out: Path) -> list[dict[str, Any]]:
    return ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist()


def attack(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(row["metadata_json"]).get("attack", {})


def test_the_workers_memory_holds_no_answer_key(site: dict[str, Any], tmp_path: Path) -> None:
    sandboxed = rayeval_run(site, tmp_path / "s", "memory")
    assert [r["passed"] for r in sandboxed] == [False, False]
    assert all(r["isolation"] == "sandbox" and attack(r)["objects"] > 100 for r in sandboxed)
    inline = rayeval_run(site, tmp_path / "i", "memory", "--isolation", "inline")  # the control
    assert all(r["passed"] for r in inline)


def test_other_processes_and_their_secrets_are_out_of_sight(site: dict[str, Any], tmp_path: Path) -> None:
    sandboxed = rayeval_run(site, tmp_path / "s", "processes")
    for row in sandboxed:
        seen = attack(row)
        assert not row["passed"] and not seen["leaked_secret"] and seen["processes"] <= 3, seen
    # the control: without the sandbox, the workers' environment (the secret) is in sight
    unsandboxed = rayeval_run(site, tmp_path / "p", "processes", "--isolation", "process")
    assert all(attack(r)["leaked_secret"] for r in unsandboxed), [attack(r) for r in unsandboxed]


def test_the_results_root_cannot_be_forged(site: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "results"
    rayeval_run(site, out, "honest", "--run-id", "victim")  # answers -1: every unit fails
    attacked = rayeval_run(site, out, "forge_results", "--run-id", "attack", "--agent-arg", f"results={out}")
    assert all(not attack(r)["root_visible"] and attack(r)["written"] == 0 for r in attacked if r["run_id"] == "attack")
    assert not list(out.rglob("part-forged.parquet"))
    assert [r["passed"] for r in rows(out) if r["run_id"] == "victim"] == [False, False]
    rayeval_run(
        site, out, "forge_results", "--run-id", "control", "--isolation", "process", "--agent-arg", f"results={out}"
    )
    assert list(out.rglob("part-forged.parquet"))  # without the sandbox the forgery lands


@pytest.mark.slow
def test_other_units_answer_files_cannot_be_written(site: dict[str, Any], tmp_path: Path) -> None:
    options = ["--seeds", "2", "--max-concurrency", "4", "--agent-arg", f"key={KEY}"]
    sandboxed = rayeval_run(site, tmp_path / "s", "forge_neighbours", *options, evals=str(site["eval_file"]))
    victim = next(r for r in sandboxed if r["seed"] == 1)
    assert not victim["passed"] and victim["answer_json"] == json.dumps({"value": -1.0})
    unsandboxed = rayeval_run(
        site, tmp_path / "p", "forge_neighbours", *options, "--isolation", "process", evals=str(site["eval_file"])
    )
    assert next(r for r in unsandboxed if r["seed"] == 1)["passed"]  # the control: the victim was overwritten


def test_returned_objects_are_never_unpickled(site: dict[str, Any], tmp_path: Path) -> None:
    marker = tmp_path / "unpickled-here"
    result = rayeval_run(
        site, tmp_path / "s", "hostile_object", "--agent-arg", f"marker={marker}", evals=str(site["eval_file"])
    )
    assert not marker.exists()
    (row,) = result
    assert not row["passed"] and isinstance(json.loads(row["answer_json"])["value"], str)


def test_staged_inputs_and_the_cache_cannot_be_poisoned(site: dict[str, Any], tmp_path: Path) -> None:
    source = site["evals"] / "data" / "input.txt"
    original = source.read_text()
    for isolation in ("sandbox", "process"):
        options = ["--isolation", isolation, "--agent-arg", f"cache={site['cache']}"]
        (attacker,) = rayeval_run(
            site, tmp_path / f"{isolation}-1", "poison_inputs", *options, evals=str(site["eval_file"])
        )
        outcomes = attack(attacker)["outcomes"]
        if isolation == "sandbox":
            assert outcomes and all(outcome != "rewritten" for outcome in outcomes.values()), outcomes
        # a later run: its first unit attacks again, its second reads what it is given
        later = rayeval_run(
            site,
            tmp_path / f"{isolation}-2",
            "poison_inputs",
            "--seeds",
            "2",
            "--max-concurrency",
            "1",
            *options,
            evals=str(site["eval_file"]),
        )
        reader = next(r for r in later if r["seed"] == 2)
        assert attack(reader)["content"] == original
        assert source.read_text() == original


@pytest.mark.slow  # fault injection: run with -m slow, as CI does
def test_nothing_an_agent_starts_outlives_its_unit(site: dict[str, Any], tmp_path: Path) -> None:
    with Pings.serving() as pings:
        options = ["--timeout", "4", "--agent-arg", f"port={pings.port}"]
        (row,) = rayeval_run(site, tmp_path / "s", "outlive", *options, evals=str(site["eval_file"]))
        assert row["status"] == "timeout"
        assert sum(pings.pings_after().values()) == 0
        rayeval_run(site, tmp_path / "p", "outlive", *options, "--isolation", "process", evals=str(site["eval_file"]))
        try:  # the control: without a namespace, a new session escapes
            assert set(pings.pings_after()) == {"session", "double"}
        finally:
            pings.kill("session")
            pings.kill("double")


@pytest.mark.parametrize("isolation", ["sandbox", pytest.param("process", marks=pytest.mark.slow)])
# one attack of each kind in the default run, the others (fault injection, slow) in CI's -m slow
@pytest.mark.parametrize(
    "how", ["frames", *(pytest.param(how, marks=pytest.mark.slow) for how in ("shutdown", "child"))]
)
def test_a_unit_that_tells_the_worker_it_is_over_is_ended(
    site: dict[str, Any], tmp_path: Path, how: str, isolation: str
) -> None:
    """The agent holds its unit's socket: forged frames of a result and an exit status end the
    worker's wait while the agent runs on (the socket shut down did too, before the unit ran
    on to its deadline); a child left behind at a normal return outlives its unit unless
    something ends it. What runs on could rewrite the answers of the next unit given the same
    (empty, reused) work folder, and outlive the run. Nothing may run on. (The eval has no data node: a data folder would keep the folder from
    being reused.)"""
    body = json.loads(site["eval_file"].read_text())
    del body["data_node"]
    eval_file = tmp_path / "evals" / "alpha.json"
    eval_file.parent.mkdir()
    eval_file.write_text(json.dumps(body))
    with Pings.serving() as pings:
        tag = f"{how}-{isolation}"
        # a unit whose socket is shut down runs on to its deadline: a short one
        timeout = "10" if how == "shutdown" else "60"
        options = ["--isolation", isolation, "--timeout", timeout, "--seeds", "2", "--max-concurrency", "1"]
        for arg in (f"port={pings.port}", f"how={how}", f"tag={tag}", f"key={KEY}"):
            options += ["--agent-arg", arg]
        stored = rayeval_run(site, tmp_path / tag, "end_early", *options, evals=str(eval_file))
        attacker, victim = sorted(stored, key=lambda row: row["seed"])
        assert pings.counts[tag] > 0, (tag, attacker["error_message"])  # it ran before the unit ended
        assert attacker["status"] == ("timeout" if how == "shutdown" else "failed"), attacker["error_message"]
        assert not victim["passed"] and victim["answer_json"] == json.dumps({"value": -1.0}), tag
        try:
            assert sum(pings.pings_after().values()) == 0, tag
        finally:
            pings.kill(tag)


STRETCH_TIMEOUT_S = 4
#: what a unit may take past its deadline, to be killed and reaped: a hang guard, far below
#: what each attack would take (another timeout at least, 30 s and more for most)
KILL_SLACK_S = 2


@pytest.mark.parametrize("isolation", ["sandbox", pytest.param("process", marks=pytest.mark.slow)])
@pytest.mark.parametrize(
    "how",
    [
        "body",
        *(pytest.param(how, marks=pytest.mark.slow) for how in ("header", "promise", "half_close", "late_result")),
    ],
)
def test_a_unit_ends_at_its_deadline_whatever_its_agent_sends(
    site: dict[str, Any], tmp_path: Path, how: str, isolation: str
) -> None:
    """The agent holds its unit's socket to the worker: bytes trickled slowly, a frame never
    finished, the socket half-closed, a result whose last byte comes late. Against a worker
    that renews its timeout per read, each held the unit another timeout (most of them 30 s or
    more) past its deadline, returned a result completed after it, or ended a unit still
    running as a crash. The unit must end at its deadline as a timeout, and free its slot for
    the next unit (seed 2, which answers the key)."""
    options = ["--isolation", isolation, "--timeout", str(STRETCH_TIMEOUT_S), "--seeds", "2"]
    options += ["--max-concurrency", "1", "--agent-arg", f"how={how}", "--agent-arg", f"key={KEY}"]
    stored = rayeval_run(site, tmp_path / "s", "stretch", *options, evals=str(site["eval_file"]))
    attacker, after = sorted(stored, key=lambda row: row["seed"])
    assert (attacker["status"], attacker["error_type"]) == ("timeout", "Timeout"), attacker["error_message"]
    assert attacker["agent_s"] < STRETCH_TIMEOUT_S + KILL_SLACK_S, attacker["agent_s"]
    assert after["passed"], after["error_message"]


def test_the_write_ahead_log_of_an_s3_root_is_out_of_sight(
    site: dict[str, Any], s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """With an S3 results root the rows wait in a write-ahead log on the driver's machine, in
    the user's cache folder (``$XDG_CACHE_HOME`` when set): rows of failed units hold the
    expected values. (Outside the temp folder, private in every unit anyway.)"""
    cache = Path(tempfile.mkdtemp(prefix="rayeval-xdg-", dir="/var/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(cache))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))  # the driver's: this process
    wal = cache / "rayeval" / "wal"
    options = ["--seeds", "2", "--max-concurrency", "1", "--agent-arg", f"folder={wal}"]
    options += ["--s3-endpoint", s3_bucket.endpoint_url]
    argv = ["run", str(site["eval_file"]), "--agent", f"{AGENTS}:read_rows", "--output", s3_bucket.uri("results")]
    assert rayeval_main([*argv, "--no-progress", "--retries", "0", *options]) == 0
    stored = ResultStore(s3_bucket.uri("results"), s3_endpoint_url=s3_bucket.endpoint_url).read_table().to_pylist()
    reader = next(row for row in stored if row["seed"] == 2)
    seen = json.loads(reader["metadata_json"])["attack"]
    assert not reader["passed"] and seen["looked"] == 0, seen
    assert wal.is_dir()  # where the rows waited


def test_the_repository_of_an_evals_folder_is_out_of_sight(site: dict[str, Any], tmp_path: Path) -> None:
    """Evals kept in git: the repository's object store holds a copy of every eval file
    committed, outside the evals folder; evals in a worktree of it name that store in their
    ``.git`` file. (Outside the temp folder, private in every unit.)"""
    repo = Path(tempfile.mkdtemp(prefix="rayeval-repo-", dir="/var/tmp"))
    worktree = repo.with_name(repo.name + "-worktree")
    try:
        (repo / "evals" / "data").mkdir(parents=True)
        shutil.copy(site["eval_file"], repo / "evals" / "alpha.json")
        shutil.copy(site["evals"] / "data" / "input.txt", repo / "evals" / "data" / "input.txt")
        commands = (["init", "-q"], ["add", "evals"], ["commit", "-q", "-m", "evals"], ["worktree", "add", "-q"])
        for command in commands:
            git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), *command]
            subprocess.run(git + ([str(worktree)] if command[0] == "worktree" else []), check=True, capture_output=True)
        options = ["--agent-arg", f"repo={repo}"]
        for evals in (repo / "evals", worktree / "evals"):
            (row,) = rayeval_run(site, tmp_path / evals.parent.name, "search_repository", *options, evals=str(evals))
            assert not row["passed"] and attack(row)["looked"] == 0, (evals, attack(row))
        (control,) = rayeval_run(
            site, tmp_path / "p", "search_repository", *options, "--isolation", "process", evals=str(worktree / "evals")
        )
        assert control["passed"]  # without the sandbox the key is in reach
    finally:
        shutil.rmtree(repo)
        shutil.rmtree(worktree, ignore_errors=True)


def test_a_work_folder_too_deep_to_walk_is_removed(site: dict[str, Any], tmp_path: Path) -> None:
    """A recursive walk of the folder an agent left raises (RecursionError) in the worker: the
    unit must still be graded, and its folder removed."""
    options = ["--run-id", "deep", "--agent-arg", "depth=5000"]
    (row,) = rayeval_run(site, tmp_path / "s", "deep_folders", *options, evals=str(site["eval_file"]))
    assert row["status"] == "failed" and attack(row)["depth"] == 5000, (row["error_type"], row["error_message"])
    left = [folder for folder in site["base"].glob("work/*/*/deep") if any(folder.iterdir())]
    assert not left, left


def test_answers_nested_too_deep_for_trusted_code_are_errors(site: dict[str, Any], tmp_path: Path) -> None:
    """Trusted code walks answers and metadata (the module's environment holds a secret, so
    every row is masked): one nested 500 deep must be its unit's error, not the worker's."""
    options = ["--seeds", "4", "--max-concurrency", "4", "--agent-arg", f"key={KEY}"]
    stored = rayeval_run(site, tmp_path / "s", "nested_answers", *options, evals=str(site["eval_file"]))
    by_seed = {row["seed"]: row for row in stored}
    for seed in (1, 2, 3):
        assert by_seed[seed]["error_type"] == "AnswerTooDeep", (
            by_seed[seed]["error_type"],
            by_seed[seed]["error_message"],
        )
    assert by_seed[4]["passed"]  # nested within the bound: graded as any answer


def test_hidden_folders_cannot_be_uncovered(site: dict[str, Any], tmp_path: Path) -> None:
    result = rayeval_run(
        site, tmp_path / "s", "escape_mounts", "--agent-arg", f"hidden={site['evals']}", evals=str(site["eval_file"])
    )
    (row,) = result
    seen = attack(row)
    assert not row["passed"] and not seen["escaped"] and seen["looked"] == 0, seen
    assert not Path("/usr/rayeval-escape").exists()


@pytest.mark.slow  # fault injection: run with -m slow, as CI does
def test_exhausting_resources_is_confined_to_the_unit(site: dict[str, Any], tmp_path: Path) -> None:
    limits = [
        "--limit-processes",
        "64",
        "--limit-memory-mb",
        "1024",
        "--limit-file-size-mb",
        "64",
        "--limit-output-mb",
        "1",
    ]
    found = {}
    for kind in ("fork", "memory", "file", "answer"):
        (row,) = rayeval_run(
            site,
            tmp_path / kind,
            "exhaust",
            *limits,
            "--agent-arg",
            f"kind={kind}",
            "--timeout",
            "60",
            evals=str(site["eval_file"]),
        )
        found[kind] = row
    assert attack(found["fork"])["children"] < 64 and attack(found["fork"])["stopped"]
    memory = found["memory"]  # a control group kills the unit, an rlimit fails the allocation
    assert memory["error_type"] == "OutOfMemory" or attack(memory)["stopped"] == "MemoryError", memory
    assert memory["error_type"] == "OutOfMemory" or attack(memory)["allocated_mb"] <= 1024
    assert attack(found["file"])["written_mb"] <= 64 and attack(found["file"])["stopped"]
    assert found["answer"]["status"] == "error" and found["answer"]["error_type"] == "AnswerTooLarge"


def test_an_agent_signalling_every_process_ends_only_its_own(site: dict[str, Any], tmp_path: Path) -> None:
    (row,) = rayeval_run(site, tmp_path / "s", "kill_everything", evals=str(site["eval_file"]))
    seen = attack(row) if row["status"] != "error" else {}
    assert row["status"] == "error" or seen.get("visible", 99) <= 20  # it died with its namespace
    (honest,) = rayeval_run(
        site, tmp_path / "after", "honest", "--agent-arg", f"value={KEY}", evals=str(site["eval_file"])
    )
    assert honest["passed"]


def test_links_out_of_the_work_folder_are_not_followed(site: dict[str, Any], tmp_path: Path) -> None:
    options = ["--agent-arg", f"eval_file={site['eval_file']}"]
    for isolation in ("sandbox", "process"):
        (row,) = rayeval_run(
            site, tmp_path / isolation, "symlinks", "--isolation", isolation, *options, evals=str(site["eval_file"])
        )
        assert not row["passed"] and row["answer_json"] is None
        assert MARKER not in json.dumps(row, default=str), row
        assert not (row["artifacts_json"] or "").count("attack_alpha")


@pytest.mark.slow
def test_the_ray_control_plane_is_out_of_reach(site: dict[str, Any], tmp_path: Path) -> None:
    address = ray.get_runtime_context().gcs_address
    options = [
        "--agent-arg",
        f"address={address}",
        "--agent-arg",
        f"evals={site['evals']}",
        "--agent-arg",
        "join_s=10",  # the control joins in 1-2 s; the sandboxed join would fail after 20 s
        "--timeout",
        "90",
    ]
    (row,) = rayeval_run(site, tmp_path / "s", "control_plane", *options, evals=str(site["eval_file"]))
    assert not row["passed"] and not attack(row)["joined"], attack(row)
    (control,) = rayeval_run(
        site, tmp_path / "p", "control_plane", *options, "--isolation", "process", evals=str(site["eval_file"])
    )
    assert control["passed"], attack(control)  # without the sandbox: the token is in reach, the cluster runs its code


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from loopback"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_an_honest_agent_has_what_it_needs(site: dict[str, Any], tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        (row,) = rayeval_run(
            site,
            tmp_path / "s",
            "honest",
            "--agent-arg",
            f"value={KEY}",
            "--agent-arg",
            f"url={url}",
            evals=str(site["eval_file"]),
        )
    finally:
        server.shutdown()
        server.server_close()
    seen = json.loads(row["metadata_json"])["seen"]
    assert row["passed"] and row["isolation"] == "sandbox"
    assert seen["input_sha256"] is not None and seen["echo"] == "from-a-subprocess\n42\n"
    assert seen["served"] == "hello from loopback" and seen["tmp"] == "tmp works"


def test_with_the_network_off_only_loopback_remains(site: dict[str, Any], tmp_path: Path) -> None:
    host = socket.gethostbyname(socket.gethostname())
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        result = rayeval_run(
            site,
            tmp_path / "s",
            "honest",
            "--network",
            "none",
            "--agent-arg",
            f"url={url}",
            evals=str(site["eval_file"]),
        )
    finally:
        server.shutdown()
        server.server_close()
    (row,) = result
    assert row["status"] == "error" and "URLError" in (row["error_type"] or "") + (row["error_message"] or ""), (
        host,
        row["error_message"],
    )


@pytest.mark.slow
def test_an_evals_folder_outside_the_temp_folder_is_hidden(site: dict[str, Any], tmp_path: Path) -> None:
    """The evals above live under /tmp, private in every unit anyway: these do not."""
    evals = Path(tempfile.mkdtemp(prefix="rayeval-attack-", dir="/var/tmp"))
    try:
        shutil.copy(site["eval_file"], evals / "alpha.json")
        (evals / "data").mkdir()
        shutil.copy(site["evals"] / "data" / "input.txt", evals / "data" / "input.txt")
        options = ["--agent-arg", f"folder={evals}"]
        (row,) = rayeval_run(site, tmp_path / "s", "search_folder", *options, evals=str(evals))
        assert not row["passed"] and attack(row)["looked"] == 0, attack(row)
        (control,) = rayeval_run(
            site, tmp_path / "p", "search_folder", *options, "--isolation", "process", evals=str(evals)
        )
        assert control["passed"]  # without the sandbox the key is in reach
    finally:
        shutil.rmtree(evals)


def test_the_folder_ray_spills_objects_to_is_hidden(site: dict[str, Any], tmp_path: Path) -> None:
    """Objects spilled from a full object store (the run's evals, keys included) land in the
    folder the raylet was given, which may lie outside Ray's temp folder."""
    spilled = site["spill"] / "ray_spilled_objects_node"
    spilled.mkdir(exist_ok=True)
    shutil.copy(site["eval_file"], spilled / "object.json")  # a spilled eval, as an agent would find it
    options = ["--agent-arg", f"folder={site['spill']}"]
    sandboxed = rayeval_run(site, tmp_path / "s", "search_folder", *options)
    assert all(not row["passed"] and attack(row)["looked"] == 0 for row in sandboxed), [attack(r) for r in sandboxed]
    control = rayeval_run(site, tmp_path / "p", "search_folder", *options, "--isolation", "process")
    assert all(row["passed"] for row in control)  # without the sandbox the key is in reach


def test_every_folder_a_raylet_may_spill_to_is_read_from_its_flags() -> None:
    def config_list(spilling: Any) -> str:
        return base64.b64encode(json.dumps({"object_spilling_config": json.dumps(spilling)}).encode()).decode()

    several = {"type": "filesystem", "params": {"directory_path": ["/var/a", "/var/b"]}}
    assert spill_folders(config_list(several)) == ["/var/a", "/var/b"]
    assert spill_folders(config_list({"type": "filesystem", "params": {"directory_path": "/var/a"}})) == ["/var/a"]
    assert spill_folders(config_list({"type": "smart_open", "params": {"uri": "s3://b/x"}})) == []
    assert spill_folders("not base64 JSON") == [] and spill_folders(config_list(None)) == []


def test_hostile_answers_are_confined_to_their_own_units(site: dict[str, Any], tmp_path: Path) -> None:
    result = rayeval_run(
        site,
        tmp_path / "s",
        "hostile_answers",
        "--seeds",
        "7",
        "--max-concurrency",
        "7",
        "--agent-arg",
        f"key={KEY}",
        evals=str(site["eval_file"]),
    )
    by_seed = {row["seed"]: row for row in result}
    assert len(by_seed) == 7 and by_seed[7]["passed"]  # the honest unit beside them is untouched
    for seed in (1, 2, 4, 5, 6):
        row = by_seed[seed]
        assert row["status"] == "error" and row["error_message"], row
    assert by_seed[3]["status"] == "failed" and json.loads(by_seed[3]["answer_json"])["other"] == float("inf")
    assert by_seed[1]["error_type"] == "UnsendableResult"  # an integer no JSON reader takes
    assert by_seed[2]["error_type"] == "BadAgentResult"  # text that is not Unicode
    assert by_seed[4]["error_type"] == "UnsendableResult"  # nesting beyond any parser
    assert by_seed[5]["error_type"] == "AnswerTooLarge"
    assert by_seed[6]["error_type"] == "AnswerTooLarge" and len(by_seed[6]["artifacts_json"] or "") < 3 << 20
