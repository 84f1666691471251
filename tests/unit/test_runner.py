"""EvalRunner end to end: every answer-delivery form, failures, timeouts, isolation, secrets.

Agents run in the sandbox unless a test says otherwise: they report what they saw through
their return value's metadata (``{"answer": ..., "metadata": {"seen": ...}}``), the only thing
that comes back from a sandboxed unit."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rayeval import EvalRunner, load_evals
from rayeval.batch.plan import plan_units
from rayeval.batch.rows import row_from_result
from rayeval.evals import Eval
from rayeval.gateway.unit import unit_model_variables
from rayeval.sandbox.config import SandboxConfig
from rayeval.sandbox.units import BASE_ENV_NAMES
from rayeval.storage import ResultStore
from tests.conftest import REPO
from tests.pings import Pings, pinger_code

MC_GRADER = {"type": "multiple_choice", "config": {"correct_answer": "B"}}
NUM_GRADER = {
    "type": "numeric_tolerance",
    "config": {"ground_truth": {"n_cells": 700}, "tolerances": {"n_cells": {"type": "absolute", "value": 0}}},
}


def make_eval(tmp_path: Path, grader: dict = NUM_GRADER, **extra) -> Path:
    data = tmp_path / "inputs" / "cells.csv"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text("cell,type\n" + "\n".join(f"c{i},T" for i in range(700)))
    path = tmp_path / "inputs" / "count.json"
    body = {
        "id": "count_cells",
        "task": 'How many cells? <EVAL_ANSWER>{"n_cells": <int>}</EVAL_ANSWER>',
        "data_node": "cells.csv",
        "grader": grader,
        **extra,
    }
    path.write_text(json.dumps(body))
    return path


@pytest.fixture
def runner(tmp_path: Path) -> EvalRunner:
    return EvalRunner(make_eval(tmp_path), work_root=tmp_path / "work", cache_dir=tmp_path / "cache")


def count_rows(work_dir: Path) -> int:
    return len((work_dir / "data" / "cells.csv").read_text().splitlines()) - 1


def seen_by(result) -> dict:
    """What the agent reported it saw (``metadata.seen`` of its envelope)."""
    assert "seen" in result.metadata, (result.status, result.error_type, result.error_message)
    return result.metadata["seen"]


def test_returned_dict_answer_is_graded(runner: EvalRunner) -> None:
    result = runner.run(lambda prompt, work_dir: {"n_cells": count_rows(work_dir)})
    assert result.status == "passed" and result.passed is True and result["passed"] is True
    assert result["test_id"] == "count_cells" == result.eval_id
    assert result["grader_result"].metrics["n_cells_actual"] == 700
    assert result.agent_answer == {"n_cells": 700}
    assert result.answer_source == "returned value"
    assert result.duration_s >= result.agent_s > 0 and result.grade_s >= 0
    # the run's own part (set by the runner, read by grading) is neither dumped nor a dict key
    assert result.outcome == "answered" and "outcome" not in result and result.get("outcome") is None
    assert set(result.model_dump()).isdisjoint({"outcome", "replayed", "model_usage"})


def test_envelope_with_metadata_is_unwrapped(runner: EvalRunner) -> None:
    """A sandboxed agent's metadata is kept; its cost and tokens are what the gateway counted
    (it made no model call), its turns no more than those calls, its own claims stay in the
    metadata, flagged."""
    claims = {"harness": "mine", "cost_usd": 0.25, "input_tokens": 900, "n_turns": 3}
    result = runner.run(lambda p, w: {"answer": {"n_cells": 700}, "metadata": claims})
    assert result.passed and result.metadata["cost_usd"] == 0.25 and result.metadata["n_turns"] == 3
    assert (result.harness, result.n_turns) == ("mine", 0)
    assert (result.cost_usd, result.input_tokens, result.n_model_calls) == (0.0, 0, 0)
    assert result.metadata["claims_differ_from_gateway"] == {
        "cost_usd": {"claimed": 0.25, "counted": 0.0},
        "input_tokens": {"claimed": 900, "counted": 0},
    }


def test_an_agent_run_in_the_worker_reports_its_own_usage(runner: EvalRunner) -> None:
    """Inline, no gateway stands between the agent and its models: its report is all there is."""
    claims = {"harness": "mine", "cost_usd": 0.25, "input_tokens": 900, "n_turns": 3}
    result = runner.run(lambda p, w: {"answer": {"n_cells": 700}, "metadata": claims}, isolation="inline")
    assert (result.harness, result.cost_usd, result.input_tokens, result.n_turns) == ("mine", 0.25, 900, 3)
    assert result.n_model_calls is None


@pytest.mark.parametrize(
    "garbage, cost",
    [
        (10**30, 1e30),
        (-(10**30), None),
        (-1, None),
        (float("inf"), None),
        (float("nan"), None),
        (10**400, None),
        ("12", None),
        (True, None),
    ],
)
def test_garbage_usage_numbers_are_not_lifted_and_the_row_still_stores(
    runner: EvalRunner, tmp_path: Path, garbage, cost
) -> None:
    """A count no int64 holds, a cost no total holds (NaN, infinite), a negative one or no number at all stays
    in metadata only: the typed fields must fit the Parquet schema, or the part holding that
    row could never be written, and every report and page sums and shows them."""
    metadata = {"input_tokens": garbage, "output_tokens": 5, "n_turns": garbage, "cost_usd": garbage}
    result = runner.run(lambda p, w: {"answer": {"n_cells": 700}, "metadata": metadata}, isolation="inline")
    assert result.passed and result.output_tokens == 5
    assert (result.input_tokens, result.n_turns, result.cost_usd) == (None, None, cost)
    unit = plan_units([runner.eval], ["m"], [1], "agent")[0]
    row = row_from_result(
        result, unit=unit, eval_=runner.eval, run_id="r", agent="agent", agent_args={}, attempt=1, node="n"
    )
    store = ResultStore(tmp_path / "results")
    store.write_rows("r", [row])
    assert store.read_table("r", columns=["input_tokens", "output_tokens"]).to_pylist() == [
        {"input_tokens": None, "output_tokens": 5}
    ]


def test_tagged_text_last_well_formed_answer_wins(runner: EvalRunner) -> None:
    text = 'first <EVAL_ANSWER>{"n_cells": 1}</EVAL_ANSWER> then <EVAL_ANSWER>{"n_cells": 700}</EVAL_ANSWER> and <EVAL_ANSWER>{broken</EVAL_ANSWER>'
    result = runner.run(lambda p, w: text)
    assert result.passed and result.answer_source == "returned <EVAL_ANSWER>"


def test_fenced_json_inside_tags_is_accepted(runner: EvalRunner) -> None:
    result = runner.run(lambda p, w: '<EVAL_ANSWER>\n```json\n{"n_cells": 700}\n```\n</EVAL_ANSWER>')
    assert result.passed


def test_answer_file_written_by_the_agent(runner: EvalRunner) -> None:
    def agent(prompt: str, work_dir: Path) -> None:
        (work_dir / "eval_answer.json").write_text(json.dumps({"n_cells": count_rows(work_dir)}))

    result = runner.run(agent)
    assert result.passed and result.answer_source == "eval_answer.json"


def test_answer_file_in_the_reference_agent_workspace_folder(runner: EvalRunner) -> None:
    """The reference looked in work_dir/agent_workspace/; files there are found too, after the
    work folder's own, and a file (not a folder) of that name is no obstacle."""

    def in_workspace(prompt: str, work_dir: Path) -> None:
        (work_dir / "agent_workspace").mkdir()
        (work_dir / "agent_workspace" / "analysis_output.json").write_text(json.dumps({"n_cells": 700}))

    def in_both(prompt: str, work_dir: Path) -> None:
        in_workspace(prompt, work_dir)
        (work_dir / "eval_answer.json").write_text(json.dumps({"n_cells": 1}))

    def workspace_is_a_file(prompt: str, work_dir: Path) -> None:
        (work_dir / "agent_workspace").write_text("not a folder")
        (work_dir / "eval_answer.json").write_text(json.dumps({"n_cells": 700}))

    found = runner.run(in_workspace)
    assert found.passed and found.answer_source == "agent_workspace/analysis_output.json"
    assert runner.run(in_both).answer_source == "eval_answer.json"
    assert runner.run(workspace_is_a_file).passed


