"""evaluations.run on a real embedded Ray: judgments, errors, thresholds, deltas, stored rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rayeval import evaluations
from rayeval.evaluations.config import validate_arguments

from .conftest import FAST, qa_dataset, results_root

pytestmark = pytest.mark.usefixtures("shared_ray")

KNOWN = {"2+2?": "4", "capital of France?": "Paris", "colour of the sky?": "blue", "3*3?": "9"}


def answer(question: str, **kwargs) -> str:
    """Deterministic: the known answer, or "no idea"; "(brief)" appended when messages came."""
    text = KNOWN.get(question, "no idea")
    return text + " (brief)" if "messages" in kwargs else text


def exact(log: dict, datapoint: dict) -> bool:
    return log["output"].removesuffix(" (brief)") == datapoint["target"]["answer"]


def evaluators(threshold: float | None = None) -> list[dict]:
    return [
        {
            "path": "exact",
            "args_type": "target_required",
            "return_type": "boolean",
            "callable": exact,
            "threshold": threshold,
        },
        {
            "path": "score",
            "args_type": "target_free",
            "return_type": "number",
            "callable": lambda log: len(log["output"]),
        },  # also a column name
        {
            "path": "kind",
            "return_type": "select",
            "callable": lambda log: "numeric" if log["output"].isdigit() else "words",
        },
        {
            "path": "tags",
            "return_type": "multi_select",
            "callable": lambda log: (
                (["short"] if len(log["output"]) < 5 else []) + (["brief"] if "brief" in log["output"] else [])
            ),
        },
        {
            "path": "status",
            "return_type": "text",
            "callable": lambda log: log["inputs"]["question"],
        },  # a column the stats read too
    ]


def test_judgments_stats_and_rows_of_a_first_run(tmp_path: Path) -> None:
    output = results_root(tmp_path)
    result = evaluations.run(
        "qa-first",
        {"path": "qa/answerer", "version": "v1", "callable": answer},
        evaluators(0.5),
        qa_dataset(),
        workers=3,
        output=output,
        **FAST,
    )
    checks = {c.path: c for c in result.checks}
    # exact: 4 of 5 right; a first run reports the true score and no delta
    assert checks["exact"].score == pytest.approx(0.8) and checks["exact"].delta is None
    assert checks["exact"].threshold == 0.5 and checks["exact"].threshold_check is True and result.passed
    lengths = [1, 5, len("blue (brief)"), 1, len("no idea")]
    assert checks["score"].score == pytest.approx(sum(lengths) / 5) and checks["score"].threshold_check is None
    assert checks["kind"].option == "words" and checks["kind"].score == pytest.approx(3 / 5)
    assert checks["tags"].option == "short" and checks["tags"].score == pytest.approx(2 / 5)
    assert checks["status"].score is None and checks["status"].num_judgments == 5
    assert result.previous_run_id is None and result.version_id == "qa/answerer@v1"

    run = result.stats.run_stats[0]
    assert len(result.stats.run_stats) == 1 and run.run_id == result.run_id and run.num_logs == 5
    assert result.stats.status == "completed" and result.stats.num_errors == 0
    by_path = {s.evaluator: s for s in run.evaluator_stats}
    assert (by_path["exact"].kind, by_path["exact"].num_true, by_path["exact"].num_false) == ("boolean", 4, 1)
    assert by_path["score"].kind == "number" and by_path["score"].sum == sum(lengths)
    assert by_path["kind"].num_judgments_per_option == {"numeric": 2, "words": 3}
    assert by_path["tags"].num_judgments_per_option == {"short": 2, "brief": 1}
    assert by_path["tags"].num_nulls == 2  # an empty multi-select is a null
    assert by_path["status"].kind == "text" and by_path["status"].num_judgments == 5
    assert "exact" in result.report and "PASS" in result.report and "first run of this name" in result.report

    frame = pd.read_parquet(Path(output) / f"run_id={result.run_id}")
    assert len(frame) == 5 and frame["eval_id"].is_unique and frame["unit_id"].is_unique
    assert set(frame["model"]) == {"qa/answerer@v1"} and set(frame["harness"]) == {"flow"}
    spec = validate_arguments("qa-first", {"path": "x", "callable": answer}, [], qa_dataset())
    assert sorted(frame["eval_id"]) == sorted(spec.datapoint_ids)  # a stable id per datapoint
    rows = {json.loads(r.answer_json)["output"]: r for r in frame.itertuples()}
    assert "blue (brief)" in rows  # messages were passed only where the datapoint has them
    sky = json.loads(rows["blue (brief)"].metrics_json)
    assert sky["evaluators"] == {
        "exact": True,
        "score": 12,
        "kind": "words",
        "tags": ["brief"],
        "status": "colour of the sky?",
    }
    wrong = rows["no idea"]
    assert wrong.status == "failed" and not wrong.passed and wrong.score == 0.0  # the one check (exact) failed
    assert rows["4"].status == "passed" and rows["4"].passed and rows["4"].score == 1.0
    assert set(frame["grader_type"]) == {"evaluations"} and set(frame["task"]) == {"qa/smoke"}


def test_errors_thresholds_and_the_delta_of_a_second_run(tmp_path: Path) -> None:
    output = results_root(tmp_path)

    def flaky(log: dict) -> float:
        if log["inputs"]["question"] == "3*3?":
            raise RuntimeError("judge unavailable")
        return 1.0

    def exploding(question: str, **kwargs) -> str:  # the file callable itself fails on one datapoint
        if question == "meaning of life?":
            raise ValueError("cannot answer")
        return answer(question, **kwargs)

    config = [
        {
            "path": "exact",
            "args_type": "target_required",
            "return_type": "boolean",
            "callable": exact,
            "threshold": 0.9,
        },
        {"path": "judge", "return_type": "number", "callable": flaky, "threshold": 0.5},
        {"path": "wrong-type", "return_type": "boolean", "callable": lambda log: "yes"},
    ]
    first = evaluations.run(
        "qa", {"path": "qa/answerer", "callable": exploding}, config, qa_dataset(), output=output, **FAST
    )
    checks = {c.path: c for c in first.checks}
    # 4 of 5 logs right; the failed callable is an error: not true, not a judgment
    assert checks["exact"].score == pytest.approx(0.8) and checks["exact"].num_errors == 1
    assert checks["exact"].threshold_check is False and not first.passed  # 0.8 < 0.9
    assert checks["exact"].delta is None and first.previous_run_id is None
    # the raising evaluator: its judgment is an error, the run completed; its mean is of the
    # logs it judged, and its threshold is not met with logs it did not (an error lifts no mean)
    assert checks["judge"].num_errors == 2 and checks["judge"].num_judgments == 3 and checks["judge"].score == 1.0
    assert checks["judge"].threshold_check is False
    assert checks["wrong-type"].num_errors == 5 and checks["wrong-type"].score == 0.0
    assert first.stats.status == "completed" and first.stats.num_errors == 1
    assert "FAIL" in first.report and "failed: exact" in first.report

    frame = pd.read_parquet(Path(output) / f"run_id={first.run_id}")
    assert len(frame) == 5
    errored = frame[frame["status"] == "error"].iloc[0]
    assert errored["error_type"] == "ValueError" and "cannot answer" in errored["error_message"]
    nine = next(r for r in frame.itertuples() if json.loads(r.answer_json or "{}").get("output") == "9")
    judged = json.loads(nine.metrics_json)["evaluators"]
    assert judged["judge"]["error"] == "RuntimeError: judge unavailable" and "Traceback" in judged["judge"]["traceback"]
    assert "a boolean evaluator returns True, False or None" in judged["wrong-type"]["error"]
    # three checks (exact, judge >= 0.5, wrong-type): only exact passed
    assert nine.status == "failed" and nine.score == pytest.approx(1 / 3)
    assert json.loads(nine.metrics_json)["checks"] == {"exact": True, "judge": False, "wrong-type": False}

    # the same name again with a changed callable: 5/5 right now, no errors
    better = dict(KNOWN, **{"meaning of life?": "42"})
    second = evaluations.run(
        "qa",
        {"path": "qa/answerer", "version": "v2", "callable": lambda question, **kw: better[question]},
        config,
        qa_dataset(),
        output=output,
        **FAST,
    )
    checks = {c.path: c for c in second.checks}
    assert second.previous_run_id == first.run_id and second.run_id != first.run_id
    assert checks["exact"].score == 1.0 and checks["exact"].previous_score == pytest.approx(0.8)
    assert checks["exact"].delta == pytest.approx(0.2) and checks["exact"].improvement_check is True
    assert checks["exact"].threshold_check is True
    assert checks["judge"].delta == pytest.approx(0.0) and checks["wrong-type"].delta == 0.0
    assert "compared with run " + first.run_id in second.report
    frame = pd.read_parquet(Path(output) / f"run_id={second.run_id}")
    assert set(frame["model"]) == {"qa/answerer@v2"} and (frame["status"] == "failed").all()  # wrong-type never passes
    assert sorted(frame["score"]) == pytest.approx([1 / 3] + [2 / 3] * 4)  # judge errored on 3*3
    assert sorted(frame["eval_id"]) == sorted(pd.read_parquet(Path(output) / f"run_id={first.run_id}")["eval_id"])

    # another name under the same root is a first run again
    other = evaluations.run(
        "qa-other", {"path": "qa/answerer", "callable": answer}, config[:1], qa_dataset(), output=output, **FAST
    )
    assert (
        other.previous_run_id is None and other.checks[0].delta is None and other.checks[0].score == pytest.approx(0.8)
    )


def others_seen(question: str, **kwargs) -> str:
    """What a hostile callable finds of the other datapoints in its process's memory."""
    import gc

    texts = [getattr(obj, "task", "") for obj in gc.get_objects() if type(obj).__name__ == "Eval"]
    seen = {
        f"secret question {i}"
        for i in range(4)
        for text in texts
        if isinstance(text, str) and f"secret question {i}" in text
    }
    return json.dumps(sorted(seen - {question}))


@pytest.mark.slow
def test_sandboxed_datapoints_see_their_own_inputs_only(tmp_path: Path) -> None:
    dataset = {
        "path": "qa/private",
        "datapoints": [{"inputs": {"question": f"secret question {i}"}, "target": {"answer": "x"}} for i in range(4)],
    }
    checks = [{"path": "length", "return_type": "number", "callable": lambda log: len(log["output"])}]
    for isolation, expect_leak in (("sandbox", False), ("inline", True)):
        output = results_root(tmp_path / isolation)
        evaluations.run(
            "private",
            {"path": "spy", "callable": others_seen},
            checks,
            dataset,
            workers=2,
            output=output,
            isolation=isolation,
            **FAST,
        )
        rows = pd.read_parquet(output)
        assert set(rows["isolation"]) == {isolation}
        leaked = [json.loads(json.loads(answer)["output"]) for answer in rows["answer_json"]]
        assert any(leaked) is expect_leak, leaked  # inline: the worker holds every datapoint
