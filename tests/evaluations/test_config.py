"""Bad arguments are rejected up front, with messages naming the evaluator and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayeval import evaluations
from rayeval.evaluations import EvaluationConfigError
from rayeval.evaluations.api import build_checks, evaluator_score
from rayeval.evaluations.config import EvaluatorConfig, validate_arguments
from rayeval.evaluations.runtime import (
    LocalEvaluator,
    coerce_judgment,
    log_checks,
    output_text,
)
from rayeval.report import (
    BooleanEvaluatorStats,
    NumberEvaluatorStats,
    SelectEvaluatorStats,
    TextEvaluatorStats,
)

from .conftest import qa_dataset


def answer(question: str, messages: list | None = None) -> str:
    return question


FILE = {"path": "qa/answerer", "callable": answer}
GOOD = {"path": "exact", "args_type": "target_required", "return_type": "boolean", "callable": lambda log, dp: True}


def problems(evaluators=None, file=FILE, dataset=None, name="qa") -> str:
    with pytest.raises(EvaluationConfigError) as info:
        validate_arguments(name, file, [GOOD] if evaluators is None else evaluators, dataset or qa_dataset())
    return str(info.value)


@pytest.mark.parametrize(
    ("evaluator", "expected"),
    [
        (
            {"path": "acc", "args_type": "target_sometimes", "return_type": "boolean", "callable": bool},
            ["evaluator 'acc' (evaluators[0]): args_type:", "'target_free' or 'target_required'"],
        ),
        (
            {"path": "acc", "return_type": "percentage", "callable": bool},
            ["evaluator 'acc' (evaluators[0]): return_type:", "'multi_select'"],
        ),
        (
            {"path": "acc", "return_type": "boolean", "callable": "lambda log: True"},
            ["evaluator 'acc' (evaluators[0]): callable: must be callable, got str"],
        ),
        ({"path": "acc", "return_type": "boolean"}, ["evaluator 'acc' (evaluators[0]): callable: is required"]),
        ({"path": "acc", "callable": bool}, ["evaluator 'acc' (evaluators[0]): return_type: is required"]),
        (
            {"path": "acc", "return_type": "boolean", "callable": bool, "threshold": "high"},
            ["evaluator 'acc' (evaluators[0]): threshold: must be a number, got 'high' (str)"],
        ),
        (
            {"path": "acc", "return_type": "boolean", "callable": bool, "threshold": True},
            ["threshold: must be a number, got True (bool)"],
        ),
        (
            {"path": "acc", "return_type": "boolean", "callable": bool, "threshold": 80},
            ["evaluator 'acc' (evaluators[0])", "share of logs in [0, 1] (e.g. 0.8 for 80%), got 80"],
        ),
        (
            {"path": "acc", "return_type": "select", "callable": str, "threshold": 0.5},
            ["score is the share of its most common option, whichever that is", "so it takes no threshold"],
        ),
        (
            {"path": "acc", "return_type": "text", "callable": str, "threshold": 0.5},
            ["a text evaluator has no score, so it takes no threshold"],
        ),
        (
            {"path": "acc", "return_type": "number", "callable": len, "threshold": float("nan")},
            ["threshold: must be finite"],
        ),
        (
            {"path": "acc", "return_type": "boolean", "callable": bool, "treshold": 0.5},
            ["evaluator 'acc' (evaluators[0]): treshold: is not a known field"],
        ),
        (
            {"path": "acc", "args_type": "target_required", "return_type": "boolean", "callable": lambda log: True},
            ["cannot be called as callable(log, datapoint) (target_required)", "too many positional arguments"],
        ),
        (
            {"path": "acc", "return_type": "boolean", "callable": lambda log, datapoint: True},
            ["cannot be called as callable(log) (target_free)", "missing a required argument: 'datapoint'"],
        ),
        ({"path": "  ", "return_type": "boolean", "callable": bool}, ["path: must be a non-empty string"]),
        ("exact", ["evaluators[0]: must be a dict {path, args_type, return_type, callable, threshold}, got str"]),
    ],
)
def test_bad_evaluators_are_named_with_their_field(evaluator, expected) -> None:
    message = problems([evaluator])
    for part in expected:
        assert part in message, message


def test_every_problem_is_reported_at_once() -> None:
    message = problems(
        [
            GOOD,
            {"path": "exact", "return_type": "boolean", "callable": bool},
            {"path": "n", "return_type": "number", "callable": 3},
        ],
        file={"path": "", "callable": answer, "type": "spreadsheet"},
        dataset={
            "path": "qa",
            "datapoints": [{"inputs": {"question": "x"}, "target": "y"}, {"inputs": {"q": object()}}],
        },
        name="",
    )
    assert "5 problem(s)" in message or "6 problem(s)" in message, message
    assert "name: must be a non-empty string" in message
    assert "file: path: must be a non-empty string" in message
    assert "file: type: Input should be 'prompt', 'tool', 'flow', 'agent' or 'evaluator'" in message
    assert "evaluator 'exact' (evaluators[1]): path 'exact' is already used by evaluators[0]" in message
    assert "evaluator 'n' (evaluators[2]): callable: must be callable, got int" in message
    assert "dataset 'qa': datapoints[1]: inputs is not JSON-serialisable" in message


def test_dataset_problems() -> None:
    assert "dataset 'qa': datapoints is empty: nothing to evaluate" in problems(
        dataset={"path": "qa", "datapoints": []}
    )
    assert "dataset: must be a dict {path, datapoints}, got list" in problems(dataset=[1])
    assert "dataset: path: must be a non-empty string, got None" in problems(dataset={"path": None, "datapoints": [{}]})
    # given without a path (as one of Humanloop's examples does), a dataset takes the evaluation's name
    assert (
        validate_arguments(
            "qa run", FILE, [GOOD], {"datapoints": [{"inputs": {"question": "x"}, "target": "x"}]}
        ).dataset.path
        == "qa run"
    )
    message = problems(
        dataset={"path": "qa", "datapoints": [{"inputs": {"question": "x"}, "target": {"a": 1}, "extra": 1}]}
    )
    assert "dataset 'qa': datapoints[0]: extra: is not a known field" in message
    message = problems(
        dataset={
            "path": "qa",
            "datapoints": [{"inputs": {"question": "x", "messages": []}, "messages": [], "target": 1}],
        }
    )
    assert "datapoints[0]: inputs has a 'messages' key" in message
    message = problems(
        dataset={"path": "qa", "datapoints": [{"id": "a", "inputs": {"question": "x"}, "target": 1}] * 2}
    )
    assert "datapoints[1].id 'a' repeats datapoints[0].id" in message


def test_target_required_evaluators_need_targets_and_the_callable_must_take_the_inputs() -> None:
    dataset = {
        "path": "qa",
        "datapoints": [{"inputs": {"question": "x"}, "target": {"a": 1}}, {"inputs": {"question": "y"}}],
    }
    message = problems(dataset=dataset)
    assert (
        "evaluator 'exact' (evaluators[0]) is target_required, but datapoints[1] of dataset 'qa' have no target"
        in message
    )
    dataset = {"path": "qa", "datapoints": [{"inputs": {"query": "x"}, "target": 1}]}
    message = problems(dataset=dataset)
    assert "file 'qa/answerer': callable cannot take the inputs of datapoints[0]" in message
    assert "unexpected keyword argument 'query'" in message or "missing a required argument: 'question'" in message


def test_nothing_starts_before_validation(tmp_path: Path) -> None:
    import ray

    output = tmp_path / "results"
    with pytest.raises(EvaluationConfigError, match="evaluator 'acc'"):
        evaluations.run(
            "qa", FILE, [{"path": "acc", "return_type": "boolean", "callable": None}], qa_dataset(), output=str(output)
        )
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        evaluations.run("qa", FILE, [GOOD], qa_dataset(), workers=0, output=str(output))
    with pytest.raises(TypeError, match="models cannot be passed"):
        evaluations.run("qa", FILE, [GOOD], qa_dataset(), output=str(output), models=["x"])
    with pytest.raises(TypeError, match="unknown option"):
        evaluations.run("qa", FILE, [GOOD], qa_dataset(), output=str(output), flush_secs=1)
    assert not ray.is_initialized()
    assert not output.exists()


def test_ids_versions_and_defaults() -> None:
    dataset = {
        "path": "qa",
        "datapoints": [{"inputs": {"question": "x"}, "target": 1}] * 2
        + [{"id": "mine", "inputs": {"question": "y"}, "target": 2}],
    }
    spec = validate_arguments("qa", {**FILE, "version": {"temperature": 0.2, "model": "m"}}, [GOOD], dataset)
    first, second, mine = spec.datapoint_ids
    assert first.startswith("dp-") and second == f"{first}-2" and mine == "mine"
    again = validate_arguments("qa", {**FILE, "version": {"model": "m", "temperature": 0.2}}, [GOOD], dataset)
    assert again.datapoint_ids == spec.datapoint_ids  # content ids: stable across calls
    assert spec.file.identity == again.file.identity and spec.file.identity.startswith("qa/answerer@v-")
    assert validate_arguments("qa", {**FILE, "version": "v2"}, [GOOD], dataset).file.identity == "qa/answerer@v2"
    assert spec.file.type == "flow" and spec.evaluators[0].kind == "boolean"
    assert validate_arguments("qa", FILE, None, dataset).evaluators == []


def test_judgments_are_checked_against_the_return_type() -> None:
    import numpy as np

    assert coerce_judgment(np.bool_(True), "boolean") is True
    assert coerce_judgment(np.float64(0.5), "number") == 0.5
    assert coerce_judgment(None, "boolean") is None
    assert coerce_judgment(("b", "a", "b"), "multi_select") == ["b", "a"]
    for value, kind in [
        (1, "boolean"),
        ("3", "number"),
        (True, "number"),
        (float("inf"), "number"),
        (3, "select"),
        (["a", 1], "multi_select"),
        ({"a": 1}, "text"),
    ]:
        with pytest.raises(TypeError, match=f"a {kind} evaluator"):
            coerce_judgment(value, kind)
    boom = LocalEvaluator("boom", "target_free", "boolean", None, lambda log: 1 / 0)
    assert boom.judge({}, {})["error"] == "ZeroDivisionError: division by zero"
    wrong = LocalEvaluator("wrong", "target_free", "boolean", None, lambda log: "yes")
    assert wrong.judge({}, {}) == {
        "error": "wrong: returned 'yes' (str); a boolean evaluator returns True, False or None"
    }
    for digits in (401, 5000):  # past a float, past the digits an int may be shown with
        huge = LocalEvaluator("huge", "target_free", "number", None, lambda log, digits=digits: 10**digits)
        error = huge.judge({}, {})["error"]
        assert error.startswith("huge: ") and len(error) <= 2_000, error
    evaluators = [
        LocalEvaluator("b", "target_free", "boolean", None, bool),
        LocalEvaluator("n", "target_free", "number", 2, len),
        LocalEvaluator("m", "target_free", "number", None, len),
        LocalEvaluator("s", "target_free", "select", None, str),
    ]
    assert log_checks(evaluators, {"b": True, "n": 1, "m": 0, "s": "x"}) == {"b": True, "n": False}
    assert log_checks(evaluators, {"b": {"error": "x"}, "n": 2}) == {"b": False, "n": True}
    assert output_text("x") == "x" and output_text({"a": 1}) == '{"a": 1}'


def test_scores_from_stats() -> None:
    common = {"evaluator": "e", "total_logs": 5, "num_judgments": 4, "num_nulls": 0, "num_errors": 1}
    assert evaluator_score(BooleanEvaluatorStats(**common, num_true=3, num_false=1)) == (0.6, None)
    assert evaluator_score(NumberEvaluatorStats(**common, mean=2.5)) == (2.5, None)
    select = SelectEvaluatorStats(**common, num_judgments_per_option={"b": 2, "a": 2})
    assert evaluator_score(select) == (0.4, "a")  # ties: first alphabetically
    assert evaluator_score(select, "c") == (0.0, "c")
    assert evaluator_score(TextEvaluatorStats(**common)) == (None, None)


@pytest.mark.parametrize(
    ("errors", "nulls", "met"), [(0, 0, True), (2, 0, False), (0, 1, False)], ids=["all judged", "errors", "nulls"]
)
def test_a_number_threshold_is_met_only_where_every_log_has_a_number(errors: int, nulls: int, met: bool) -> None:
    """Its score is the mean of the logs with a number: a file raising on what it cannot answer
    (or having the evaluator judge it null) must not lift that mean past the threshold."""
    config = EvaluatorConfig.model_validate({"path": "n", "return_type": "number", "callable": len, "threshold": 0.75})
    judged = 4 - errors - nulls
    stats = NumberEvaluatorStats(
        evaluator="n", total_logs=4, num_judgments=judged, num_nulls=nulls, num_errors=errors, mean=1.0
    )
    (check,) = build_checks([config], {"n": stats}, {}, {})
    assert check.score == 1.0 and check.threshold_check is met


@pytest.mark.parametrize(
    ("model", "provider"),
    [("gpt-4", "openai"), ("gpt-4o-mini", "openai"), ("chatgpt-4o-latest", "openai"), ("o1", "openai"),
     ("o3-mini", "openai"), ("o4-mini", "openai"), ("claude-sonnet-4-5", "anthropic"), ("llama-3.1-8b", None),
     ("gemini-2.0-flash", None), ("gpt4", None), ("o2-mini", None), ("ollama", None), ("openai/gpt-4", None)],
)  # fmt: skip
def test_only_a_model_name_of_one_providers_family_gets_its_provider(model: str, provider: str | None) -> None:
    from rayeval.evaluations.prompts import PromptVersion
    from rayeval.models.providers import inferred_provider

    assert inferred_provider(model) == provider
    version = PromptVersion.model_validate({"model": model, "template": "Hi"})
    assert version.model_name == (f"{provider}/{model}" if provider else model)
    # named explicitly, the provider stays as given
    assert PromptVersion.model_validate(
        {"model": model, "provider": "openai-compatible", "template": "x"}
    ).provider == ("openai-compatible")


def test_a_file_type_given_beside_the_file_must_agree_with_it(tmp_path) -> None:
    from rayeval import evaluations

    with pytest.raises(EvaluationConfigError, match="type: 'prompt', but file.type is 'flow': give one"):
        evaluations.run("qa", {**FILE, "type": "flow"}, [GOOD], qa_dataset(), type="prompt", output=str(tmp_path))
    assert not list(tmp_path.iterdir())  # refused before anything ran or was written


def test_a_target_required_evaluator_without_targets_refused_in_code_or_judged_not_applicable_by_path() -> None:
    """Humanloop checks targets up front for local evaluators only: an evaluator defined in code
    is refused; one named by path (or defined with without_target="not_applicable") is not
    called for those datapoints, its judgment not applicable."""
    dataset = {
        "path": "qa",
        "datapoints": [{"inputs": {"question": "x"}, "target": "x"}, {"inputs": {"question": "y"}}],
    }
    assert "evaluator 'exact' (evaluators[0]) is target_required, but datapoints[1]" in problems(dataset=dataset)
    spec = validate_arguments("qa", FILE, [{**GOOD, "without_target": "not_applicable"}], dataset)
    named = validate_arguments("qa", FILE, [{"path": "Example Evaluators/Code/Exact match"}], dataset)
    for evaluator in (*spec.evaluators, *named.evaluators):
        local = LocalEvaluator(*evaluator.model_dump(include={"path", "args_type", "return_type", "threshold"}).values(),
                               evaluator.callable, evaluator.without_target)  # fmt: skip
        assert local.judge({"output": "x"}, {"target": None}) == {"not_applicable": "no target"}
        assert local.judge({"output": "x"}, {"target": "x"}) is True
        assert log_checks([local], {local.path: {"not_applicable": "no target"}}) == {}  # neither passes nor fails


def test_a_built_in_evaluators_name_and_a_prompt_beside_the_file_get_a_pointer() -> None:
    """``{"path": "Exact match"}`` names a built-in by its last part; ``"prompt"`` in ``file``
    is the prompt defined in code, which goes in ``version``."""
    message = problems([{"path": "Exact match"}, {"path": "Example Evaluators/Code/Contain"}])
    assert "no evaluator has the path 'Exact match'; did you mean 'Example Evaluators/Code/Exact match'?" in message
    assert "did you mean 'Example Evaluators/Code/Contains'?" in message
    prompt = {"model": "openai/gpt-4o", "template": "Answer {{question}}"}
    message = problems(file={"path": "geo/answerer", "prompt": prompt})
    assert "file 'geo/answerer': prompt: not a field of file: a prompt defined in code is its version" in message