def test_returned_answer_beats_the_file(runner: EvalRunner) -> None:
    def agent(prompt: str, work_dir: Path) -> dict:
        (work_dir / "eval_answer.json").write_text(json.dumps({"n_cells": 1}))
        return {"n_cells": 700}

    assert runner.run(agent).passed


def test_plain_answer_key_is_not_unwrapped_into_a_string(tmp_path: Path) -> None:
    """The reference turned {"answer": "B"} into "B" and failed it; here it passes."""
    runner = EvalRunner(make_eval(tmp_path, MC_GRADER), work_root=tmp_path / "w", cache_dir=tmp_path / "c")
    result = runner.run(lambda p, w: {"answer": "B"})
    assert result.passed and result.agent_answer == {"answer": "B"}


def test_missing_answer_is_failed_with_a_reason_never_none(runner: EvalRunner) -> None:
    result = runner.run(lambda p, w: None)
    assert result.status == "failed" and result.passed is False
    assert result.error_type == "NoAnswer" and "eval_answer.json" in result.error_message


def test_unparseable_answer_file_is_reported(runner: EvalRunner) -> None:
    def agent(prompt: str, work_dir: Path) -> None:
        (work_dir / "eval_answer.json").write_text("{oops")

    result = runner.run(agent)
    assert result.status == "failed" and "eval_answer.json is not valid JSON" in result.error_message


