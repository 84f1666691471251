"""The plan as data: seeds kept as ranges, the plan's digest, the units still to run, and what
changed between a run's inputs and a resume's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rayeval.batch import BatchConfig, resume
from rayeval.batch.plan import (
    Plan,
    compact_seeds,
    describe_seeds,
    parse_seeds,
    plan_changes,
    unstored,
)
from rayeval.batch.prepare import prepare_run
from rayeval.evals import Eval
from rayeval.storage import ResultStore, RunManifest
from tests.batch.conftest import write_mc_evals


def _eval(eval_id: str, answer: str = "B") -> Eval:
    return Eval.model_validate(
        {
            "id": eval_id,
            "task": "A or B?",
            "grader": {"type": "multiple_choice", "config": {"correct_answer": answer}},
        }
    )


def test_seeds_are_kept_as_ranges_in_their_order() -> None:
    assert compact_seeds(range(1, 1_000_001)) == [(1, 1_000_000)]
    assert compact_seeds([1, 2, 3, 5, 7, 8, 9, 10, 12]) == [(1, 3), 5, (7, 10), 12]
    assert compact_seeds([1, 2]) == [1, 2]  # a pair is no shorter as a range
    assert compact_seeds([9, 3, 4, 5, 1]) == [9, (3, 5), 1]  # plan order kept
    assert compact_seeds([(1, 5), 6, 7, (8, 20)]) == [(1, 20)]  # a stored form compacts to itself
    assert describe_seeds([(1, 3), 5]) == "1..3, 5"


def test_the_digest_is_pinned_and_changes_iff_the_set_of_units_does() -> None:
    a, b = _eval("a"), _eval("b")
    digest = Plan([a, b], ["m1", "m2"], [1, 2, 3], "agent").digest()
    # pinned: a resume by a later version must recognise the plan
    assert digest == "e48c9d751c843239feb27f837a2211319e16959f9b921c4f694940f1c773f275"
    assert Plan([b, a], ["m2", "m1"], [3, 1, 2], "agent").digest() == digest  # same units, other order
    assert Plan([a, b, a], ["m1", "m2", "m1"], [1, 2, 3, 3], "agent").digest() == digest  # same set
    others = [
        Plan([a], ["m1", "m2"], [1, 2, 3], "agent"),
        Plan([a, _eval("b", answer="A")], ["m1", "m2"], [1, 2, 3], "agent"),  # grader config edited
        Plan([a, b], ["m1"], [1, 2, 3], "agent"),
        Plan([a, b], ["m1", "m2"], [1, 2, 3, 4], "agent"),
        Plan([a, b], ["m1", "m2"], [1, 2, 3], "other-agent"),
    ]
    assert len({plan.digest() for plan in others} | {digest}) == len(others) + 1
    assert Plan([a], [], [1], "agent").digest() == Plan([], ["m"], [1, 2], "x").digest()  # no units either way


def test_units_to_run_are_those_without_a_stored_id() -> None:
    plan = Plan([_eval("a"), _eval("b")], ["m1", "m2"], list(range(1, 41)), "agent")
    ids = plan.unit_ids(0, len(plan))
    assert list(ids) == [plan.unit(i).unit_id.encode() for i in range(len(plan))]
    stored = np.unique(np.concatenate([ids[::3], np.array([b"u-elsewhere", b"f" * 40])]))  # and ids of no unit
    todo = unstored(plan, stored)
    assert list(np.flatnonzero(~todo)) == list(range(0, len(plan), 3))
    assert unstored(plan, np.array([], dtype="S32")).all()


def _manifest(**inputs: Any) -> RunManifest:
    defaults = {
        "run_id": "r",
        "agent": "agent",
        "agent_args": {"temperature": "0.2", "api_key": "sk-one"},
        "isolation": "sandbox",
        "network": "host",
        "timeout": None,
        "grade_timeout": 30.0,
        "models": ["m1"],
        "seeds": [(1, 100)],
        "eval_files": [{"path": f"evals/{i}.json", "id": i, "eval_hash": f"h-{i}"} for i in ("e1", "e2", "e3")],
    }
    return RunManifest.model_validate({**defaults, **inputs})


def test_resume_changes_are_listed_before_and_after_per_field() -> None:
    previous = _manifest()
    same = _manifest()
    assert plan_changes(previous, same, {"temperature": "0.2", "api_key": "sk-one"}) == []
    changed_args = {"temperature": "0.7", "api_key": "sk-two"}
    current = _manifest(
        agent_args=changed_args,
        models=["m1", "m2"],
        seeds=list(range(1, 102)),
        eval_files=[
            {"path": "evals/e1.json", "id": "e1", "eval_hash": "h-e1"},
            {"path": "evals/e2.json", "id": "e2", "eval_hash": "edited"},
            {"path": "evals/e4.json", "id": "e4", "eval_hash": "h-e4"},
        ],
        timeout=60.0,
    )
    assert plan_changes(previous, current, changed_args) == [
        "agent_args.api_key: changed (a secret: its values are not shown)",
        'agent_args.temperature: "0.2" → "0.7"',
        "models: m1 → m1, m2",
        "seeds: 1..100 → 1..101",
        "evals changed since: e2",
        "evals added: e4",
        "evals removed: e3",
        "timeout: None → 60.0",
    ]
    assert "sk-" not in "".join(plan_changes(previous, current, changed_args))


def test_a_manifest_of_an_earlier_version_compares_what_it_records() -> None:
    """Earlier manifests listed the units and every seed, and had no timeouts or fingerprints."""
    old = RunManifest.model_validate(
        {
            "run_id": "r",
            "agent": "agent",
            "agent_args": {"temperature": "0.2", "api_key": "***"},
            "isolation": "sandbox",
            "network": "host",
            "models": ["m1"],
            "seeds": list(range(1, 101)),
            "eval_files": [{"path": f"evals/{i}.json", "id": i, "eval_hash": f"h-{i}"} for i in ("e1", "e2", "e3")],
            "plan": [{"unit_id": f"u{i}", "eval_id": "e1", "model": "m1", "seed": i} for i in range(300)],
        }
    )
    assert old.total_units == 300
    assert plan_changes(old, _manifest(timeout=60.0), {"temperature": "0.2", "api_key": "sk-any"}) == []
    assert plan_changes(old, _manifest(seeds=[(1, 99)]), {}) == ["seeds: 1..100 → 1..99"]


@pytest.mark.parametrize("digest", ["d-before", None])
def test_a_digest_that_differs_alone_is_named(digest: str | None) -> None:
    changes = plan_changes(
        _manifest(plan_digest=digest),
        _manifest(plan_digest="d-after"),
        {"temperature": "0.2", "api_key": "sk-one"},
    )
    assert changes == (["plan_digest: d-before → d-after"] if digest else [])


def test_a_million_unit_manifest_records_inputs_not_units(tmp_path: Path) -> None:
    """100 evals × 10 models × 1,000,000 seeds (a billion units): the manifest stays small."""
    folder = write_mc_evals(tmp_path / "evals", [f"eval-{i:03d}" for i in range(100)])
    config = BatchConfig(
        evals=[str(folder)],
        agent="tests.batch.agents:instant",
        agent_args={"api_key": "sk-secret-value"},
        models=[f"provider/model-{i}" for i in range(10)],
        seeds=parse_seeds("1000000"),
        output=str(tmp_path / "out"),
    )
    prepared = prepare_run(config)
    plan = prepared.plan
    stored = ResultStore(config.storage.output).write_manifest(
        resume.run_manifest(config, "r", prepared, previous=None)
    )
    raw = Path(ResultStore(config.storage.output).manifest_path("r")).read_bytes()
    assert len(raw) < 30_000, len(raw)  # 100 eval references make most of it
    assert stored.total_units == 1_000_000_000 and stored.plan_digest == plan.digest()
    assert json.loads(raw)["seeds"] == [[1, 1_000_000]] and "plan" not in json.loads(raw)
    assert b"sk-secret" not in raw


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"resume": True}, "resume=True needs run_id"),
        ({"retry_errors": True}, "retry_errors=True goes with resume=True"),
    ],
)
def test_the_python_api_refuses_resume_options_that_cannot_go_together(
    tmp_path: Path, options: dict, said: str
) -> None:
    """As the command line does, before any eval loads or Ray starts, naming the options by the
    caller's keywords (the command line names its flags): a --resume without a run id used to
    look for a run under a new id and say there was none."""
    from rayeval.batch.engine import run_batch
    from rayeval.batch.preview import preview_run

    config = BatchConfig(evals=[str(tmp_path / "none")], agent="sleep", output=str(tmp_path / "out"), **options)
    for call in (run_batch, preview_run):
        with pytest.raises(resume.RunConflict, match=said):
            call(config)
    assert not (tmp_path / "out").exists()
