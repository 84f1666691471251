"""Answer extraction: the same answers as the regex it replaced, in linear time on hostile text."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayeval.agents import _cli
from rayeval.sandbox.config import MAX_ANSWER_FILE_BYTES
from rayeval.unit.answers import (
    answer_envelope,
    extract_tagged,
    find_answer,
    read_answer_files,
    unfence,
)
from rayeval.unit.workspace import list_work_dir

# The implementation extract_tagged replaced, kept here as the reference for its results.
_TAGGED = re.compile(r"<EVAL_ANSWER>(.*?)</EVAL_ANSWER>", re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


def regex_extract_tagged(text: str) -> Any:
    for raw in reversed(_TAGGED.findall(text)):
        body = raw.strip()
        fenced = _FENCE.match(body)
        for candidate in (body, fenced.group(1).strip() if fenced else None):
            if candidate is None:
                continue
            try:
                return json.loads(candidate)
            except (json.JSONDecodeError, RecursionError):
                continue
    return None


def regex_unfence(body: str) -> str | None:
    fenced = _FENCE.match(body)
    return fenced.group(1).strip() if fenced else None


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6)),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
# Blanks of every kind str.strip and \s know, beyond ASCII ones.
blanks = st.lists(
    st.sampled_from([" ", "\n", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2003"]), max_size=3
).map("".join)
languages = st.sampled_from(["", "json", "JSON", "py3", "é", "`", "{"])
snippets = st.one_of(
    json_values.map(json.dumps),
    st.sampled_from(["{", "}", "[1,", '{"a"', "NaN", "null", "[[[[", "x", "`", "``"]),
    st.text(max_size=3),
)
fenced = st.tuples(languages, blanks, snippets, blanks).map(lambda parts: "```" + "".join(parts) + "```")
tags = st.sampled_from(["<EVAL_ANSWER>", "</EVAL_ANSWER>", "<EVAL_ANSWER", "/EVAL_ANSWER>"])
tagged = st.tuples(blanks, st.one_of(fenced, snippets), blanks).map(
    lambda parts: "<EVAL_ANSWER>" + "".join(parts) + "</EVAL_ANSWER>"
)
texts = st.lists(st.one_of(tagged, tags, fenced, snippets, blanks), min_size=1, max_size=10).map("".join)
fence_bodies = st.one_of(fenced, st.lists(st.one_of(fenced, snippets, languages, blanks), max_size=6).map("".join)).map(
    str.strip
)


def same(left: Any, right: Any) -> bool:
    """Equal as JSON values (NaN included, 1 and 1.0 told apart)."""
    return json.dumps(left) == json.dumps(right)


@settings(max_examples=1500, deadline=None)
@given(texts)
def test_extract_tagged_matches_the_regex(text: str) -> None:
    assert same(extract_tagged(text), regex_extract_tagged(text))


@settings(max_examples=1500, deadline=None)
@given(fence_bodies)
def test_unfence_matches_the_regex(body: str) -> None:
    assert unfence(body) == regex_unfence(body)


def test_examples() -> None:
    assert extract_tagged('<EVAL_ANSWER>{"a": 1}</EVAL_ANSWER> <EVAL_ANSWER>{"a": 2}</EVAL_ANSWER>') == {"a": 2}
    assert extract_tagged('<EVAL_ANSWER>{"a": 1}</EVAL_ANSWER> <EVAL_ANSWER>{broken</EVAL_ANSWER>') == {"a": 1}
    assert extract_tagged('<EVAL_ANSWER>\n```json\n{"a": 1}\n```\n</EVAL_ANSWER>') == {"a": 1}
    assert (
        extract_tagged('<EVAL_ANSWER>x<EVAL_ANSWER>{"a": 1}</EVAL_ANSWER>') is None
    )  # one body, "x<EVAL_ANSWER>{...}"
    assert extract_tagged('<EVAL_ANSWER>{"a": 1}</EVAL_ANSWER><EVAL_ANSWER>{"a": 2}') == {"a": 1}
    assert extract_tagged("no tags") is None


#: A hang guard, not a speed target (bench figures live in scripts/): the quadratic searches
#: these texts caught took minutes; linear ones take well under a second even on a loaded machine.
HANG_S = 60


def _timed(text: str) -> tuple[Any, float]:
    start = time.perf_counter()
    found = extract_tagged(text)
    return found, time.perf_counter() - start


def test_unclosed_open_tags_are_linear() -> None:
    # The regex retried from each of the 50,000 open tags to the end of the text (minutes).
    text = '<EVAL_ANSWER>{"a": 1}</EVAL_ANSWER>' + "<EVAL_ANSWER>" * 50_000
    found, seconds = _timed(text)
    assert found == {"a": 1}
    assert seconds < HANG_S, seconds


def test_invalid_fenced_bodies_are_linear() -> None:
    # 20 bodies of 20 KB: a fence followed by a run of letters or blanks that is not JSON. The
    # fence regex backtracked over each run quadratically (over a minute in all).
    bodies = ["```" + "a" * 20_000 + "x", "```" + " " * 20_000 + "x"] * 10
    text = '<EVAL_ANSWER>{"a": 1}</EVAL_ANSWER>' + "".join(f"<EVAL_ANSWER>{body}</EVAL_ANSWER>" for body in bodies)
    assert len(text) > 400_000
    found, seconds = _timed(text)
    assert found == {"a": 1}
    assert seconds < HANG_S, seconds


def test_many_small_invalid_bodies_and_deep_nesting() -> None:
    text = (
        "".join('<EVAL_ANSWER>{"a": [1,</EVAL_ANSWER>' for _ in range(20_000))
        + "<EVAL_ANSWER>"
        + "[" * 200_000
        + "</EVAL_ANSWER>"
    )
    found, seconds = _timed(text)
    assert found is None
    assert seconds < HANG_S, seconds


def test_an_integer_over_the_digit_limit_is_no_answer(tmp_path: Path) -> None:
    # json.loads raises a plain ValueError for it (Python refuses quadratic int parsing)
    huge = "1" * 5000
    assert extract_tagged(f'<EVAL_ANSWER>{{"a": 1}}</EVAL_ANSWER><EVAL_ANSWER>{{"n": {huge}}}</EVAL_ANSWER>') == {
        "a": 1
    }
    (tmp_path / "eval_answer.json").write_text(f'{{"n": {huge}}}')
    found = read_answer_files(tmp_path, list_work_dir(tmp_path))
    assert found.answer is None and "eval_answer.json is not valid JSON: Exceeds the limit" in found.problem


def test_answer_envelope_keeps_answers_of_any_json_type(tmp_path: Path) -> None:
    """Objects travel in the envelope; a list or a string is written as the answer file."""
    for answer in ({"answer": "B"}, None, ["B", "C"], "B"):
        work = tmp_path / f"w{len(list(tmp_path.iterdir()))}"
        work.mkdir()
        returned = answer_envelope(answer, {"n_turns": 1}, work)
        found = find_answer(returned, work, list_work_dir(work))
        assert found.answer == answer and found.metadata == {"n_turns": 1}


def test_a_text_of_many_commas_is_one_value_and_many_tiny_values_are_refused_unread() -> None:
    """The bound counts values: a CSV table in one string (1.35 M commas) is one, read; 1.5 M
    two-letter strings or empty objects are too many, refused before they are decoded."""
    from rayeval._json import TooManyValues, loads_bounded

    table = "\n".join(",".join(map(str, range(10))) for _ in range(150_000))
    assert loads_bounded(json.dumps({"table": table}), MAX_ANSWER_FILE_BYTES) == {"table": table}
    for many in (["ab"] * 1_500_000, [{}] * 1_500_000, [[1, 2]] * 400_000):
        with pytest.raises(TooManyValues, match="holds more than 1,048,576 JSON values"):
            loads_bounded(json.dumps(many), MAX_ANSWER_FILE_BYTES)
    assert loads_bounded(json.dumps(["ab"] * 1_000_000), MAX_ANSWER_FILE_BYTES) == ["ab"] * 1_000_000


HOSTILE_FILES = {
    "a link out of the work folder": None,
    "larger than what is read": None,
    "an integer over the digit limit": b'{"n": ' + b"1" * 5000 + b"}",
    "nesting beyond the parser": b"[" * 100_000 + b"]" * 100_000,
    "not UTF-8": b'{"a": "\xff"}',
    "more values than its bytes allow": b"[" + b"{}," * 1_500_000 + b"{}]",
}


@pytest.mark.parametrize("kind", list(HOSTILE_FILES))
def test_the_agent_side_and_the_trusted_side_read_answer_files_alike(tmp_path: Path, kind: str) -> None:
    """One reader for both: the trusted side's (``read_answer_files``) and the agent harnesses'
    (``_cli.read_answer``) refuse the same hostile files the same way."""
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    answer = work_dir / "eval_answer.json"
    if kind == "a link out of the work folder":
        (tmp_path / "elsewhere.json").write_text('{"a": 1}')
        answer.symlink_to(tmp_path / "elsewhere.json")
    elif kind == "larger than what is read":
        with open(answer, "wb") as handle:  # sparse: nothing is written, and nothing is read
            handle.truncate(MAX_ANSWER_FILE_BYTES + 1)
    else:
        answer.write_bytes(HOSTILE_FILES[kind])
    found = read_answer_files(work_dir, list_work_dir(work_dir))
    answer_value, details, name = _cli.read_answer(work_dir)
    assert found.answer is None and answer_value is None
    if kind == "a link out of the work folder":  # not a regular file: no answer file at all
        assert found.source is None and name is None
        assert "was not written" in details["error"]
        return
    assert found.source == name == "eval_answer.json"
    assert found.problem == details["error"]
    assert found.oversized is kind.startswith(("larger", "more values"))


def _finished_in(work: Path) -> tuple[Any, str | None]:
    found = read_answer_files(work, list_work_dir(work))
    return found.answer, found.source


def _write(work: Path, relative: str, text: str = "finished") -> None:
    path = work / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_finished_file_in_a_subfolder_is_found_as_the_reference_finds_it(tmp_path: Path) -> None:
    """Issue 18: an agent working in a project subfolder writes finished.txt there."""
    _write(tmp_path, "repo/finished.txt", " finished\n")
    assert _finished_in(tmp_path) == ({"finished_file_contents": " finished\n"}, "repo/finished.txt")
    # first in sorted path order, as sorted(rglob("finished.txt")): a folder's files and
    # subfolders by name, each subfolder's contents before the next name
    _write(tmp_path, "a/finished.txt", "a")
    _write(tmp_path, "a/b/finished.txt", "a/b")
    assert _finished_in(tmp_path)[1] == "a/b/finished.txt"
    assert min(tmp_path.rglob("finished.txt")) == tmp_path / "a/b/finished.txt"  # the reference's rule
    # the work folder's own (and the legacy subfolder's) marker and any answer file come first
    _write(tmp_path, "agent_workspace/finished.txt", "legacy")
    assert _finished_in(tmp_path)[1] == "agent_workspace/finished.txt"
    _write(tmp_path, "finished.txt", "root")
    assert _finished_in(tmp_path)[1] == "finished.txt"
    _write(tmp_path, "eval_answer.json", '{"x": 1}')
    assert _finished_in(tmp_path) == ({"x": 1}, "eval_answer.json")


def test_nested_finished_file_skips_data_links_and_other_kinds(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    _write(outside, "finished.txt")
    work = tmp_path / "work"
    for relative in ("data/finished.txt", "agent_workspace/data/finished.txt"):
        _write(work, relative)  # staged data, not the agent's marker
    (work / "linked").symlink_to(outside, target_is_directory=True)
    (work / "sub").mkdir()
    (work / "sub" / "finished.txt").symlink_to(outside / "finished.txt")
    (work / "dir" / "finished.txt").mkdir(parents=True)
    found = read_answer_files(work, list_work_dir(work))
    assert found.answer is None and found.source is None
    _write(work, "deeper/data/finished.txt", "not staged data")  # only the top data folders are skipped
    assert _finished_in(work)[1] == "deeper/data/finished.txt"


def test_nested_finished_file_search_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent shapes the tree: too deep or too many entries, and the marker is not found."""
    from rayeval.unit import answers

    deep = "/".join(["d"] * answers.MAX_SEARCHED_DEPTH)
    _write(tmp_path / "w1", f"{deep}/finished.txt")
    assert _finished_in(tmp_path / "w1")[1] == f"{deep}/finished.txt"
    _write(tmp_path / "w2", f"{deep}/d/finished.txt")
    assert _finished_in(tmp_path / "w2")[0] is None

    monkeypatch.setattr(answers, "MAX_SEARCHED_ENTRIES", 50)
    work = tmp_path / "w3"
    _write(work, "z/finished.txt")
    for index in range(20):
        (work / f"a{index:02}").mkdir()
    assert _finished_in(work)[1] == "z/finished.txt"  # 20 + 1 + 1 entries
    for index in range(40):
        (work / "a00" / str(index)).touch()
    assert _finished_in(work)[0] is None  # 62 entries before z/finished.txt is reached