#: more values than an answer of 10 MB is decoded with (one a 10 bytes), in under 5 MB of JSON:
#: three bytes of text each, decoded 64-byte objects (~100 MB where ~10 M were allowed before)
MANY_VALUES = [{}] * 1_500_000


@pytest.mark.parametrize(
    ("isolation", "returned"),
    [
        ("sandbox", {"answer": {"n_cells": MANY_VALUES}}),
        ("sandbox", MANY_VALUES),
        ("inline", f"<EVAL_ANSWER>{json.dumps(MANY_VALUES)}</EVAL_ANSWER>"),
    ],
    ids=["sandboxed object", "sandboxed list", "inline tagged text"],
)
def test_an_answer_of_more_values_than_its_bytes_allow_is_too_large_unread(
    runner: EvalRunner, isolation: str, returned: Any
) -> None:
    """The trusted side decodes at most one JSON value a 10 bytes of what it reads: an answer
    of many tiny values (memory tens of times its bytes) is refused before it is decoded."""
    result = runner.run(lambda p, w: returned, isolation=isolation)
    assert (result.status, result.error_type) == ("error", "AnswerTooLarge"), result.error_message
    assert "holds more than 1,048,576 JSON values" in result.error_message


def test_agent_exception_is_an_error_with_its_message(runner: EvalRunner) -> None:
    def agent(prompt: str, work_dir: Path) -> None:
        raise RuntimeError("model API unreachable")

    result = runner.run(agent)
    assert result.status == "error" and result.passed is False
    assert result.error_type == "RuntimeError" and result.error_message.startswith("model API unreachable")


@pytest.mark.parametrize("isolation", ["sandbox", "inline"])
def test_an_agents_error_never_bears_a_name_the_trusted_side_gives_errors(runner: EvalRunner, isolation: str) -> None:
    """An exception the agent raised under the name of a provider's failure, a timeout, a judge's
    error or a lost Ray worker is stored as the agent's: a reader (the run's summary, the viewer's
    error filter) cannot take it for the trusted side's word. Other names are kept as they are."""
    for name in ("ProviderError", "Timeout", "JudgeError", "WorkerCrashedError", "TimeoutError"):
        forged = type(name, (Exception,), {})

        def agent(prompt: str, work_dir: Path, forged: type = forged) -> None:
            raise forged("the provider failed: HTTP 529 overloaded_error (seen by the gateway)")

        result = runner.run(agent, isolation=isolation)
        kept = name if name == "TimeoutError" else f"{name} (the agent's)"
        assert (result.status, result.error_type) == ("error", kept), name


def test_every_error_name_rayeval_writes_is_one_an_agent_cannot_bear() -> None:
    """Each error_type the trusted side writes (in src, as a literal or a constant, or the runner's
    own exception class) is one :func:`agents_error_type` renames, but the one the unit's own
    runner sends from its sandbox for a return value it cannot send."""
    import re

    from rayeval.record import PROVIDER_ERROR
    from rayeval.sandbox.isolation import agents_error_type

    source = "\n".join(path.read_text() for path in (REPO / "src" / "rayeval").rglob("*.py"))
    written = set(re.findall(r'error_type(?:=|"\s*:\s*)"(\w+)"', source))
    assert {"AgentProcessDied", "NoAnswer", "UnstorableResult"} <= written  # the pattern finds them
    assert "UnsendableResult" in written and agents_error_type("UnsendableResult") == "UnsendableResult"
    for name in written - {"UnsendableResult"} | {PROVIDER_ERROR, "StagingError", "SandboxError", "RayTaskError"}:
        assert agents_error_type(name) == f"{name} (the agent's)", name


