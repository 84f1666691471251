"""Humanloop parity without Ray: templates, judges' replies, the built-in evaluators, the
catalog of stored datasets and prompts, and the errors for unknown paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayeval import evaluations
from rayeval.evaluations import EvaluationConfigError
from rayeval.evaluations.catalog import find_version, store_version, stored_versions
from rayeval.evaluations.config import validate_arguments
from rayeval.evaluations.library import (
    BUILTINS,
    EVALUATORS,
    contains,
    exact_match,
    regex_match,
    target_text,
    valid_json,
)
from rayeval.evaluations.prompts import JudgmentError, PromptVersion, read_judgment, render
from rayeval.registry import Registry
from rayeval.storage import ResultStore

from .conftest import qa_dataset

PROMPT = {
    "model": "gpt-4o",
    "provider": "openai",
    "template": [{"role": "system", "content": "Answer {{ question }} briefly ({{meta.lang}})."}],
    "temperature": 0,
}


def problems(store: ResultStore | None = None, **arguments) -> str:
    given = {"file": {"path": "qa/prompt", "version": PROMPT}, "evaluators": [], "dataset": qa_dataset()}
    given.update(arguments)
    with pytest.raises(EvaluationConfigError) as info:
        validate_arguments(
            "qa",
            given["file"],
            given["evaluators"],
            given["dataset"],
            store=store,
            model_options=given.get("model_options"),
        )
    return str(info.value)


def test_templates_fill_placeholders_from_the_inputs() -> None:
    version = PromptVersion.model_validate(PROMPT)
    assert version.model_name == "openai/gpt-4o" and version.placeholders() == ["question", "meta.lang"]
    text = render(version.messages()[0].content, {"question": "2+2?", "meta": {"lang": "en"}})
    assert text == "Answer 2+2? briefly (en)."
    assert render("{{n}} and {{xs}}", {"n": 3, "xs": [1, "a"]}) == '3 and [1, "a"]'  # non-strings as JSON
    with pytest.raises(KeyError, match="meta.lang"):
        render("{{meta.lang}}", {"meta": "en"})
    assert PromptVersion.model_validate({"model": "openai/x", "template": "Hi {{name}}"}).messages()[0].role == "user"


@pytest.mark.parametrize(
    ("reply", "return_type", "options", "judgment"),
    [
        ("The answer is right.\nTrue", "boolean", (), True),
        ("Verdict: no.", "boolean", (), False),
        ("Close enough.\n4", "number", (), 4),
        ("score: 3.5", "number", (), 3.5),
        ("It is **Good**.\nGood", "select", ("Bad", "Good"), "Good"),
        ("tags: short, Polite", "multi_select", ("short", "polite", "rude"), ["short", "polite"]),
        ("free text\nsecond line", "text", (), "free text\nsecond line"),
    ],
)
def test_a_judges_reply_is_read_from_its_last_line(reply, return_type, options, judgment) -> None:
    assert read_judgment(reply, return_type, options) == judgment


@pytest.mark.parametrize(
    ("reply", "return_type", "options"),
    [("I think it is fine", "boolean", ()), ("five", "number", ()), ("Maybe", "select", ("Bad", "Good"))],
)
def test_a_reply_without_a_judgment_is_an_error_naming_what_was_expected(reply, return_type, options) -> None:
    with pytest.raises(JudgmentError, match="is not"):
        read_judgment(reply, return_type, options)


def test_the_code_built_ins() -> None:
    point = {"target": {"output": "Paris"}}
    assert target_text(point) == "Paris" and target_text({"target": {"answer": "4"}}) == "4"
    assert target_text({"target": "x"}) == "x" and target_text({"target": {"a": 1, "b": 2}}) == '{"a": 1, "b": 2}'
    assert exact_match({"output": " Paris\n"}, point) and not exact_match({"output": "paris"}, point)
    assert contains({"output": "It is paris."}, point) and not contains({"output": "Lyon"}, point)
    assert regex_match({"output": "v1.2"}, {"target": r"v\d+\.\d+"}) and not regex_match(
        {"output": "v1"}, {"target": r"\.\d"}
    )
    assert valid_json({"output": '{"a": 1}'}) and not valid_json({"output": "{a: 1}"})
    assert all(path.startswith("Example Evaluators/") for path in BUILTINS)


def exercise_catalog(store: ResultStore) -> str:
    """Versions by content, the latest by default; the first version's id."""
    first = store_version(store, "dataset", "qa/smoke", [{"inputs": {"q": 1}}])
    second = store_version(store, "dataset", "qa/smoke", [{"inputs": {"q": 2}}])
    again = store_version(store, "dataset", "qa/smoke", [{"inputs": {"q": 1}}])
    assert again.version_id == first.version_id != second.version_id
    assert [v.version_id for v in stored_versions(store, "dataset", "qa/smoke")] == [
        second.version_id,
        first.version_id,
    ]
    assert find_version(store, "dataset", "qa/smoke").body == [{"inputs": {"q": 1}}]  # the one stored last
    assert find_version(store, "dataset", "qa/smoke", second.version_id).body == [{"inputs": {"q": 2}}]
    assert "no stored version 'v-nope'" in find_version(store, "dataset", "qa/smoke", "v-nope")
    assert "stored datasets: 'qa/smoke'" in find_version(store, "dataset", "qa/other")
    assert "stored prompts: none" in find_version(store, "prompt", "qa/smoke")
    return first.version_id


