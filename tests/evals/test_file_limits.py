"""What `run` would choke on is refused at load time, naming file and field: nesting beyond
MAX_NESTING_DEPTH (Ray pickles evals), NaN/Infinity, duplicate keys, huge files and strings, text
that is not Unicode (lone surrogates)."""

from __future__ import annotations

import json
import os
import pickle
import threading
from pathlib import Path

import cloudpickle
import pytest

from rayeval import EvalFileError, load_evals
from rayeval.evals import check_evals, loader
from rayeval.evals.loader import (
    MAX_EVAL_FILE_BYTES,
    MAX_NESTING_DEPTH,
    MAX_PROBLEMS_PER_FILE,
    MAX_STRING_CHARS,
)

DEEP = "JSON objects and arrays nested more than 64 levels deep"
NOT_JSON = "is not valid JSON and eval files may not hold it"


def eval_text(config: str = '"correct_answer": "B"', top: str = "") -> str:
    """An eval file's text with ``config`` as its grader config's members, ``top`` as more top-level ones."""
    return f'{{"id": "e1", "task": "A or B?",{top} "grader": {{"type": "multiple_choice", "config": {{{config}}}}}}}'


def nested(levels: int) -> str:
    """``levels`` arrays, one in another, around 1."""
    return "[" * levels + "1" + "]" * levels


def problems_in(tmp_path: Path, text: str | bytes) -> tuple[str, list[tuple[str, str]]]:
    path = tmp_path / "bad.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    evals, problems = check_evals(path)
    assert not evals
    assert all(p.path == str(path) for p in problems), problems
    return str(path), [(p.field, p.message) for p in problems]


# the config array is level 4 (object, grader, config, array): level 65 is 61 [0]s further in
TOO_DEEP_FIELD = "grader.config.ground_truth" + "[0]" * (MAX_NESTING_DEPTH - 3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            eval_text(f'"correct_answer": "B", "ground_truth": {nested(500)}'), [(TOO_DEEP_FIELD, DEEP)], id="500-deep"
        ),
        pytest.param(
            eval_text(f'"correct_answer": "B", "ground_truth": {nested(5000)}'),
            [(TOO_DEEP_FIELD, DEEP)],
            id="5000-deep",
        ),
        pytest.param(
            eval_text(f'"correct_answer": "B", "ground_truth": {nested(MAX_NESTING_DEPTH - 2)}'),
            [(TOO_DEEP_FIELD, DEEP)],
            id="level-65",
        ),
        pytest.param(
            eval_text(top=' "metadata": {"a b": ' + '{"x": ' * 70 + "1" + "}" * 70 + "},"),
            [('metadata["a b"]' + ".x" * (MAX_NESTING_DEPTH - 2), DEEP)],  # metadata["a b"] is level 3
            id="deep-objects",
        ),
        pytest.param(eval_text(top=' "timeout": NaN,'), [("timeout", f"NaN {NOT_JSON}")], id="nan"),
        pytest.param(
            eval_text('"correct_answer": "B", "bounds": [0, Infinity], "low": {"x": -Infinity}'),
            [("grader.config.bounds[1]", f"Infinity {NOT_JSON}"), ("grader.config.low.x", f"-Infinity {NOT_JSON}")],
            id="infinity",
        ),
        pytest.param(
            eval_text('"correct_answer": "B", "tolerance": -1.5e999'),
            [("grader.config.tolerance", "number -1.5e999 overflows to infinity")],
            id="overflowing-number",
        ),
        pytest.param(
            eval_text('"correct_answer": "A", "correct_answer": "B"', top=' "id": "e0",'),
            [
                ("id", "duplicate key 'id': it appears 2 times in the same object and JSON keeps only the last"),
                ("grader.config.correct_answer", "duplicate key 'correct_answer': it appears 2 times"),
            ],
            id="duplicate-keys",
        ),
        pytest.param(
            eval_text('"correct_answer": "B", "rows": [{"k.1": 1, "k.1": 2, "k.1": 3}]'),
            [('grader.config.rows[0]["k.1"]', "duplicate key 'k.1': it appears 3 times")],
            id="duplicate-odd-key-in-a-list",
        ),
        pytest.param(
            eval_text(top=f' "notes": "{"n" * (MAX_STRING_CHARS + 1)}",'),
            [("notes", "string of 1,048,577 characters is longer than the 1,048,576-character limit")],
            id="long-string",
        ),
        pytest.param(
            eval_text(f'"correct_answer": "B", "{"k" * (MAX_STRING_CHARS + 1)}": 1'),
            [('grader.config["' + "k" * 40 + '..."]', "key of 1,048,577 characters is longer than")],
            id="long-key",
        ),
        pytest.param(
            eval_text(top=' "metadata": {"tags": ["ok", "x\\ud800"]},'),
            [("metadata.tags[1]", "unpaired surrogate \\ud800 at character 1: not Unicode text")],
            id="lone-surrogate",  # an agent's prompt holding it cannot be sent, nor a row stored
        ),
        pytest.param(
            eval_text('"correct_answer": "B", "m": {"\\udc00k": 1}'),
            [('grader.config.m["\\udc00k"]', "key with an unpaired surrogate \\udc00 at character 0")],
            id="lone-surrogate-key",
        ),
        pytest.param(
            eval_text(f'"correct_answer": "B", "n": [{"7" * 5000}]'),
            [("grader.config.n[0]", "integer of 5,000 digits is longer than the 4,300 digits Python reads")],
            id="huge-integer",
        ),
    ],
)
def test_each_problem_names_the_file_and_field(tmp_path: Path, text: str, expected: list[tuple[str, str]]) -> None:
    path, found = problems_in(tmp_path, text)
    assert len(found) == len(expected), found
    for (field, message), (want_field, fragment) in zip(found, expected):
        assert field == want_field and fragment in message, (field, message)
    with pytest.raises(EvalFileError) as info:
        load_evals(path)
    assert f"{path}: {expected[0][0][:60]}" in str(info.value)