def test_agent_process_dying_is_an_error(runner: EvalRunner) -> None:
    result = runner.run(lambda p, w: os._exit(3))
    assert result.status == "error" and result.error_type == "AgentProcessDied" and "code 3" in result.error_message


def test_configuration_error_status(tmp_path: Path) -> None:
    path = make_eval(tmp_path, {"type": "multiple_choice", "config": {}})
    (eval_,) = load_evals(path, check_grader_configs=False)
    result = EvalRunner(eval_, work_root=tmp_path / "w", cache_dir=tmp_path / "c").run(lambda p, w: {"answer": "B"})
    assert result.status == "config_error" and result.passed is False


def test_prompt_says_where_data_and_answer_go_and_reveals_no_answer_key(runner: EvalRunner) -> None:
    eval_file = str(runner.eval.source_path)  # a string: the agent must not carry the eval in

    def agent(prompt: str, work_dir: Path) -> dict:
        files = sorted(str(p.relative_to(work_dir)) for p in work_dir.rglob("*"))
        seen = {
            "prompt": prompt,
            "work_dir": str(work_dir),
            "files": files,
            "env": dict(os.environ),
            "eval_file": os.path.exists(eval_file),
        }
        return {"answer": {"n_cells": 700}, "metadata": {"seen": seen}}

    result = runner.run(agent)
    assert result.passed and result.isolation == "sandbox"
    seen = seen_by(result)
    prompt, work_dir = seen["prompt"], Path(seen["work_dir"])
    assert prompt.startswith(runner.eval.task)
    assert str(work_dir / "data" / "cells.csv") in prompt
    assert str(work_dir / "eval_answer.json") in prompt
    told = prompt.replace(str(work_dir), "")  # its folder's path may hold any digits (pytest-700)
    assert "700" not in told and "ground_truth" not in told and "tolerance" not in told
    assert seen["files"] == ["agent_stdout.log", "data", "data/cells.csv"]
    assert seen["eval_file"] is False and Path(eval_file).is_file()  # the answer key's file is out of sight
    assert seen["env"] and set(seen["env"]) <= {*BASE_ENV_NAMES, *unit_model_variables(), "HOME", "TMPDIR"}
    assert not any(
        "ground_truth" in v or "multiple_choice" in v or "numeric_tolerance" in v for v in seen["env"].values()
    )


def _tamper_with_the_inputs(prompt: str, work_dir: Path) -> dict:
    """Answer with the rows it was given, then try to change its input every way there is;
    report each attempt's error."""
    data = work_dir / "data"
    staged = data / "cells.csv"
    seen = {"work_dir": str(work_dir), "mode": staged.stat().st_mode, "dir_mode": data.stat().st_mode}
    answer = {"n_cells": count_rows(work_dir)}
    attempts = {
        "append": lambda: staged.open("a").write("c700,T\n"),
        "chmod": lambda: staged.chmod(0o666),
        "create": lambda: (data / "more.csv").write_text("cell,type\n"),
        "rename": lambda: staged.rename(data / "moved.csv"),
        "remove": lambda: (data / "moved.csv" if (data / "moved.csv").exists() else staged).unlink(),
    }
    seen["attempts"] = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            seen["attempts"][name] = "done"
        except OSError as exc:
            seen["attempts"][name] = errno.errorcode.get(exc.errno, str(exc.errno))
    return {"answer": answer, "metadata": {"seen": seen}}


def test_staged_data_is_read_only_and_work_dirs_are_unique_and_removed(runner: EvalRunner) -> None:
    source = runner.eval.source_path.parent / "cells.csv"
    original = source.read_text()
    first = runner.run(_tamper_with_the_inputs, model="m", seed=1)
    second = runner.run(_tamper_with_the_inputs, model="m", seed=1)
    seen = [seen_by(first), seen_by(second)]
    assert first.passed and second.passed  # the input each read was the original, 700 rows
    for attempts in (s["attempts"] for s in seen):
        # read-only twice: by its mode (the agent may not write it) and by its mount (not even
        # the file's owner may lift the mode, nor may anything be added, renamed or removed)
        assert attempts.pop("append") in ("EACCES", "EROFS")
        assert attempts == dict.fromkeys(["chmod", "create", "rename", "remove"], "EROFS"), attempts
    assert source.read_text() == original
    assert seen[0]["work_dir"] != seen[1]["work_dir"]
    assert all(Path(s["work_dir"]).name.startswith("count_cells__m__s1__") for s in seen)
    assert not any(Path(s["work_dir"]).exists() for s in seen)


