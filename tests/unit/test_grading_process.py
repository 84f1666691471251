"""Grading in a process of its own: exact results, a time limit, crashes, no credentials."""

from __future__ import annotations

import importlib
import json
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
from types import ModuleType
from typing import Any

import pytest
from pydantic import ValidationError

from rayeval.evals import Eval
from rayeval.graders import GRADER_REGISTRY, Grader, GraderResult, register_grader
from rayeval.sandbox.units import BASE_ENV_NAMES
from rayeval.unit import EvalResult, grade, grading_process
from rayeval.unit.execution import grade_execution
from rayeval.unit.grading import RESULT_FIELDS, graded_request
from rayeval.unit.grading_process import (
    GradingCrashed,
    GradingRefused,
    GradingTimeout,
    eval_graders,
    grade_bounded,
    judge_requests_bounded,
    prestart_grading,
    verdict_of,
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


def gone(pid: int) -> bool:
    """Whether the process has ended (a zombie nobody reaped counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def children(pid: int) -> list[int]:
    """The processes ``pid`` started that still run."""
    try:
        listed = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return []
    return [int(child) for child in listed if not gone(int(child))]


def runner_pid() -> int:
    process = grading_process._grading_runner()._process
    assert process is not None
    return process.pid


def wait_until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


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


def graded_as_a_process_does(eval_: Eval, answer: Any, **extra: Any) -> dict[str, Any]:
    """A grading process's reply, made in this process: the same JSON text both ways."""
    graders = eval_graders(eval_)
    assert graders is not None
    request = json.dumps({**graders._asdict(), "answer": answer, **extra})  # code_modules: ignored there
    return json.loads(graded_request({"request": request}, Path(".")))


def test_results_equal_in_process_over_the_conformance_vectors() -> None:
    cases = conformance_evals()
    assert len(cases) > len(VECTORS)
    for case_id, eval_, answer in cases:  # every vector through the request's JSON both ways
        assert same_result(verdict_of(graded_as_a_process_does(eval_, answer), answer), grade(eval_, answer)), case_id
    one_of_each_type = {eval_.grader_specs[0].type: (case_id, eval_, answer) for case_id, eval_, answer in cases}
    for case_id, eval_, answer in one_of_each_type.values():  # and through a grading process
        assert same_result(grade_bounded(eval_, answer, 30), grade(eval_, answer)), case_id


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
def test_awkward_answers_come_back_exactly(answer: Any) -> None:
    for spec in (MC, {"type": "numeric_tolerance", "config": {"ground_truth": {"x": 1, "y": 2, "z": 3}}}):
        eval_ = make(grader=spec)
        assert same_result(grade_bounded(eval_, answer, 30), grade(eval_, answer))


def test_judge_requests_are_collected_in_a_grading_process() -> None:
    criteria = [{"description": "says why", "score_delta": 1}]
    rubric = make(grader={"type": "rubric", "config": {"answer_field": "why", "criteria": criteria}})
    requests = judge_requests_bounded(rubric, {"why": "\ud800 because"}, 30)
    assert (
        requests and requests == graded_as_a_process_does(rubric, {"why": "\ud800 because"}, collect=True)["requests"]
    )


def test_a_slow_grading_times_out_and_the_next_one_works() -> None:
    slow = make(grader={"type": "longest_subsequence", "config": SLOW_CONFIG})
    assert grade_execution(slow, execution({"steps": [["step 0"]]}), grade_timeout=1).status == "failed"
    start = time.monotonic()
    result = grade_execution(slow, execution(SLOW_ANSWER), grade_timeout=1)
    assert time.monotonic() - start < 20  # stopped: unbounded, this grading takes about 30 s
    assert result.status == "timeout" and result.passed is False and result.grader_result is None
    assert result.error_type == "GradingTimeout"
    assert result.error_message == "grading took longer than 1 s and was stopped"
    assert 1 <= result.grade_s < 20
    assert children(runner_pid()) == []  # the grading's CPU stopped with its process
    after = grade_execution(slow, execution({"steps": [[f"step {i}"] for i in range(300)]}), grade_timeout=1)
    assert after.status == "passed" and after.grader_result.score == 1.0


def test_a_grading_process_killed_mid_grading_gives_an_error_and_the_next_one_works() -> None:
    slow = make(grader={"type": "longest_subsequence", "config": SLOW_CONFIG})
    grade_bounded(make(grader=MC), {"answer": "B"})
    runner = runner_pid()
    results: list = []
    grading = threading.Thread(
        target=lambda: results.append(grade_execution(slow, execution(SLOW_ANSWER), grade_timeout=60))
    )
    grading.start()
    wait_until(lambda: children(runner))
    time.sleep(0.2)  # the answer is being graded
    os.kill(children(runner)[0], signal.SIGKILL)
    grading.join(10)
    (result,) = results
    assert result.status == "error" and result.error_type == "GradingCrashed"
    assert result.error_message.startswith("the grading process died: ") and "signal 9" in result.error_message
    assert grade_execution(make(grader=MC), execution({"answer": "B"})).status == "passed"
    assert runner_pid() == runner  # the runner serves on


def test_concurrent_gradings_each_give_the_verdict_graded_here() -> None:
    cases = [(eval_, answer) for _, eval_, answer in conformance_evals()[:96]]
    failures: list[str] = []

    def work(offset: int) -> None:
        for eval_, answer in cases[offset : offset + 12]:
            if not same_result(grade_bounded(eval_, answer, 30), grade(eval_, answer)):
                failures.append(eval_.content_hash())

    threads = [threading.Thread(target=work, args=(i * 12,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_prestarting_starts_the_runner_that_serves_the_first_gradings() -> None:
    grading_process._grading_runner().close()
    prestart_grading([make(grader=MC)])
    started = runner_pid()
    assert grade_bounded(make(grader=MC), {"answer": "B"}, 30).passed
    assert runner_pid() == started


def test_evals_graded_here_prestart_no_runner() -> None:
    @register_grader("test_prestart_local")
    class Local(Grader):
        def _evaluate(self, answer: Any, config: Any) -> GraderResult:
            return GraderResult(passed=True, score=1.0)

    try:
        grading_process._grading_runner().close()
        prestart_grading([make(grader={"type": "test_prestart_local", "config": {}})])
        assert grading_process._grading_runner()._process is None
    finally:
        GRADER_REGISTRY.unregister("test_prestart_local")


def test_an_oversized_request_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grading_process, "MAX_REQUEST_BYTES", 10_000)
    with pytest.raises(GradingRefused, match="over the grading limit of 10000 bytes"):
        grade_bounded(make(grader=MC), {"answer": "B" * 50_000}, 30)
    assert grade_bounded(make(grader=MC), {"answer": "B"}, 30).passed


def test_a_large_answer_is_graded() -> None:
    eval_ = make(grader=MC)
    answer = {"answer": "B", "padding": ['"\\' * 500] * 10_000}  # 10 MB, every character escaped
    assert same_result(grade_bounded(eval_, answer, 30), grade(eval_, answer))


def test_the_answer_is_not_sent_back_to_the_caller_which_has_it() -> None:
    """A verdict's ``agent_answer`` that is the answer graded is not in the grading's reply (the
    caller decodes no second copy of a hostile answer): the caller sets it from the answer it sent."""
    answer = {"answer": "B", "padding": ["x" * 10] * 1000}
    reply = graded_as_a_process_does(make(grader=MC), answer)
    assert reply["result"]["agent_answer"] is None and "x" * 10 not in json.dumps(reply)
    assert verdict_of(reply, answer).agent_answer == answer
    assert same_result(grade_bounded(make(grader=MC), answer, 30), grade(make(grader=MC), answer))


def environment(call: dict[str, Any], work_dir: Path) -> dict[str, str]:
    """A grading process's entry in the next test: what it finds in its environment."""
    return dict(os.environ)


def test_a_grading_process_environment_holds_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_API_KEY", "sk-not-for-graders")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-not-for-graders")
    runner = grading_process._grading_runner()
    work_dir = Path(runner.work_root) / "environment"
    work_dir.mkdir(exist_ok=True)
    outcome = runner.run(runner.spec(f"{__name__}:environment", {}, work_dir, []), 30)
    assert outcome.kind == "returned"
    set_by_this_module = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_USAGE_STATS_ENABLED"}  # tests.conftest
    assert set(outcome.value) - {"HOME", "TMPDIR"} - set_by_this_module <= set(BASE_ENV_NAMES)
    assert "sk-not-for-graders" not in json.dumps(outcome.value)
    assert set(Path(f"/proc/{runner_pid()}/environ").read_bytes().decode().split("\0")) <= {
        "",
        f"PATH={os.environ['PATH']}",
    }


def test_evals_with_graders_the_grading_process_lacks_are_graded_here() -> None:
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


@pytest.fixture
def plugin_graders() -> Iterator[ModuleType]:
    """The plug-in grader types of ``tests.unit.plugin_graders``, registered for one test."""
    plugin_graders = importlib.import_module("tests.unit.plugin_graders")  # imported afresh: registered
    yield plugin_graders
    for kind in ("test_plugin_regex", "test_plugin_later"):
        if kind in GRADER_REGISTRY:
            GRADER_REGISTRY.unregister(kind)
        grading_process._unregistered.discard(kind)
    sys.modules.pop(plugin_graders.__name__)


def test_a_plugin_grader_is_graded_in_a_grading_process_under_the_time_limit(plugin_graders: ModuleType) -> None:
    eval_ = make(grader={"type": "test_plugin_regex", "config": {"pattern": "(a+)+b"}})
    assert eval_graders(eval_).plugins == {"test_plugin_regex": "tests.unit.plugin_graders:PatternMatch"}
    honest = grade_bounded(eval_, {"text": "aaab"}, 30)
    assert honest.passed and honest.reasoning != f"pid {os.getpid()}"
    start = time.monotonic()
    with pytest.raises(GradingTimeout):  # unbounded, about a minute
        grade_bounded(eval_, {"text": "a" * 30}, 1)
    assert time.monotonic() - start < 10


def test_an_installed_plugin_grader_is_graded_in_a_grading_process(install_plugin: Any) -> None:
    source = (
        "import os\n"
        "from rayeval.graders import Grader, GraderResult\n"
        "class Elsewhere(Grader):\n"
        "    def _evaluate(self, answer, config):\n"
        "        return GraderResult(passed=True, score=1.0, reasoning=f'pid {os.getpid()}')\n"
        "plugin = Elsewhere\n"
    )
    install_plugin(GRADER_REGISTRY, "test_installed", "my_grading_plugin", source)
    nested = make(grader={"type": "all_of", "config": {"children": [{"type": "test_installed", "config": {}}]}})
    assert eval_graders(nested).plugins == {"test_installed": "my_grading_plugin:Elsewhere"}
    assert grade_bounded(nested, {}, 30).passed
    result = grade_bounded(make(grader={"type": "test_installed", "config": {}}), {}, 30)
    assert result.passed and result.reasoning.startswith("pid ") and result.reasoning != f"pid {os.getpid()}"


def test_entries_json_cannot_carry_go_pickled_their_code_imported_once(plugin_graders: ModuleType) -> None:
    """A library caller's entries holding its own code (as ``evaluations.run``'s hold its
    evaluators) are pickled to the grading process, whose runner imports that code's modules."""
    config = {"pattern": "a+b", "hook": plugin_graders.register_later}
    eval_ = make(grader={"type": "test_plugin_regex", "config": config})
    graders = eval_graders(eval_)
    assert graders.specs is None and graders.pickled and graders.callers_code
    assert graders.modules == ("tests.unit.plugin_graders",)
    result = grade_bounded(eval_, {"text": "aab"}, 30)
    assert result.passed and result.reasoning != f"pid {os.getpid()}"
    assert "tests.unit.plugin_graders" in grading_process._grading_runner(graders.modules).config.preload
    with pytest.raises(GradingTimeout):
        grade_bounded(
            make(grader={"type": "test_plugin_regex", "config": {**config, "pattern": "(a+)+b"}}), {"text": "a" * 30}, 1
        )


def test_the_time_its_runner_takes_to_import_a_plugin_is_not_the_gradings() -> None:
    """The runner imports a plug-in's module once, as it starts: the first grading's time
    limit runs from its own process's start, not from the runner's."""
    importlib.import_module("tests.unit.slow_import_graders")
    try:
        assert grade_bounded(make(grader={"type": "test_slow_import", "config": {}}), {}, 1).passed
    finally:
        GRADER_REGISTRY.unregister("test_slow_import")
        sys.modules.pop("tests.unit.slow_import_graders")


def test_a_plugin_its_module_does_not_register_is_graded_here(plugin_graders: ModuleType) -> None:
    plugin_graders.register_later()
    eval_ = make(grader={"type": "test_plugin_later", "config": {}})
    assert eval_graders(eval_) is not None
    assert grade_bounded(eval_, {}, 30).reasoning == f"pid {os.getpid()}"
    assert eval_graders(eval_) is None  # and from now on


def test_unsendable_answers_are_refused() -> None:
    with pytest.raises(GradingRefused, match="cannot be sent to grading as JSON"):
        grade_bounded(make(grader=MC), {"answer": 10**5000}, 30)


def test_a_reply_that_is_no_verdict_is_refused() -> None:
    with pytest.raises(GradingRefused, match="sent no JSON reply"):
        grading_process._reply(grading_process.Outcome(kind="returned", value="[1"), 30)
    with pytest.raises(GradingRefused, match="sent no whole verdict"):
        verdict_of({"result": {"passed": True}}, None)


def test_grading_processes_end_with_their_caller() -> None:
    """At exit the runner is closed and its folder removed; a caller killed mid-grading leaves
    no grading running."""
    script = textwrap.dedent(
        """
        import sys, threading, time
        from rayeval.evals import Eval
        from rayeval.unit import grading_process
        truth = [[f"step {i}"] for i in range(3000)]
        slow = Eval.model_validate({"id": "g", "task": "t", "grader": {"type": "longest_subsequence", "config": {"answer_field": "steps", "ground_truth": truth}}})
        grading_process.grade_bounded(slow, {"steps": []}, 30)
        runner = grading_process._grading_runner()._process.pid
        if sys.argv[1] == "hang":
            threading.Thread(target=grading_process.grade_bounded, args=(slow, {"steps": [["x"]] * 300_000}, 600)).start()
            time.sleep(1)
        print(runner, grading_process._root, flush=True)
        if sys.argv[1] == "hang":
            threading.Event().wait()
        """
    )
    finished = subprocess.run(
        [sys.executable, "-c", script, "exit"], check=False, capture_output=True, text=True, timeout=60
    )
    assert finished.returncode == 0, finished.stderr
    exited_runner, folder = finished.stdout.split()
    wait_until(lambda: gone(int(exited_runner)), seconds=3)
    assert not Path(folder).exists()  # the gradings' folder went with them

    hanging = subprocess.Popen([sys.executable, "-c", script, "hang"], stdout=subprocess.PIPE, text=True)
    try:
        runner = int(hanging.stdout.readline().split()[0])
        wait_until(lambda: children(runner), seconds=30)  # it is grading (for about a minute)
        (grading,) = children(runner)
    finally:
        hanging.kill()
        hanging.wait()
    wait_until(lambda: gone(runner) and gone(grading), seconds=3)


def test_grade_bounded_raises_on_timeout() -> None:
    with pytest.raises(GradingTimeout, match="longer than 0.2 s"):
        grade_bounded(make(grader={"type": "longest_subsequence", "config": SLOW_CONFIG}), SLOW_ANSWER, 0.2)


def test_a_runner_that_cannot_start_is_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, spec: Any, timeout: float | None) -> Any:
        raise grading_process.SandboxError("no runner here")

    monkeypatch.setattr(grading_process.UnitRunner, "run", broken)
    with pytest.raises(GradingCrashed, match="could not be started: no runner here"):
        grade_bounded(make(grader=MC), {"answer": "B"}, 30)


def test_grading_in_process_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_runner() -> None:
        raise AssertionError("no grading process for an unbounded grading")

    monkeypatch.setattr(grading_process, "_grading_runner", no_runner)
    assert grade_execution(make(grader=MC), execution({"answer": "B"}), grade_timeout=None).status == "passed"