def test_stored_versions_on_a_local_root(tmp_path: Path) -> None:
    first = exercise_catalog(ResultStore(tmp_path / "results"))
    assert (tmp_path / "results" / "_datasets" / "qa%2Fsmoke" / f"{first}.json").is_file()


@pytest.mark.usefixtures("aws_credentials")
def test_stored_versions_on_s3(s3_bucket) -> None:
    exercise_catalog(ResultStore(s3_bucket.uri("results"), s3_endpoint_url=s3_bucket.endpoint_url))


def test_unknown_paths_are_errors_listing_the_known_ones(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results")
    store_version(store, "dataset", "qa/known", qa_dataset()["datapoints"])
    text = problems(
        store,
        file={"path": "qa/unstored"},
        evaluators=[{"path": "Example Evaluators/Code/Nope"}],
        dataset={"path": "qa/missing"},
    )
    assert "no stored prompt 'qa/unstored'" in text and "stored prompts: none" in text
    assert "no evaluator has the path 'Example Evaluators/Code/Nope' (known: " in text
    assert "Example Evaluators/Code/Exact match" in text and "Example Evaluators/AI/Semantic similarity" in text
    assert "no stored dataset 'qa/missing'" in text and "stored datasets: 'qa/known'" in text
    assert "needs the results root" in problems(dataset={"path": "qa/known"})


def test_prompt_and_judge_mistakes_are_named() -> None:
    text = problems(
        file={"path": "qa/prompt", "version": {"model": "gpt-4o", "template": "Q: {{question}} {{missing}}"}},
        evaluators=[
            {
                "path": "judge",
                "evaluator_type": "llm",
                "return_type": "select",
                "prompt": {"model": "openai/gpt-4o", "template": "Rate {{output}} against {{target}}"},
            },
            {"path": "Example Evaluators/Code/Length", "model": "openai/gpt-4o"},
        ],
        model_options={"base_url": "http://127.0.0.1:9", "colour": "red"},
    )
    assert "model_options: colour: not known" in text
    assert "datapoints[0] (no missing)" in text and "template's placeholders have no value" in text
    assert "unknown placeholder(s) target" in text  # a target_free judge sees no target
    assert "a select LLM evaluator needs its options" in text
    assert "only an LLM evaluator takes a model" in text
    both = {"path": "p", "version": PROMPT, "callable": lambda **_: "x"}
    assert "give no callable" in problems(file=both)
    assert "expected provider/model" in problems(file={"path": "p", "version": {"model": "gpt", "template": "x"}})


def test_registered_evaluators_resolve_by_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rayeval.evaluations.library.EVALUATORS", Registry("evaluators"))
    evaluations.register_evaluator(
        {"path": "team/shouty", "return_type": "boolean", "callable": lambda log: log["output"].isupper()}
    )
    spec = validate_arguments(
        "qa",
        {"path": "f", "callable": lambda question, **_: question},
        [{"path": "team/shouty", "threshold": 0.5}],
        qa_dataset(),
    )
    assert (spec.evaluators[0].path, spec.evaluators[0].threshold) == ("team/shouty", 0.5)
    with pytest.raises(EvaluationConfigError, match="(?s)register_evaluator: 2 problem.*callable: is required"):
        evaluations.register_evaluator(
            {"path": "team/broken", "return_type": "boolean", "args_type": "target_free", "x": 1}
        )


def test_an_llm_evaluator_without_its_key_stops_an_embedded_run_before_any_datapoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an embedded Ray the judges' calls have this process's environment: a judge whose key
    is missing is an error of the evaluation's arguments, before Ray starts or anything is
    written, as the prompt agent's key is in a run."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    called: list[str] = []
    with pytest.raises(EvaluationConfigError) as refused:
        evaluations.run(
            "qa",
            {"path": "qa/answerer", "callable": lambda question, messages=None: called.append(question) or "4"},
            [{"path": "Example Evaluators/AI/Semantic similarity"}],
            qa_dataset(),
            output=str(tmp_path / "results"),
            isolation="inline",
            print_report=False,
            show_progress=False,
        )
    assert "needs an API key in the environment variable OPENAI_API_KEY" in str(refused.value)
    assert "Example Evaluators/AI/Semantic similarity" in str(refused.value)
    assert not called and not (tmp_path / "results").exists()


def test_an_installed_package_offers_evaluators_by_entry_point(install_plugin) -> None:
    source = (
        "plugin = {'path': 'team/short', 'return_type': 'boolean', 'callable': lambda log: len(log['output']) < 5}\n"
    )
    install_plugin(EVALUATORS, "team/short", "my_plugin_evaluators", source)
    spec = validate_arguments(
        "qa", {"path": "f", "callable": lambda question, **_: question}, [{"path": "team/short"}], qa_dataset()
    )
    assert spec.evaluators[0].path == "team/short" and spec.evaluators[0].callable({"output": "hi"}) is True