def test_with_process_isolation_staged_data_is_a_read_only_copy_of_its_own(runner: EvalRunner) -> None:
    """No mount without the sandbox: each unit gets a copy, read-only by its mode (an agent
    running as root may still change it), so what one unit does to it no other unit sees."""
    source = runner.eval.source_path.parent / "cells.csv"
    original = source.read_text()
    first = runner.run(_tamper_with_the_inputs, isolation="process")
    second = runner.run(_tamper_with_the_inputs, isolation="process")
    seen = [seen_by(first), seen_by(second)]
    assert first.isolation == second.isolation == "process"
    assert all(s["mode"] & 0o222 == 0 and s["dir_mode"] & 0o222 == 0 for s in seen)
    assert first.passed and second.passed and source.read_text() == original
    assert seen[0]["work_dir"] != seen[1]["work_dir"] and not any(Path(s["work_dir"]).exists() for s in seen)


def test_keep_workspace_keeps_it_and_artifacts_are_collected(tmp_path: Path) -> None:
    runner = EvalRunner(make_eval(tmp_path), work_root=tmp_path / "w", cache_dir=tmp_path / "c", keep_workspace=True)

    def agent(prompt: str, work_dir: Path) -> dict:
        (work_dir / "trajectory.json").write_text('[{"role": "assistant"}]')
        print("hello from the agent")
        return {"n_cells": 700}

    result = runner.run(agent)
    work_dir = Path(result.metadata["work_dir"])
    assert work_dir.is_dir() and (work_dir / "trajectory.json").exists()
    assert result.artifacts["trajectory.json"] == '[{"role": "assistant"}]'
    assert "hello from the agent" in result.artifacts["agent_stdout.log"]


