"""The HTML report is one self-contained file: parses, embeds its images, links nothing."""

from __future__ import annotations

import base64
from html.parser import HTMLParser
from pathlib import Path

import matplotlib  # noqa: F401  (the report extra; part of dev)
import pandas as pd
import pytest

from rayeval.report import ReportError, read_units, render_html, write_html
from rayeval.report.reader import ALL_COLUMNS


class Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.images: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "poster", "data", "action") and value is not None:
                self.urls.append((tag, name, value))
            if tag == "img" and name == "src" and value:
                self.images.append(value)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_report_is_self_contained(corpus_root: Path, tmp_path: Path) -> None:
    units = read_units(corpus_root, columns=ALL_COLUMNS)
    target = write_html(tmp_path / "report.html", units, title="scbench <replay>", source=str(corpus_root))
    text = target.read_text(encoding="utf-8")
    parser = Collector()
    parser.feed(text)
    parser.close()
    assert text.startswith("<!DOCTYPE html>")
    # Accuracy bars, cost vs accuracy, two heatmaps (task, platform).
    assert len(parser.images) == 4
    for uri in parser.images:
        assert uri.startswith("data:image/png;base64,")
        assert base64.b64decode(uri.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    # Nothing external: every URL is a data URI; no scripts, stylesheets links or @import/url().
    assert all(value.startswith("data:") for _, _, value in parser.urls), parser.urls
    assert "script" not in parser.tags and "link" not in parser.tags and "iframe" not in parser.tags
    assert "@import" not in text and "url(" not in text and "http://" not in text and "https://" not in text
    body = "".join(parser.text)
    assert "scbench <replay>" in body  # escaped in the markup, intact as text
    assert "<replay>" not in text
    for heading in (
        "Accuracy by model",
        "Cost vs accuracy",
        "Accuracy by task category",
        "Accuracy by platform",
        "Across seeds",
        "Runs",
    ):
        assert heading in body
    assert "gpt-5.5" in body and "Accuracy (%)" in body and "pass@3 (%)" in body and "count as failures" in body


def test_report_without_costs_or_metadata(tmp_path: Path) -> None:
    from .helpers import base_row

    units = pd.DataFrame([base_row(eval_id=f"e{i}", seed=1, cost_usd=None) for i in range(3)])
    text = render_html(units)
    parser = Collector()
    parser.feed(text)
    assert len(parser.images) == 1  # accuracy only: no cost, no task/kit
    assert "no data to plot" in text
    with pytest.raises(ReportError):
        render_html(units.iloc[0:0])


def test_the_footnote_says_the_intervals_are_clipped_as_the_table_shows() -> None:
    """Two evals, one passed and one failed: the raw t-interval is about −585 … 685 %; the table
    shows it clipped to [0, 100], and the page's note says so."""
    from .helpers import base_row

    units = pd.DataFrame(
        [
            base_row(eval_id="e1", unit_id="u1", passed=True, status="passed"),
            base_row(eval_id="e2", unit_id="u2", passed=False, status="failed"),
        ]
    )
    parser = Collector()
    parser.feed(render_html(units))
    body = " ".join(" ".join(parser.text).split())
    assert "50.00 0.00 100.00" in body  # Accuracy (%), ci_lower, ci_upper of the only row
    assert "clipped to [0, 100]" in body and "not clipped" not in body
