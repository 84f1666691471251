"""Grading in a pool of subprocesses: exact results, a time limit, crashes and concurrency."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from rayeval.evals import Eval
from rayeval.graders import GRADER_REGISTRY, Grader, GraderResult, register_grader
from rayeval.unit import EvalResult, grade
from rayeval.unit.execution import grade_execution
from rayeval.unit.grading_pool import (
    RESULT_FIELDS,
    GradingPool,
    GradingRefused,
    GradingTimeout,
    eval_graders,
    grade_bounded,
    shared_pool,
)
from tests.conftest import read_jsonl, shared_path

VECTORS = read_jsonl(shared_path("conformance", "graders.jsonl"))
MC = {"type": "multiple_choice", "config": {"correct_answer": "B"}}
# longest_subsequence is O(steps * ground truth steps): seconds for this 2 MB answer.
SLOW_CONFIG = {"answer_field": "steps", "ground_truth": [[f"step {i}"] for i in range(300)]}
SLOW_ANSWER = {"steps": [["x"]] * 300_000}
STAMP = datetime(2026, 1, 1, tzinfo=timezone.utc)


def make(**fields: Any) -> Eval:
    return Eval.model_validate({"id": "g", "task": "t", **fields})


def execution(answer: Any) -> EvalResult:
    return EvalResult(eval_id="g", outcome="answered", agent_answer=answer, started_at=STAMP, finished_at=STAMP)


def identical(left: Any, right: Any) -> bool:
    """Equal, of the same types all the way down, NaN equal to NaN."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return list(left) == list(right) and all(identical(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)):
        return len(left) == len(right) and all(identical(a, b) for a, b in zip(left, right))
    if isinstance(left, float) and math.isnan(left):
        return math.isnan(right)
    return left == right and (not isinstance(left, float) or math.copysign(1, left) == math.copysign(1, right))


def same_result(left: GraderResult, right: GraderResult) -> bool:
    return all(identical(getattr(left, name), getattr(right, name)) for name in RESULT_FIELDS)


def server_pids(pool: GradingPool) -> set[int]:
    with pool._changed:
        return {server.process.pid for server in (*pool._idle, *pool._busy)}


def gone(pid: int) -> bool:
    """Whether the process has ended (a zombie nobody reaped counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


@pytest.fixture
def pool() -> Iterator[GradingPool]:
    pool = GradingPool(size=2)
    yield pool
    pool.close()


def conformance_evals() -> list[tuple[str, Eval, Any]]:
    """Every vector that can be an eval's grader, both as its ``grader`` and as a ``graders`` list."""
    cases = []
    for vector in VECTORS:
        spec = {"type": vector["type"], "config": vector["config"]}
        try:
            cases.append((vector["id"], make(grader=spec), vector["answer"]))
            cases.append((vector["id"] + "[list]", make(graders=[spec]), vector["answer"]))
        except ValidationError:  # a config that is not an object: no eval can hold it
            continue
    return cases


def test_results_equal_in_process_over_the_conformance_vectors(pool: GradingPool) -> None:
    cases = conformance_evals()
    assert len(cases) > len(VECTORS)
    for case_id, eval_, answer in cases:
        graders = eval_graders(eval_)
        assert graders is not None, case_id
        assert same_result(pool.grade(graders, answer, 30), grade(eval_, answer)), case_id


@pytest.mark.parametrize(
    "answer",
    [
        {"answer": "\ud800"},  # a lone surrogate
        {"answer": "\x00\n\u2028 é 😀"},
        {"answer": "B", "x": float("nan"), "y": float("inf"), "z": -0.0},
        {"x": 1e308, "y": 2, "z": 3, "big": 10**300},
        ["B"],
        None,
    ],
)
def test_awkward_answers_come_back_exactly(pool: GradingPool, answer: Any) -> None:
    for spec in (MC, {"type": "numeric_tolerance", "config": {"ground_truth": {"x": 1, "y": 2, "z": 3}}}):
        eval_ = make(grader=spec)
        assert same_result(pool.grade(eval_graders(eval_), answer, 30), grade(eval_, answer))