def _count_listings(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
    """Every listing of a folder under ``root``, from now on."""
    listed: list[str] = []
    real_listdir = os.listdir

    def listdir(path="."):
        if str(path).startswith(str(root)):
            listed.append(str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    return listed


def test_what_the_agent_left_is_listed_once_and_an_empty_folder_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answer files and artifacts are found from one listing; an agent that answered by its
    return value and wrote nothing costs no listing at all (instant agents run thousands; an
    agent whose folder may serve the next unit costs one, see test_workspace)."""
    data_free = EvalRunner(make_eval(tmp_path, grader=MC_GRADER), work_root=tmp_path / "w", cache_dir=tmp_path / "c")
    listed = _count_listings(monkeypatch, tmp_path / "w")
    seen = []

    def writer(prompt: str, work_dir: Path) -> None:
        seen.append(work_dir)
        (work_dir / "eval_answer.json").write_text('{"answer": "B"}')
        (work_dir / "trajectory.json").write_text("[]")

    def returner(prompt: str, work_dir: Path) -> dict:
        seen.append(work_dir)
        return {"answer": "B"}

    writer.needs_data = returner.needs_data = False  # type: ignore[attr-defined]
    # inline: the agents note their folders in this process's list, and a sandboxed unit
    # never leaves its folder empty (its agent_stdout.log)
    from_file = data_free.run(writer, isolation="inline")
    assert (
        from_file.passed
        and from_file.answer_source == "eval_answer.json"
        and from_file.artifacts == {"trajectory.json": "[]"}
    )
    assert listed == [str(seen[0])]
    listed.clear()
    returned = data_free.run(returner, isolation="inline")
    assert returned.passed and returned.artifacts == {} and listed == []
    assert not seen[0].exists() and not seen[1].exists()


def test_an_empty_work_folder_is_kept_when_asked(tmp_path: Path) -> None:
    runner = EvalRunner(make_eval(tmp_path, grader=MC_GRADER), work_root=tmp_path / "w", keep_workspace=True)

    def returner(prompt: str, work_dir: Path) -> dict:
        return {"answer": "B"}

    returner.needs_data = False  # type: ignore[attr-defined]
    result = runner.run(returner, isolation="inline")  # inline: only an in-process agent leaves its folder empty
    work_dir = Path(result.metadata["work_dir"])
    assert result.passed and work_dir.is_dir() and os.listdir(work_dir) == []


def test_work_folder_names_ignore_the_agents_random_seed_and_a_taken_name_is_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    from rayeval.unit import workspace

    names = []
    for _ in range(2):
        random.seed(7)  # as an agent seeding for determinism would
        names.append(workspace.make_work_dir(tmp_path, run_id="r", eval_id="e", model="m", seed=1).name)
    assert names[0] != names[1]
    draws = iter([0xABC, 0xABC, 0xDEF])
    monkeypatch.setattr(workspace._SUFFIXES, "getrandbits", lambda bits: next(draws))
    first = workspace.make_work_dir(tmp_path, run_id="r", eval_id="e", model="m", seed=1)
    second = workspace.make_work_dir(tmp_path, run_id="r", eval_id="e", model="m", seed=1)
    assert first.name.endswith("__0000000abc") and second.name.endswith("__0000000def")


def test_forked_processes_draw_work_folder_names_of_their_own(tmp_path: Path) -> None:
    from rayeval.unit import workspace

    reader, writer = os.pipe()
    children = []
    for child in range(2):
        pid = os.fork()
        if pid == 0:  # the child: one name (in a root of its own: no collision to redraw), to the pipe
            name = workspace.make_work_dir(tmp_path / str(child), run_id="r", eval_id="e", model="m", seed=1).name
            os.write(writer, f"{name}\n".encode())
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        drawn = pipe.read().split()
    assert len(drawn) == 2 and drawn[0] != drawn[1]


@pytest.fixture
def pings() -> Iterator[Pings]:
    with Pings.serving() as server:
        yield server


def _spawning_agent(pings: Pings, *, hang: bool):
    """An agent that starts a child pinging ``pings``, which starts a grandchild pinging too, in
    a new session with an empty environment (out of the agent's process group and session);
    it waits for both to have pinged, then hangs (``hang``) or answers. Their tags."""
    token = uuid.uuid4().hex[:8]
    child, escapee = f"child-{token}", f"escapee-{token}"
    code = pinger_code(pings.port, child, spawn=pinger_code(pings.port, escapee))

    def agent(prompt: str, work_dir: Path) -> dict:
        subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            (work_dir / f"{tag}.started").exists() for tag in (child, escapee)
        ):
            time.sleep(0.05)
        if hang:
            time.sleep(300)
        return {"n_cells": 700}

    return agent, child, escapee


def test_timeout_ends_everything_the_agent_started(tmp_path: Path, pings: Pings) -> None:
    """A sandboxed unit that times out ends its pid namespace: the processes its agent started
    die with it, even one in a new session and with a clean environment (pids seen inside the
    namespace are not the host's: the processes tell they still run by pinging the test)."""
    runner = EvalRunner(make_eval(tmp_path, agent_timeout=6), work_root=tmp_path / "w", cache_dir=tmp_path / "c")
    agent, child, escapee = _spawning_agent(pings, hang=True)
    start = time.monotonic()
    result = runner.run(agent)
    assert time.monotonic() - start < 40
    assert result.status == "timeout" and result.passed is False and "6 s" in result.error_message
    assert result.isolation == "sandbox"
    assert pings.counts[child] > 0 and pings.counts[escapee] > 0  # both ran during the unit
    assert pings.pings_after() == {}


def test_with_process_isolation_a_timeout_ends_the_agents_process_group(tmp_path: Path, pings: Pings) -> None:
    """Without a pid namespace, what a timeout can end is the agent's process group: its child
    dies. A process that moved to a new session is out of its reach and survives the unit:
    the guarantee ``process`` isolation does not give (the sandbox's, above)."""
    runner = EvalRunner(make_eval(tmp_path, agent_timeout=6), work_root=tmp_path / "w", cache_dir=tmp_path / "c")
    agent, child, escapee = _spawning_agent(pings, hang=True)
    try:
        start = time.monotonic()
        result = runner.run(agent, isolation="process")
        assert time.monotonic() - start < 40
        assert result.status == "timeout" and result.isolation == "process"
        assert pings.counts[child] > 0 and pings.counts[escapee] > 0
        after = pings.pings_after()
        assert after[child] == 0
        assert after[escapee] > 0  # the escapee, documented: process isolation cannot find it
    finally:
        pings.kill(escapee)  # a host pid here: no namespace


def test_background_processes_do_not_outlive_a_finished_unit(runner: EvalRunner, pings: Pings) -> None:
    agent, child, escapee = _spawning_agent(pings, hang=False)
    result = runner.run(agent)
    assert result.passed and result.isolation == "sandbox"
    assert pings.counts[child] > 0 and pings.counts[escapee] > 0  # both ran before the agent answered
    assert pings.pings_after() == {}


def test_run_timeout_argument_overrides_the_eval(runner: EvalRunner) -> None:
    assert runner.eval.effective_timeout is None or runner.eval.effective_timeout > 30
    start = time.monotonic()
    result = runner.run(lambda p, w: time.sleep(30), timeout=0.5)
    assert result.status == "timeout" and "0.5 s" in result.error_message
    assert time.monotonic() - start < 25


GETS_OPENAI_KEY = SandboxConfig(env_names=("OPENAI_API_KEY",))
GETS_PLAIN = SandboxConfig(env_names=("RAYEVAL_TEST_PLAIN",))


def test_secrets_never_reach_the_result(runner: EvalRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent given a key (``env_names``) leaks it everywhere it can: in its log, its
    trajectory, its exception, its answer and its metadata; the result keeps none of it."""
    secret = "sk-test-SECRET-123456"
    monkeypatch.setenv("OPENAI_API_KEY", secret)

    def agent(prompt: str, work_dir: Path) -> dict:
        key = os.environ["OPENAI_API_KEY"]  # from its environment: the test's closure holds no key
        print(f"using key {key}")
        (work_dir / "trajectory.json").write_text(json.dumps([{"headers": {"authorization": f"Bearer {key}"}}]))
        raise RuntimeError(f"auth failed for {key}")

    result = runner.run(agent, sandbox=GETS_OPENAI_KEY)
    assert result.status == "error" and result.error_type == "RuntimeError"
    assert secret not in result.model_dump_json()
    assert result.error_message.startswith("auth failed for ***")  # it had the key, and it is masked
    assert "using key ***" in result.artifacts["agent_stdout.log"]
    assert "Bearer ***" in result.artifacts["trajectory.json"]

    def answering(prompt: str, work_dir: Path) -> dict:
        key = os.environ["OPENAI_API_KEY"]
        return {"answer": {"n_cells": 700, "note": key}, "metadata": {"env": {"OPENAI_API_KEY": key}}}

    result = runner.run(answering, sandbox=GETS_OPENAI_KEY)
    assert result.passed and secret not in result.model_dump_json()
    assert result.agent_answer["note"] == "***" and result.metadata["env"] == {"OPENAI_API_KEY": "***"}


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_an_agent_gets_only_the_variables_it_is_given(
    runner: EvalRunner, monkeypatch: pytest.MonkeyPatch, isolation: str
) -> None:
    """The test's environment holds a key and a plain variable: the agent sees neither unless
    they are named (``env_names``), and then only those."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-123456")
    monkeypatch.setenv("RAYEVAL_TEST_PLAIN", "plain value")

    def agent(prompt: str, work_dir: Path) -> dict:
        return {"answer": {"n_cells": 700}, "metadata": {"seen": {"names": sorted(os.environ)}}}

    default = seen_by(runner.run(agent, isolation=isolation))["names"]
    assert "RAYEVAL_TEST_PLAIN" not in default and "PATH" in default
    assert set(default) <= {*BASE_ENV_NAMES, *unit_model_variables(), "HOME", "TMPDIR"}
    given = seen_by(runner.run(agent, isolation=isolation, sandbox=GETS_PLAIN))["names"]
    assert "RAYEVAL_TEST_PLAIN" in given


def test_a_named_key_variable_holds_the_units_token_not_the_key(
    runner: EvalRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Naming a provider's key variable for the agent (``--agent-env``) gives it its unit's
    gateway token there, as every unit has: never the key."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-123456")
    monkeypatch.setenv("ANTHROPIC_API_KEY_FALLBACKS", '["sk-ant-spare-123456789"]')

    def agent(prompt: str, work_dir: Path) -> dict:
        key = os.environ["OPENAI_API_KEY"]
        return {"answer": {"n_cells": 700}, "metadata": {"seen": {
            "token": key.startswith("rayeval-unit-"), "fallbacks": "ANTHROPIC_API_KEY_FALLBACKS" in os.environ,
            "base": os.environ["OPENAI_BASE_URL"].startswith("http://127.0.0.1:"),
        }}}  # fmt: skip

    named = SandboxConfig(env_names=("OPENAI_API_KEY", "ANTHROPIC_API_KEY_FALLBACKS"))
    assert seen_by(runner.run(agent, sandbox=named)) == {"token": True, "fallbacks": False, "base": True}


def test_a_secret_set_or_changed_after_earlier_runs_is_masked_too(
    runner: EvalRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment's secrets are cached between runs: a key set, or rotated, later counts."""
    gets_key = SandboxConfig(env_names=("ANTHROPIC_API_KEY",))

    def leaking(prompt: str, work_dir: Path) -> dict:
        return {"answer": {"n_cells": 700, "note": os.environ.get("ANTHROPIC_API_KEY", "")}}

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert runner.run(leaking, sandbox=gets_key).passed
    for key in ("sk-ant-first-987654321", "sk-ant-rotated-123456789"):
        monkeypatch.setenv("ANTHROPIC_API_KEY", key)
        result = runner.run(leaking, sandbox=gets_key)
        assert result.passed and key not in result.model_dump_json() and result.agent_answer["note"] == "***"


def test_agent_receives_context_when_it_asks_for_it(runner: EvalRunner) -> None:
    def agent(prompt: str, work_dir: Path, context) -> dict:
        return {"answer": {"n_cells": 700}, "metadata": {"seen": context.model_dump()}}

    result = runner.run(agent, model="gpt-x", seed=3, agent_args={"k": "v"})
    seen = seen_by(result)
    assert (seen["eval_id"], seen["model"], seen["seed"], seen["args"]) == ("count_cells", "gpt-x", 3, {"k": "v"})
    assert seen["timeout"] == runner.eval.effective_timeout

    def without_context(prompt: str, work_dir: Path) -> dict:
        return {"answer": {"n_cells": 700}}

    assert runner.run(without_context, model="gpt-x").passed  # called with two arguments only


def test_an_agents_signature_is_read_once_and_unhashable_agents_still_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import inspect

    from rayeval.unit import context as context_module

    runner = EvalRunner(Eval.model_validate({"id": "e", "task": "t", "grader": MC_GRADER}), work_root=tmp_path / "w")
    reads = []
    real_signature = inspect.signature
    monkeypatch.setattr(context_module.inspect, "signature", lambda f: reads.append(f) or real_signature(f))

    def with_context(prompt: str, work_dir: Path, context) -> dict:
        return {"answer": "B" if context.seed == 2 else "A"}

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, prompt: str, work_dir: Path, **extra) -> dict:
            return {"answer": "B" if extra["context"].seed == 2 else "A"}

    unhashable = Unhashable()
    # inline: the signature reads are counted in this process (a sandboxed unit reads it in its own)
    for seed in (1, 2, 2):
        assert runner.run(with_context, seed=seed, isolation="inline").passed is (seed == 2)
        assert runner.run(unhashable, seed=seed, isolation="inline").passed is (seed == 2)
    assert reads.count(with_context) == 1 and reads.count(unhashable) == 3


def test_staging_failure_is_an_error_result(tmp_path: Path) -> None:
    """Loading found the file; gone by the time the unit runs, it is the unit's error."""
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"id": "e", "task": "t", "data_node": "missing.h5ad", "grader": MC_GRADER}))
    (tmp_path / "missing.h5ad").write_bytes(b"there when loaded")
    runner = EvalRunner(path, work_root=tmp_path / "w", cache_dir=tmp_path / "c")
    (tmp_path / "missing.h5ad").unlink()
    result = runner.run(lambda p, w: {"answer": "B"})
    assert result.status == "error" and result.error_type == "StagingError" and "missing.h5ad" in result.error_message


def test_runner_accepts_an_eval_object_without_a_source_file(tmp_path: Path) -> None:
    eval_ = Eval.model_validate({"id": "inline", "task": "t", "grader": MC_GRADER})
    runner = EvalRunner(eval_, work_root=tmp_path / "w")
    for isolation in ("sandbox", "inline"):
        result = runner.run(lambda p, w: {"answer": "b"}, isolation=isolation)
        assert result.passed and result.isolation == isolation


@pytest.mark.parametrize("isolation", [None, "sandbox", "process", "inline"])
def test_results_and_rows_record_how_the_agent_ran(runner: EvalRunner, isolation: str | None) -> None:
    """The default is the sandbox; the agent ran where its row says: pid 1 of a pid namespace
    of its own (sandbox), a process of its own (process), this very process (inline)."""

    def agent(prompt: str, work_dir: Path) -> dict:
        return {"answer": {"n_cells": count_rows(work_dir)}, "metadata": {"seen": {"pid": os.getpid()}}}

    result = runner.run(agent) if isolation is None else runner.run(agent, isolation=isolation)
    expected = isolation or "sandbox"
    assert result.passed and result.isolation == expected
    unit = plan_units([runner.eval], ["m"], [1], "agent")[0]
    row = row_from_result(
        result, unit=unit, eval_=runner.eval, run_id="r", agent="agent", agent_args={}, attempt=1, node="n"
    )
    assert row.isolation == expected
    pid = seen_by(result)["pid"]
    assert pid == {"sandbox": 1, "inline": os.getpid()}.get(expected, pid)
    if expected == "process":
        assert pid not in (1, os.getpid())
