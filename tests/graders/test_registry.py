"""The registry: built-in names and aliases, user graders by decorator and by entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rayeval import grade, load_evals
from rayeval.graders import (
    GRADER_REGISTRY,
    Grader,
    GraderResult,
    get_grader,
    register_grader,
    registry,
)

BUILT_IN = {
    "numeric_tolerance",
    "numeric_range",
    "label_set_jaccard",
    "jaccard_label_set",
    "distribution_comparison",
    "marker_gene_precision_recall",
    "marker_gene_separation",
    "spatial_adjacency",
    "multiple_choice",
    "refusal_vocab",
    "predicate_leaf",
    "all_of",
    "composite",
    "average_of",
    "list_match",
    "dict_match",
    "longest_subsequence",
    "finished_file",
    "rubric",
}


def test_every_reference_type_is_registered() -> None:
    assert BUILT_IN <= set(GRADER_REGISTRY)
    assert GRADER_REGISTRY["jaccard_label_set"] is GRADER_REGISTRY["label_set_jaccard"]
    assert GRADER_REGISTRY["composite"] is GRADER_REGISTRY["all_of"]


def test_get_grader_returns_fresh_instances_and_rejects_unknown_names() -> None:
    assert get_grader("multiple_choice") is not get_grader("multiple_choice")
    with pytest.raises(ValueError, match="no_such_grader.*numeric_tolerance"):
        get_grader("no_such_grader")


def test_evaluate_is_an_alias() -> None:
    grader = get_grader("multiple_choice")
    config = {"correct_answer": "B"}
    assert grader.evaluate({"answer": "b"}, config) == grader.evaluate_answer({"answer": "b"}, config)


@pytest.fixture
def clean_registry():
    before = set(GRADER_REGISTRY)
    yield
    for name in set(GRADER_REGISTRY) - before:
        GRADER_REGISTRY.unregister(name)


def test_user_grader_by_decorator_works_in_eval_files_and_composites(tmp_path: Path, clean_registry) -> None:
    @register_grader("exact_word")
    class ExactWord(Grader):
        def _evaluate(self, answer, config):
            ok = isinstance(answer, dict) and answer.get("word") == config.get("word")
            return GraderResult(passed=ok, score=float(ok))

    path = tmp_path / "e.json"
    path.write_text(
        json.dumps({"id": "w", "task": "say it", "grader": {"type": "exact_word", "config": {"word": "hi"}}})
    )
    (eval_,) = load_evals(path)
    assert grade(eval_, {"word": "hi"}).passed is True
    assert grade(eval_, {"word": "no"}).passed is False
    composite = {"children": [{"type": "exact_word", "config": {"word": "hi"}}]}
    assert get_grader("all_of").evaluate_answer({"word": "hi"}, composite).passed is True


def test_user_grader_that_raises_becomes_a_grader_error(clean_registry) -> None:
    @register_grader("explodes")
    class Explodes(Grader):
        def _evaluate(self, answer, config):
            raise RuntimeError("boom")

    result = get_grader("explodes").evaluate_answer({}, {})
    assert result.passed is False and result.score == 0.0
    assert result.metrics == {"grader_error": "RuntimeError: boom"}


def test_register_grader_rejects_non_graders() -> None:
    with pytest.raises(TypeError):
        register_grader("x")(dict)
    with pytest.raises(ValueError):
        register_grader("")


def test_user_grader_by_entry_point(install_plugin) -> None:
    source = (
        "from rayeval.graders import Grader, GraderResult\n"
        "class Always(Grader):\n"
        "    def _evaluate(self, answer, config):\n"
        "        return GraderResult(passed=True, score=1.0)\n"
        "plugin = Always\n"
    )
    install_plugin(GRADER_REGISTRY, "always_pass", "my_plugin_graders", source)
    assert get_grader("always_pass").evaluate_answer(None, {}).passed is True


def test_a_broken_grader_plugin_is_skipped_with_a_warning_naming_it(install_plugin, caplog) -> None:
    source = "raise ImportError('needs torch')\n"
    install_plugin(GRADER_REGISTRY, "broken_type", "broken_plugin_graders", source)
    with caplog.at_level("WARNING", logger="rayeval.registry"):
        assert get_grader("multiple_choice") is not None  # the built-ins still work
        assert registry.is_registered("broken_type") is False
    assert "'broken_type'" in caplog.text and "ImportError: needs torch" in caplog.text