def test_a_slow_grading_times_out_and_the_next_one_works() -> None:
    slow = make(grader={"type": "longest_subsequence", "config": SLOW_CONFIG})
    assert grade_execution(slow, execution({"steps": [["step 0"]]}), grade_timeout=1).status == "failed"
    pids = server_pids(shared_pool())
    start = time.monotonic()
    result = grade_execution(slow, execution(SLOW_ANSWER), grade_timeout=1)
    assert time.monotonic() - start < 20  # stopped: unbounded, this grading takes about 30 s
    assert result.status == "timeout" and result.passed is False and result.grader_result is None
    assert result.error_type == "GradingTimeout"
    assert result.error_message == "grading took longer than 1 s and was stopped"
    assert 1 <= result.grade_s < 20
    assert any(gone(pid) for pid in pids)  # the grading's CPU stopped with its subprocess
    after = grade_execution(slow, execution({"steps": [[f"step {i}"] for i in range(300)]}), grade_timeout=1)
    assert after.status == "passed" and after.grader_result.score == 1.0


def test_a_subprocess_killed_mid_request_gives_an_error_and_the_pool_recovers() -> None:
    slow = make(grader={"type": "longest_subsequence", "config": SLOW_CONFIG})
    pool = shared_pool()
    results: list = []
    grading = threading.Thread(
        target=lambda: results.append(grade_execution(slow, execution(SLOW_ANSWER), grade_timeout=60))
    )
    grading.start()
    wait_until(lambda: pool._busy)
    (server,) = pool._busy
    time.sleep(0.2)  # the request is being graded
    os.kill(server.process.pid, signal.SIGKILL)
    grading.join(10)
    (result,) = results
    assert result.status == "error" and result.error_type == "GradingCrashed"
    assert result.error_message == "the grading subprocess died (killed by SIGKILL)"
    assert grade_execution(make(grader=MC), execution({"answer": "B"})).status == "passed"


