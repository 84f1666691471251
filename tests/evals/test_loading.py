"""Eval files: valid ones load unchanged, broken ones give every problem with file and field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rayeval import Eval, EvalFileError, load_evals
from rayeval.evals import check_evals

GOOD_GRADER = {"type": "multiple_choice", "config": {"correct_answer": "B"}}


def write(path: Path, content: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content))
    return path


def good_eval(**overrides: object) -> dict:
    data = {"id": "e1", "task": "Pick one. <EVAL_ANSWER>{\"answer\": \"A|B\"}</EVAL_ANSWER>", "grader": GOOD_GRADER}
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not ...}


def problems_for(path: Path) -> list[tuple[str, str, str]]:
    _, problems = check_evals(path)
    return [(p.path, p.field, p.message) for p in problems]


def test_valid_eval_keeps_unknown_keys_and_exposes_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "e1.json", good_eval(canary="GUID-123", data_node=["a.h5ad", "b.h5ad"], timeout="30"))
    (eval_,) = load_evals(path)
    assert isinstance(eval_, Eval)
    assert eval_.model_extra == {"canary": "GUID-123"}
    assert eval_.data_nodes == ["a.h5ad", "b.h5ad"]
    assert eval_.timeout == 30
    assert eval_.source_path == path
    assert eval_.grader_specs[0].config == {"correct_answer": "B"}


def test_folder_loading_is_recursive_sorted_and_skips_manifest(tmp_path: Path) -> None:
    write(tmp_path / "b" / "two.json", good_eval(id="two"))
    write(tmp_path / "a" / "one.json", good_eval(id="one"))
    write(tmp_path / "manifest.json", {"not": "an eval"})
    write(tmp_path / "notes.txt", "ignored")
    assert [e.id for e in load_evals(tmp_path)] == ["one", "two"]


def test_graders_list_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path / "e.json", good_eval(grader=..., graders=[GOOD_GRADER, {"type": "finished_file"}]))
    (eval_,) = load_evals(path)
    assert [s.type for s in eval_.grader_specs] == ["multiple_choice", "finished_file"]
    assert eval_.grader_specs[1].config == {}


@pytest.mark.parametrize(
    "overrides, field, fragment",
    [
        ({"grader": ..., "graders": ...}, "grader", "one of 'grader' or 'graders' is required"),
        ({"graders": [GOOD_GRADER]}, "grader", "mutually exclusive"),
        ({"grader": ..., "graders": []}, "graders", "non-empty"),
        ({"grader": {"type": "rubric", "config": {}}}, "grader.type", "unknown grader type 'rubric'"),
        ({"grader": {"type": "", "config": {}}}, "grader.type", "non-empty"),
        ({"grader": {"config": {}}}, "grader.type", "missing"),
        ({"grader": {"type": "multiple_choice", "config": None}}, "grader.config", "dict"),
        ({"grader": {"type": "multiple_choice", "config": [1]}}, "grader.config", "dict"),
        ({"grader": ..., "graders": [GOOD_GRADER, {"type": "nope"}]}, "graders[1].type", "unknown grader type"),
        ({"grader": ..., "graders": ["x"]}, "graders[0]", ""),
        ({"grader": {"type": "multiple_choice", "config": {}}}, "grader.config", "configuration error"),
        ({"timeout": 0}, "timeout", "positive"),
        ({"agent_timeout": -5}, "agent_timeout", "positive"),
        ({"download_timeout": "soon"}, "download_timeout", "positive"),
        ({"timeout": True}, "timeout", "positive"),
        ({"id": "../escape"}, "id", "'/'"),
        ({"id": "a\\b"}, "id", "'/'"),
        ({"id": ".."}, "id", "'..'"),
        ({"id": "bad\nid"}, "id", "control"),
        ({"id": ""}, "id", "non-empty"),
        ({"id": 7}, "id", "string"),
        ({"id": ...}, "id", "missing"),
        ({"task": ...}, "task", "missing"),
        ({"data_node": [1, "x"]}, "data_node", ""),
        ({"metadata": "qc"}, "metadata", "dict"),
    ],
)
def test_each_bad_field_is_named(tmp_path: Path, overrides: dict, field: str, fragment: str) -> None:
    path = write(tmp_path / "bad.json", good_eval(**overrides))
    found = problems_for(path)
    assert found, "expected a problem"
    assert all(p == str(path) for p, _, _ in found)
    assert any(f.startswith(field) and fragment in m for _, f, m in found), found
    with pytest.raises(EvalFileError) as info:
        load_evals(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b"\xff\xfe\x00{", "UTF-8"),
        (b'{"id": "x", "task": ', "invalid JSON at line 1"),
        (b"[1, 2]", "must be a JSON object, got list"),
        (b'"just a string"', "got str"),
        (b"[" * 100000 + b"]" * 100000, "JSON"),
    ],
)
def test_broken_files_are_clean_errors(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = write(tmp_path / "broken.json", content)
    found = problems_for(path)
    assert len(found) == 1 and found[0][0] == str(path) and fragment in found[0][2], found


def test_unreadable_file(tmp_path: Path) -> None:
    """Reading /proc/self/mem fails with an I/O error even for root, unlike a chmod 0 file."""
    path = tmp_path / "unreadable.json"
    path.symlink_to("/proc/self/mem")
    (problem,) = problems_for(tmp_path)
    assert problem[0] == str(path) and problem[2].startswith("cannot read file:"), problem


def test_unreadable_path_and_missing_path(tmp_path: Path) -> None:
    fake = tmp_path / "dir.json"
    fake.mkdir()
    (fake / "inner.json").write_text(json.dumps(good_eval()))
    # a *.json directory passed explicitly is searched, not read as a file
    assert [e.id for e in load_evals(fake)] == ["e1"]
    missing = tmp_path / "nope.json"
    assert problems_for(missing) == [(str(missing), "", "no such file or folder")]
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    assert "no *.json" in problems_for(empty_dir)[0][2]


def test_every_problem_across_files_is_reported_together(tmp_path: Path) -> None:
    write(tmp_path / "a.json", good_eval(id="../x", timeout=-1))
    write(tmp_path / "b.json", b"{")
    write(tmp_path / "c.json", good_eval(id="ok"))
    write(tmp_path / "d.json", good_eval(id="ok"))
    with pytest.raises(EvalFileError) as info:
        load_evals(tmp_path)
    problems = info.value.problems
    by_file = {Path(p.path).name: p for p in problems}
    assert set(by_file) == {"a.json", "b.json", "d.json"}
    assert {p.field for p in problems if p.path.endswith("a.json")} == {"id", "timeout"}
    assert "duplicate eval id 'ok'" in by_file["d.json"].message


def test_grader_config_dry_check_can_be_turned_off(tmp_path: Path) -> None:
    path = write(tmp_path / "e.json", good_eval(grader={"type": "numeric_tolerance", "config": {}}))
    assert "configuration error" in problems_for(path)[0][2]
    assert [e.id for e in load_evals(path, check_grader_configs=False)] == ["e1"]
