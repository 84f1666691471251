"""The README's Python examples run as written (those that need no outside service)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
# Examples that name a run id, an S3 bucket or a Ray batch run are exercised by their own tests.
RUNNABLE = [b for b in BLOCKS if "<id>" not in b and "batch.run(" not in b and "evaluations.run(" not in b]


def test_readme_has_the_examples() -> None:
    assert len(BLOCKS) >= 6 and len(RUNNABLE) >= 4


@pytest.mark.parametrize("block", RUNNABLE, ids=[f"block{i}" for i in range(len(RUNNABLE))])
def test_readme_example_runs(block: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("RAYEVAL_WORK_ROOT", str(tmp_path / "work"))
    exec(compile(block, "README.md", "exec"), {"__name__": "readme_example"})  # noqa: S102 - the README's own example