def test_concurrent_gradings_share_at_most_size_subprocesses(pool: GradingPool) -> None:
    cases = [(eval_, answer) for _, eval_, answer in conformance_evals()[:200]]
    failures: list[str] = []
    pids: set[int] = set()

    def work(offset: int) -> None:
        for eval_, answer in cases[offset:] + cases[:offset]:
            if not same_result(pool.grade(eval_graders(eval_), answer, 30), grade(eval_, answer)):
                failures.append(eval_.content_hash())
            pids.update(server_pids(pool))

    threads = [threading.Thread(target=work, args=(i * 25,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    assert 1 <= len(pids) <= pool.size


def test_prestarted_subprocesses_serve_the_first_gradings() -> None:
    pool = GradingPool(size=3)
    try:
        pool.prestart(5)  # at most its size
        wait_until(lambda: len(pool._idle) == 3, seconds=60)
        started = server_pids(pool)
        eval_ = make(grader=MC)
        results: list[GraderResult] = []
        threads = [
            threading.Thread(target=lambda: results.append(pool.grade(eval_graders(eval_), {"answer": "B"}, 30)))
            for _ in range(6)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [result.passed for result in results] == [True] * 6
        assert server_pids(pool) == started  # none started on demand
        pool.prestart(3)  # a full pool starts none
        time.sleep(0.5)
        assert server_pids(pool) == started
    finally:
        pool.close()


def test_a_worker_of_one_unit_prestarts_one_subprocess() -> None:
    pool = GradingPool(size=4)
    try:
        pool.prestart(1)
        wait_until(lambda: len(pool._idle) == 1, seconds=60)
        time.sleep(0.5)
        assert len(server_pids(pool)) == 1
    finally:
        pool.close()


def test_a_pool_closed_while_prestarting_keeps_no_subprocess() -> None:
    pool = GradingPool(size=2)
    before = set(_grading_servers())
    pool.prestart(2)
    pool.close()
    wait_until(lambda: pool._starting == 0, seconds=60)
    assert not server_pids(pool)
    wait_until(lambda: set(_grading_servers()) <= before, seconds=10)


def _grading_servers() -> list[int]:
    """This process's grading subprocesses still running."""
    children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
    return [
        int(pid)
        for pid in children
        if not gone(int(pid)) and b"rayeval.unit.grading_server" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]


def test_an_oversized_request_is_refused_and_the_subprocess_serves_on() -> None:
    pool = GradingPool(size=1, max_request_bytes=10_000)
    try:
        graders = eval_graders(make(grader=MC))
        with pytest.raises(GradingRefused, match="over the grading limit of 10000 bytes"):
            pool.grade(graders, {"answer": "B" * 50_000}, 30)
        pids = server_pids(pool)
        assert pool.grade(graders, {"answer": "B"}, 30).passed
        assert server_pids(pool) == pids
    finally:
        pool.close()


def test_a_large_answer_is_graded(pool: GradingPool) -> None:
    eval_ = make(grader=MC)
    answer = {"answer": "B", "padding": ["x" * 1000] * 10_000}  # 10 MB
    assert same_result(pool.grade(eval_graders(eval_), answer, 30), grade(eval_, answer))


def test_the_subprocess_environment_holds_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_API_KEY", "sk-not-for-graders")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-not-for-graders")
    pool = GradingPool(size=1)
    try:
        pool.grade(eval_graders(make(grader=MC)), {"answer": "B"}, 30)
        (pid,) = server_pids(pool)
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
        assert names <= {"PATH", "PYTHONPATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}
    finally:
        pool.close()
    assert gone(pid)


def test_evals_with_graders_a_fresh_interpreter_lacks_are_graded_here() -> None:
    @register_grader("test_pool_local")
    class Local(Grader):
        def _evaluate(self, answer: Any, config: Any) -> GraderResult:
            return GraderResult(passed=True, score=1.0, reasoning=f"pid {os.getpid()}")

    try:
        local = make(grader={"type": "test_pool_local", "config": {}})
        nested = make(grader={"type": "all_of", "config": {"children": [{"type": "test_pool_local", "config": {}}]}})
        assert eval_graders(local) is None and eval_graders(nested) is None
        assert grade_bounded(local, {}, 1).reasoning == f"pid {os.getpid()}"
        assert eval_graders(make(grader=MC)) is not None
    finally:
        GRADER_REGISTRY.unregister("test_pool_local")


def test_unsendable_answers_are_refused(pool: GradingPool) -> None:
    with pytest.raises(GradingRefused, match="cannot be sent to grading as JSON"):
        pool.grade(eval_graders(make(grader=MC)), {"answer": 10**5000}, 30)


def test_subprocesses_end_with_their_caller() -> None:
    """At exit the pool is closed; a caller killed mid-grading leaves no grading running."""
    script = textwrap.dedent(
        """
        import sys, threading
        from rayeval.evals import Eval
        from rayeval.unit.grading_pool import grade_bounded, shared_pool
        truth = [[f"step {i}"] for i in range(3000)]
        slow = Eval.model_validate({"id": "g", "task": "t", "grader": {"type": "longest_subsequence", "config": {"answer_field": "steps", "ground_truth": truth}}})
        grade_bounded(slow, {"steps": []}, 30)
        print(*[s.process.pid for s in shared_pool()._idle], flush=True)
        if sys.argv[1] == "hang":
            threading.Thread(target=grade_bounded, args=(slow, {"steps": [["x"]] * 300_000}, 600)).start()
            threading.Event().wait()
        """
    )
    finished = subprocess.run(
        [sys.executable, "-c", script, "exit"], capture_output=True, text=True, timeout=60, check=True
    )
    assert gone(int(finished.stdout))

    hanging = subprocess.Popen([sys.executable, "-c", script, "hang"], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(hanging.stdout.readline())
        wait_until(lambda: cpu_seconds(pid) > 1.5, seconds=30)  # it is grading (for about a minute)
    finally:
        hanging.kill()
        hanging.wait()
    wait_until(lambda: gone(pid), seconds=3)


def test_grade_bounded_raises_on_timeout() -> None:
    with pytest.raises(GradingTimeout, match="longer than 0.2 s"):
        grade_bounded(make(grader={"type": "longest_subsequence", "config": SLOW_CONFIG}), SLOW_ANSWER, 0.2)


def test_grading_in_process_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pool() -> None:
        raise AssertionError("no subprocess for an unbounded grading")

    monkeypatch.setattr("rayeval.unit.grading_pool.shared_pool", no_pool)
    assert grade_execution(make(grader=MC), execution({"answer": "B"}), grade_timeout=None).status == "passed"
