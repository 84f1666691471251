from __future__ import annotations

from pathlib import Path

import pytest

# Fast engine settings for tests: no progress bar, quick flushes.
FAST = {"show_progress": False, "print_report": False, "flush_seconds": 0.2}


@pytest.fixture(autouse=True)
def _quiet_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")


def qa_dataset(path: str = "qa/smoke") -> dict:
    """Five questions; the third one has messages, the last one has no known answer."""
    return {
        "path": path,
        "datapoints": [
            {"inputs": {"question": "2+2?"}, "target": {"answer": "4"}},
            {"inputs": {"question": "capital of France?"}, "target": {"answer": "Paris"}},
            {
                "inputs": {"question": "colour of the sky?"},
                "messages": [{"role": "user", "content": "be brief"}],
                "target": {"answer": "blue"},
            },
            {"inputs": {"question": "3*3?"}, "target": {"answer": "9"}},
            {"inputs": {"question": "meaning of life?"}, "target": {"answer": "42"}},
        ],
    }


def results_root(tmp_path: Path) -> str:
    return str(tmp_path / "results")
