"""The viewer in a real headless Chromium: what a person clicks through, checked from the
page's text and its screenshots (non-blank, with the expected content on screen)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from rayeval.report import ResultsReader
from rayeval.view import ViewData, static, write_static

from .conftest import HOSTILE_ANSWER, HOSTILE_TRACEBACK
from .test_api import api

WAIT_S = 120  # generous: the machine is shared; never a speed assertion
POLL_S = 0.05  # selenium's default (0.5 s) would wait that long after most renders


def waiting(browser: Any, **options: Any) -> WebDriverWait:
    """A wait of up to ``WAIT_S`` that looks again every ``POLL_S``."""
    return WebDriverWait(browser, WAIT_S, poll_frequency=POLL_S, **options)


def wait_for(browser: Any, css: str, text: str = "") -> Any:
    """The first element matching ``css`` once it shows ``text``."""

    def found(driver: Any) -> Any:
        for element in driver.find_elements(By.CSS_SELECTOR, css):
            if text in element.text:
                return element
        failure = driver.find_elements(By.ID, "failure")
        assert not failure, failure[0].text
        return False

    # a page that renders again meanwhile replaces the element: look again
    return waiting(browser, ignored_exceptions=(StaleElementReferenceException,)).until(found)


def wait_text(browser: Any, css: str, text: str) -> str:
    """The text of the first element matching ``css`` once it shows ``text``, read as it matched
    (the element itself may be replaced right after, by a render)."""

    def found(driver: Any) -> str | bool:
        for element in driver.find_elements(By.CSS_SELECTOR, css):
            shown = element.text
            if text in shown:
                return shown
        return False

    return waiting(browser, ignored_exceptions=(StaleElementReferenceException,)).until(found)


def wait_hash(browser: Any, fragment: str) -> None:
    waiting(browser).until(lambda d: fragment in d.execute_script("return location.hash"))


def screenshot(browser: Any, path: Path, *expected: str) -> None:
    """Save a screenshot and check it: many colours (not blank) and the expected texts visible."""
    png = browser.get_screenshot_as_png()
    path.write_bytes(png)
    image = Image.open(io.BytesIO(png)).convert("RGB").resize((350, 250))
    assert len(set(image.get_flattened_data())) > 40, f"{path}: screenshot looks blank"
    visible = browser.find_element(By.TAG_NAME, "body").text
    for text in expected:
        assert text in visible, f"{path}: {text!r} not on the page"


def unit_id(base: str, run: str, **filters: str) -> str:
    return api(base, "units", run=run, **filters)["rows"][0][0]


def test_runs_units_and_a_unit_page(browser: Any, view_url: str, tmp_path: Path) -> None:
    browser.get(view_url)
    wait_for(browser, "#runs", "replay")
    screenshot(browser, tmp_path / "runs.png", "Runs", "reference", "crafted")
    browser.find_element(By.LINK_TEXT, "reference").click()
    wait_for(browser, "#counts", "20 of 20 units")
    screenshot(browser, tmp_path / "units.png", "pbmc_bulk_label_composition", "alpha", "beta")
    browser.find_element(By.CSS_SELECTOR, "#units tbody tr a").click()
    wait_for(browser, "#answer pre")
    wait_hash(browser, "#/unit?run=reference")
    page = browser.find_element(By.TAG_NAME, "main").text
    # the task, from the eval file
    assert "pbmc_bulk_label_composition" in page and "The AnnData file" in page
    assert wait_for(browser, "#verdict").text.startswith("passed")
    shown = browser.execute_script("return new URLSearchParams(location.hash.split('?')[1]).get('id')")
    reasoning = api(view_url, "unit", run="reference", id=shown)["reasoning"]["text"]
    assert reasoning and wait_for(browser, "#reasoning pre").text == reasoning
    assert browser.find_elements(By.CSS_SELECTOR, "#metrics tr")
    screenshot(
        browser,
        tmp_path / "unit.png",
        "Task",
        "Answer",
        "Verdict",
        "Reasoning",
        "pbmc_bulk_label_composition",
    )


def test_trajectory_as_a_conversation(browser: Any, view_url: str, tmp_path: Path) -> None:
    browser.get(f"{view_url}#/unit?run=crafted&id={unit_id(view_url, 'crafted', model='claude')}")
    trajectory = wait_for(browser, "#trajectory", "tool call")
    steps = trajectory.find_elements(By.CSS_SELECTOR, ".step")
    who = [step.find_element(By.CSS_SELECTOR, ".who").text for step in steps]
    assert "assistant · tool call · Bash" in who and "tool · tool result · output" in who
    assert "I will count the cells." in trajectory.text and "703 cells.csv" in trajectory.text
    screenshot(
        browser,
        tmp_path / "trajectory.png",
        "Count the cells in cells.csv",
        "wc -l cells.csv",
    )


def test_a_refused_unit_shows_the_verdict(browser: Any, view_url: str) -> None:
    browser.get(f"{view_url}#/unit?run=crafted&id={unit_id(view_url, 'crafted', model='codex')}")
    shown = wait_text(browser, "#refusal", "content_filter")
    assert "The model refused" in shown and "I can't help with that." in shown


def test_filter_by_verdict_and_sort(browser: Any, view_url: str, tmp_path: Path) -> None:
    browser.get(f"{view_url}#/units?run=replay")
    wait_for(browser, "#counts", "units")
    Select(browser.find_element(By.NAME, "verdict")).select_by_value("error")
    wait_hash(browser, "verdict=error")
    expected = api(view_url, "units", run="replay", verdict="error")["matched"]
    wait_for(browser, "#counts", f"{expected} of ")
    badges = {b.text for b in browser.find_elements(By.CSS_SELECTOR, "#units .verdict")}
    assert badges == {"error"}
    browser.find_element(By.XPATH, "//th[text()='duration (s)']").click()
    wait_hash(browser, "sort=duration")
    # filters stay in the link
    assert "verdict=error" in browser.execute_script("return location.hash")
    screenshot(browser, tmp_path / "filtered.png", f"{expected} of ", "error")


def test_hostile_answer_is_shown_as_text_and_runs_nothing(browser: Any, view_url: str, tmp_path: Path) -> None:
    browser.get(f"{view_url}#/unit?run=crafted&id={unit_id(view_url, 'crafted', eval='hostile_eval')}")
    answer = wait_for(browser, "#answer pre", "<script>")
    assert "window.__pwned" in answer.text
    assert wait_for(browser, "#error", "<i>Kind</i>").text.count(HOSTILE_ANSWER) == 1
    browser.find_element(By.CSS_SELECTOR, "#traceback summary").click()  # the traceback, apart and folded
    assert wait_text(browser, "#traceback pre", "Traceback") == HOSTILE_TRACEBACK
    assert browser.execute_script("return window.__pwned") is None
    assert (
        browser.execute_script(
            "return document.querySelectorAll('main script, main img, main iframe, main b, main i').length"
        )
        == 0
    )
    screenshot(browser, tmp_path / "hostile.png", "<script>window.__pwned", "<b>bold?</b>")


def test_huge_field_says_it_was_truncated(browser: Any, view_url: str) -> None:
    browser.get(f"{view_url}#/unit?run=crafted&id={unit_id(view_url, 'crafted', eval='crash_eval')}")
    assert "showing the first 200,000 of 300,000 characters" in wait_text(browser, "#error", "AgentCrashed")


def test_compare_two_models(browser: Any, view_url: str, tmp_path: Path) -> None:
    browser.get(f"{view_url}#/compare?run=reference&eval=pbmc_pca_summary&seed=1&a=alpha&b=beta")
    compare = wait_for(browser, "#compare", "beta")
    sides = compare.find_elements(By.CSS_SELECTOR, ".side")
    assert [side.find_element(By.TAG_NAME, "h2").text for side in sides] == [
        "alpha passed",
        "beta passed",
    ]
    assert all("pbmc_pca_summary" not in side.text or "Answer" in side.text for side in sides)
    Select(browser.find_element(By.NAME, "b")).select_by_value("alpha")
    wait_hash(browser, "b=alpha")
    screenshot(
        browser,
        tmp_path / "compare.png",
        "Compare on pbmc_pca_summary",
        "model A",
        "model B",
    )


def plots_loaded(browser: Any) -> int:
    waiting(browser).until(
        lambda d: d.execute_script("return [...document.querySelectorAll('img.plot')].every(i => i.complete)")
    )
    return browser.execute_script(
        "return [...document.querySelectorAll('img.plot')].filter(i => i.naturalWidth > 100).length"
    )


def test_leaderboard_with_plots(browser: Any, view_url: str, tmp_path: Path) -> None:
    browser.get(f"{view_url}#/leaderboard?run=replay")
    table = wait_for(browser, "table.leaderboard", "Accuracy (%)")
    assert len(table.find_elements(By.CSS_SELECTOR, "tbody tr")) >= 3
    assert plots_loaded(browser) == len(api(view_url, "leaderboard", run="replay")["plots"]) >= 3
    screenshot(
        browser,
        tmp_path / "leaderboard.png",
        "Leaderboard of replay",
        "Accuracy by task category",
        "clipped to [0, 100]",
    )


def test_static_folder_from_file_url(
    browser: Any,
    view_root: Path,
    view_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # several index chunks even for small runs
    monkeypatch.setattr(static, "INDEX_CHUNK", 7)
    monkeypatch.setattr(static, "DETAIL_CHUNK", 3)
    site = write_static(ViewData(ResultsReader(view_root)), tmp_path / "site")
    assert len(list((site / "data").glob("*/index-*.js"))) > 3
    assert all(path.read_bytes().isascii() for path in (site / "data").rglob("*.js"))
    browser.get(site.joinpath("index.html").as_uri() + "#/units?run=replay&verdict=error&sort=cost&order=desc")
    expected = api(view_url, "units", run="replay", verdict="error")["matched"]
    wait_for(browser, "#counts", f"{expected} of ")
    screenshot(browser, tmp_path / "static-units.png", "Units of replay", "error")
    browser.get(site.joinpath("index.html").as_uri() + "#/units?run=crafted&sort=tokens&order=desc")
    first = wait_for(browser, "#units tbody tr a", "count_cells")
    first.click()
    assert "tool call" in wait_for(browser, "#trajectory", "Bash").text
    browser.get(
        site.joinpath("index.html").as_uri()
        + f"#/unit?run=crafted&id={unit_id(view_url, 'crafted', eval='hostile_eval')}"
    )
    wait_for(browser, "#answer pre", "<script>")
    assert browser.execute_script("return window.__pwned") is None
    browser.get(site.joinpath("index.html").as_uri() + "#/leaderboard?run=reference")
    wait_for(browser, "table.leaderboard", "alpha")
    assert plots_loaded(browser) >= 1
    screenshot(
        browser,
        tmp_path / "static-leaderboard.png",
        "Leaderboard of reference",
        "alpha",
        "beta",
    )
