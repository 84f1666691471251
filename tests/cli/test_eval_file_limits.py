"""`rayeval validate` refuses what `rayeval run` would choke on (a 500-deep file crashed Ray's
pickling), and `run` refuses it too, with `file: field: message`, exit 2, before any work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rayeval.evals.loader import (
    MAX_EVAL_FILE_BYTES,
    MAX_NESTING_DEPTH,
    MAX_STRING_CHARS,
)

REPO = Path(__file__).resolve().parents[2]
DEEP = "JSON objects and arrays nested more than 64 levels deep (the limit for eval files)"


def rayeval(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rayeval.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def eval_text(eval_id: str, config: str = '"correct_answer": "B"', top: str = "") -> str:
    return f'{{"id": "{eval_id}", "task": "A or B?",{top} "grader": {{"type": "multiple_choice", "config": {{{config}}}}}}}'


def deep_evals(root: Path) -> Path:
    """``root/evals`` holding one good eval and one whose grader config nests 500 deep."""
    evals = root / "evals"
    evals.mkdir(parents=True)
    (evals / "good.json").write_text(eval_text("good"))
    (evals / "deep.json").write_text(
        eval_text("deep", '"correct_answer": "B", "ground_truth": ' + "[" * 500 + "1" + "]" * 500)
    )
    return evals


DEEP_FIELD = "grader.config.ground_truth" + "[0]" * (MAX_NESTING_DEPTH - 3)


def test_validate_refuses_a_500_deep_file(tmp_path: Path) -> None:
    evals = deep_evals(tmp_path)
    done = rayeval("validate", str(evals))
    assert done.returncode == 2, done.stderr
    assert f"{evals / 'deep.json'}: {DEEP_FIELD}: {DEEP}\n" in done.stderr
    assert "1 problem(s) found; 1 eval(s) valid" in done.stderr and "Traceback" not in done.stderr


def test_run_refuses_a_500_deep_file_before_any_work(tmp_path: Path) -> None:
    evals = deep_evals(tmp_path)
    done = rayeval("run", str(evals), "--agent", "reference", "--output", str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 2, done.stderr
    assert f"{evals / 'deep.json'}: {DEEP_FIELD}: {DEEP}" in done.stderr
    assert "Traceback" not in done.stderr and "Pickl" not in done.stderr
    assert not (tmp_path / "out").exists()  # no run was made: no unit ran, no row was stored


def test_validate_names_file_and_field_of_every_kind_of_problem(tmp_path: Path) -> None:
    evals = tmp_path / "evals"
    evals.mkdir()
    files = {
        "nan.json": eval_text("nan", '"correct_answer": "B", "weights": [1, NaN]'),
        "inf.json": eval_text("inf", top=' "timeout": Infinity,'),
        "dup.json": eval_text("dup", '"correct_answer": "A", "correct_answer": "B"'),
        "long.json": eval_text("long", top=f' "notes": "{"x" * (MAX_STRING_CHARS + 1)}",'),
    }
    for name, text in files.items():
        (evals / name).write_text(text)
    with (evals / "huge.json").open("wb") as file:
        file.truncate(MAX_EVAL_FILE_BYTES + 1)
    done = rayeval("validate", str(evals))
    assert done.returncode == 2, done.stderr
    expected = [
        f"{evals / 'dup.json'}: grader.config.correct_answer: duplicate key 'correct_answer': it appears 2 times in the same object and JSON keeps only the last",
        f"{evals / 'huge.json'}: file is larger than the 16 MiB limit for eval files ({MAX_EVAL_FILE_BYTES + 1:,} bytes)",
        f"{evals / 'inf.json'}: timeout: Infinity is not valid JSON and eval files may not hold it",
        f"{evals / 'long.json'}: notes: string of 1,048,577 characters is longer than the 1,048,576-character limit for eval files",
        f"{evals / 'nan.json'}: grader.config.weights[1]: NaN is not valid JSON and eval files may not hold it",
    ]
    lines = done.stderr.splitlines()
    assert len(lines) == len(expected) + 1, done.stderr
    for line, start in zip(lines, expected):
        assert line.startswith(start), (line, start)
    assert lines[-1] == "5 problem(s) found; 0 eval(s) valid"