def test_just_within_every_limit_loads_and_pickles(tmp_path: Path) -> None:
    """64 levels, a 1 MiB task, finite floats, repeated keys in different objects: all fine,
    and the deepest eval allowed still travels to Ray's workers (pickle and cloudpickle)."""
    task = "t" * MAX_STRING_CHARS
    config = f'"correct_answer": "B", "ground_truth": {nested(MAX_NESTING_DEPTH - 3)}, "w": [1e308, -2.5, 0], "a": {{"k": 1}}, "b": {{"k": 2}}'
    path = tmp_path / "ok.json"
    path.write_text(eval_text(config).replace('"A or B?"', f'"{task}"'))
    (eval_,) = load_evals(path)
    assert eval_.task == task and eval_.grader_specs[0].config["w"] == [1e308, -2.5, 0]
    # a surrogate pair is one character, and an escaped backslash before "ud800" is no surrogate
    path.write_text(eval_text(top=' "notes": "\\ud83d\\ude00 \\\\ud800",'))
    (eval_,) = load_evals(path)
    assert eval_.notes == "\U0001f600 \\ud800"
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        assert loads(dumps(eval_)).grader_specs[0].config == eval_.grader_specs[0].config


def test_what_the_limit_protects_against_is_real() -> None:
    """A 500-deep config cannot be pickled: why `run` crashed where `validate` passed."""
    from rayeval import Eval

    value: object = 1
    for _ in range(500):
        value = [value]
    eval_ = Eval.model_validate({"id": "e", "task": "t", "grader": {"type": "multiple_choice", "config": {"x": value}}})
    with pytest.raises((RecursionError, pickle.PicklingError)):
        cloudpickle.dumps(eval_)


def test_problems_per_file_are_capped(tmp_path: Path) -> None:
    _, found = problems_in(tmp_path, eval_text('"correct_answer": "B", "x": [' + ", ".join(["NaN"] * 50) + "]"))
    assert len(found) == MAX_PROBLEMS_PER_FILE + 1
    assert found[-2] == (
        f"grader.config.x[{MAX_PROBLEMS_PER_FILE - 1}]",
        f"NaN {NOT_JSON} (write a number, a string or null)",
    )
    assert found[-1] == ("", f"more problems not shown (at most {MAX_PROBLEMS_PER_FILE} per file)")


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as file:
        file.truncate(MAX_EVAL_FILE_BYTES + 1)  # sparse: costs no disk

    def no_reading(*args: object) -> bytes:
        raise AssertionError("the file was read")

    monkeypatch.setattr(loader, "_read_at_most", no_reading)
    _, problems = check_evals(path)
    assert [(p.path, p.field, p.message) for p in problems] == [
        (str(path), "", f"file is larger than the 16 MiB limit for eval files ({MAX_EVAL_FILE_BYTES + 1:,} bytes)")
    ]


def test_a_file_exactly_at_the_size_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "padded.json"
    text = eval_text()
    path.write_text(text + " " * (MAX_EVAL_FILE_BYTES - len(text)))
    assert [e.id for e in load_evals(path)] == ["e1"]


def test_a_stream_without_a_size_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    """A named pipe says nothing of its size: reading stops just past the limit."""
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    written = []

    def writer() -> None:
        with path.open("wb") as pipe:
            try:
                for _ in range(64):  # 64 MiB on offer
                    pipe.write(b" " * (1 << 20))
                    written.append(1)
            except BrokenPipeError:
                pass

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    _, problems = check_evals(path)
    thread.join(timeout=10)
    assert [(p.field, p.message) for p in problems] == [("", "file is larger than the 16 MiB limit for eval files")]
    assert len(written) < 64


def test_each_bad_file_in_a_folder_is_reported_and_good_ones_still_load(tmp_path: Path) -> None:
    (tmp_path / "a_nan.json").write_text(eval_text(top=' "timeout": NaN,').replace('"e1"', '"a"'))
    (tmp_path / "b_dup.json").write_text(eval_text(top=' "task": "again",').replace('"e1"', '"b"'))
    (tmp_path / "c_good.json").write_text(json.dumps(json.loads(eval_text()) | {"id": "c"}))
    evals, problems = check_evals(tmp_path)
    assert [e.id for e in evals] == ["c"]
    assert [(Path(p.path).name, p.field) for p in problems] == [("a_nan.json", "timeout"), ("b_dup.json", "task")]
