"""The README's Python examples run as written: those that need no outside service in the
repository, and those that start Ray or read a run (from a local root and from S3 on
127.0.0.1) in a scratch folder."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_s3 import S3Bucket

REPO = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
# Examples that name a run id, an S3 bucket or a Ray batch run: the tests at the end.
RUNNABLE = [b for b in BLOCKS if "<id>" not in b and "batch.run(" not in b and "evaluations.run(" not in b]


def test_readme_has_the_examples() -> None:
    assert len(BLOCKS) >= 6 and len(RUNNABLE) >= 4


@pytest.mark.parametrize("block", RUNNABLE, ids=[f"block{i}" for i in range(len(RUNNABLE))])
def test_readme_example_runs(block: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("RAYEVAL_WORK_ROOT", str(tmp_path / "work"))
    exec(compile(block, "README.md", "exec"), {"__name__": "readme_example"})  # noqa: S102 - the README's own example


# The examples that name a run, read it from S3 or start Ray: run in a scratch folder (the
# README's relative paths: `evals`, `rayeval-results`), `<id>` standing for the run made there.
BATCH_RUN = next(b for b in BLOCKS if "batch.run(" in b)
ON_A_RUN = [b for b in BLOCKS if "<id>" in b]
EVALUATIONS_RUN = next(b for b in BLOCKS if "evaluations.run(" in b)


@pytest.fixture(scope="module")
def _units_work_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One work root (the units' folders) for the module's runs: their environments are alike,
    and share a Ray."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAYEVAL_WORK_ROOT", str(tmp_path_factory.mktemp("work")))
        yield


@pytest.fixture
def shared_ray(_units_work_root: None, shared_ray: None) -> None:
    """The shared Ray, started once the work root is set: its workers make the units' folders there."""


def _in_scratch_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "evals").symlink_to(REPO / "evals")
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("shared_ray")
def test_readme_batch_run_and_the_examples_that_read_its_run(
    s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _in_scratch_folder(monkeypatch, tmp_path)
    ran: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(BATCH_RUN, "README.md", "exec"), ran)  # noqa: S102 - the README's own example
    summary = ran["summary"]
    assert summary.stored_rows == 20 and summary.errors == 0
    # the same run at s3://bucket/prefix, for the S3 line of the pandas example
    results = tmp_path / "rayeval-results"
    for part in (results / f"run_id={summary.run_id}").rglob("*.parquet"):
        s3_bucket.put(f"prefix/{part.relative_to(results).as_posix()}", part.read_bytes())
    assert len(ON_A_RUN) == 3
    for block in ON_A_RUN:
        code = (
            block.replace("<id>", summary.run_id)
            .replace("s3://bucket/", f"s3://{s3_bucket.name}/")
            .replace("http://127.0.0.1:9000", s3_bucket.endpoint_url)
        )
        scope: dict[str, Any] = {"__name__": "readme_example"}
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the README's own example
        frame = scope.get("rows", scope.get("units"))
        assert len(frame) == 20 and set(frame["status"]) == {"passed"}, block
        assert set(frame["run_id"]) == {summary.run_id} and set(frame["model"]) == {"default"}, block


@pytest.mark.usefixtures("shared_ray")
def test_readme_evaluations_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _in_scratch_folder(monkeypatch, tmp_path)
    scope: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(EVALUATIONS_RUN, "README.md", "exec"), scope)  # noqa: S102 - the README's own example
    result = scope["result"]
    assert result.passed and [(c.path, c.score, c.threshold_check) for c in result.checks] == [
        ("exact", 1.0, True),
        ("length", 3.0, None),
    ]
    printed = capsys.readouterr().out
    assert "Accuracy (%)" in printed and "clipped to [0, 100]" in printed
