"""Stored rows that no viewer or report may choke on, of every class of hostile artifact, as an
older rayeval or another writer may have left them (beyond what rayeval stores today): JSON
nested beyond any parser, huge strings and arrays, trajectories of the wrong shape, text that is
not JSON where JSON is expected, NaN and infinities, numbers beyond a float, bytes that are not
UTF-8, markup. Every page of the live viewer answers, with what is cut saying so; the static
export and every report format finish with every other unit intact; in Chromium, each unit's
page renders and runs nothing of the agent's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from selenium.webdriver.common.by import By

from rayeval.report import ResultsReader
from rayeval.storage.schema import FILE_SCHEMA, PARTITION_COLUMNS
from rayeval.view import ViewData, ViewServer, data, static, write_static
from rayeval.view.bounded import MAX_DEPTH, MAX_TEXT_CHARS
from rayeval.view.trajectory import MAX_STEPS, MAX_TRAJECTORY_CHARS
from tests.report.helpers import base_row, write_root

from .test_api import api, request
from .test_browser import wait_for

RUN = "hostile"
MODELS = ("m1", "m2")
PAGE_BYTES = 8 << 20  # what one unit's page may weigh at most, whatever the unit stored
INJECTION = '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def nested(depth: int, leaf: Any = 0) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def artifacts(trajectory: Any = None, **others: Any) -> str:
    files = {"trajectory.json": trajectory} if trajectory is not None else {}
    return json.dumps({**files, **others})


TOO_DEEP = "[" * 200_000 + "]" * 200_000  # beyond any recursive parser
MESSAGES_DEEP = [{"role": "user", "content": nested(400)}] * 2_000  # indenting each: depth × size
# every unit below is one class: its eval id names it, its fields are what that class stored
HOSTILE: dict[str, dict[str, Any]] = {
    "answer_too_deep": {"answer_json": TOO_DEEP},
    "answer_deep": {"answer_json": json.dumps(nested(900))},
    "answer_deep_wide": {"answer_json": json.dumps([nested(45)] * 50_000)},
    "answer_huge_string": {"answer_json": json.dumps({"value": "x" * (10 << 20)})},
    "answer_100k_entries": {"answer_json": json.dumps(list(range(100_000)))},
    "answer_not_json": {"answer_json": INJECTION},
    "answer_not_finite": {"answer_json": '{"value": NaN, "high": Infinity, "low": -Infinity, "big": 1e999}'},
    "answer_beyond_float": {"answer_json": '{"value": ' + "9" * 4000 + "}"},
    "answer_odd_text": {"answer_json": json.dumps("\ud800 \udfff \x00 \x1b[31m \u202e\u2066 " + INJECTION)},
    "metadata_too_deep": {"metadata_json": "{" + '"a":{' * 100_000 + "}" * 100_001},
    "metadata_colliding_keys": {
        "metadata_json": json.dumps(
            {k: INJECTION for k in ("__proto__", "constructor", "unit_id", "text", "length", "note", "failure")}
        )
    },
    "metadata_not_json": {"metadata_json": "\x00 not json " + INJECTION},
    "metrics_not_finite": {
        "metrics_json": '{"actual": NaN, "d": {"x": Infinity}, "big": 1e999, "n": ' + "9" * 300 + "}"
    },
    "metrics_too_deep": {"metrics_json": TOO_DEEP},
    "metrics_not_an_object": {"metrics_json": json.dumps([nested(300)] * 10)},
    "metrics_many_long_names": {
        "metrics_json": json.dumps({"k" * 1_000_000: 1, **{f"m{i}": i for i in range(20_000)}})
    },
    "cost_infinite": {"cost_usd": float("inf"), "input_tokens": 2**63 - 1, "n_turns": 2**63 - 1},
    "cost_not_a_number": {"cost_usd": float("nan")},
    "error_kind_huge": {"status": "error", "passed": False, "error_type": INJECTION * 10_000},
    "error_texts_huge": {
        "status": "error",
        "passed": False,
        "error_type": "Crash",
        "error_message": INJECTION * 100_000,
        "error_traceback": "\n".join(["  File x"] * 500_000),
        "reasoning": "r" * (5 << 20),
    },
    "artifacts_not_json": {"artifacts_json": "\x00" + INJECTION},
    "artifacts_a_list": {"artifacts_json": json.dumps([nested(200)])},
    "artifacts_too_deep": {"artifacts_json": TOO_DEEP},
    "artifacts_many": {"artifacts_json": json.dumps({f"log-{i}.txt": "x" for i in range(100_000)})},
    "artifacts_huge": {"artifacts_json": artifacts(**{f"f{i}.log": "y" * (2 << 20) for i in range(4)})},
    "artifacts_objects": {"artifacts_json": artifacts(nested(300), other={"deep": nested(300)}, null=None)},
    "trajectory_too_deep": {"artifacts_json": artifacts("[" * (2 << 20))},
    "trajectory_cut_tail": {"artifacts_json": artifacts("[... truncated ...]\n" + '{"role": "user"},' * 1000 + "]")},
    "trajectory_tiny_messages": {"artifacts_json": artifacts(json.dumps([{"role": "a", "content": "x"}] * 200_000))},
    "trajectory_tiny_events": {
        "artifacts_json": artifacts(json.dumps([{"type": "assistant", "message": {"content": [{}]}}] * 100_000))
    },
    "trajectory_deep_messages": {"artifacts_json": artifacts(json.dumps(MESSAGES_DEEP))},
    "trajectory_scalars": {"artifacts_json": artifacts(5, **{"agent_output.log": None})},
    "trajectory_wrong_shapes": {
        "artifacts_json": artifacts(
            json.dumps(
                [
                    {"role": "assistant", "content": "a", "tool_calls": 5},
                    {"role": "assistant", "content": "b", "tool_calls": "x" * 1_000_000},
                    {"role": "assistant", "tool_calls": {"function": [1]}},
                    {"role": ["not", "a", "name"], "content": {"a": 1}},
                    {"role": None, "content": 5},
                    {"role": "r" * 1_000_000, "content": [1, None, {"type": "tool_result", "content": nested(60)}]},
                    {"role": "tool", "content": [{"type": "text", "text": None}], "name": {"x": INJECTION}},
                ]
            )
        )
    },
    "trajectory_claude_shapes": {
        "artifacts_json": artifacts(
            json.dumps(
                [
                    {
                        "type": "assistant",
                        "message": {"content": [{"type": "tool_use", "name": {"x": 1}, "input": nested(80)}]},
                    },
                    {"type": "assistant", "message": {"role": [1], "content": [{"type": ["text"]}, "plain", 7]}},
                    {"type": "result", "subtype": ["x"] * 100_000},
                    {"type": "system", "subtype": None, "x": INJECTION},
                ]
            )
        )
    },
    "trajectory_codex_shapes": {
        "artifacts_json": artifacts(
            json.dumps(
                [
                    {
                        "type": "item.completed",
                        "item": {"type": "command_execution", "command": ["a"], "exit_code": [1]},
                    },
                    {"type": ["item."]},
                    {"type": {"a": 1}, "item": 5},
                    {"type": "turn.failed", "error": nested(70)},
                ]
            )
        )
    },
    "trajectory_markup": {"artifacts_json": artifacts(json.dumps([{"role": INJECTION, "content": INJECTION}]))},
    "logs_long_lines": {"artifacts_json": artifacts(**{"agent_output.log": "\x1b[2J\u202e" + "z" * (2 << 20)})},
}
INNOCENT_ANSWER = {"value": 7391.25}


def hostile_rows() -> list[dict[str, Any]]:
    rows = [
        base_row(run_id=RUN, model=MODELS[n % 2], eval_id=name, seed=1, **fields)
        for n, (name, fields) in enumerate(HOSTILE.items())
    ]
    for model in MODELS:  # one innocent unit per model, beside them
        rows.append(
            base_row(run_id=RUN, model=model, eval_id="innocent", seed=1, answer_json=json.dumps(INNOCENT_ANSWER))
        )
    return rows


NOT_UTF8 = b'{"value": "\xff\xfe \xc0\x80 \xed\xa0\x80"}'  # invalid bytes, an overlong NUL, a surrogate
NOT_UTF8_COLUMNS = (
    "answer_json",
    "metadata_json",
    "artifacts_json",
    "reasoning",
    "error_message",
    "error_type",
    "harness",
    "task",
)


def write_not_utf8_part(root: Path) -> None:
    """A part another writer made, whose text columns hold bytes that are not UTF-8 (Arrow
    writes them unchecked)."""
    row = base_row(run_id=RUN, model="m1", eval_id="not_utf8", seed=1, status="error", passed=False)
    table = pa.Table.from_pylist([{k: v for k, v in row.items() if k not in PARTITION_COLUMNS}], schema=FILE_SCHEMA)
    offsets = pa.array([0, len(NOT_UTF8)], pa.int32()).buffers()[1]
    raw = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(NOT_UTF8)])
    for name in NOT_UTF8_COLUMNS:
        table = table.set_column(table.schema.get_field_index(name), name, raw)
    pq.write_table(table, root / f"run_id={RUN}" / f"model={quote('m1')}" / "part-other-writer.parquet")


@pytest.fixture(scope="module")
def hostile_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_root(tmp_path_factory.mktemp("hostile") / "results", hostile_rows())
    write_not_utf8_part(root)
    return root


@pytest.fixture(scope="module")
def hostile_url(hostile_root: Path) -> Iterator[str]:
    server = ViewServer(ViewData(ResultsReader(hostile_root)), "127.0.0.1", 0)
    server.start()
    yield server.url
    server.shutdown()
    server.server_close()


def units_by_eval(base: str) -> dict[str, str]:
    """Each unit's id by its eval (``innocent@<model>`` for the innocent ones)."""
    page = api(base, "units", run=RUN, size=500)
    rows = [dict(zip(page["columns"], row)) for row in page["rows"]]
    return {r["eval_id"] + (f"@{r['model']}" if r["eval_id"] == "innocent" else ""): r["unit_id"] for r in rows}


def unit_page(base: str, unit_id: str) -> tuple[bytes, dict[str, Any]]:
    status, _, body = request(base, f"/api/unit?run={RUN}&id={unit_id}")
    assert status == 200, body[:500]
    return body, json.loads(body)


def test_every_api_page_answers_with_bounded_pages(hostile_url: str) -> None:
    runs = api(hostile_url, "runs")["runs"]
    assert [r["units"] for r in runs] == [len(HOSTILE) + 3]
    units = units_by_eval(hostile_url)
    assert set(units) == {*HOSTILE, "innocent@m1", "innocent@m2", "not_utf8"}
    for sort in ("eval", "model", "seed", "duration", "cost", "tokens", "score", "turns"):
        for order in ("asc", "desc"):
            assert api(hostile_url, "units", run=RUN, sort=sort, order=order)["matched"] == len(units)
    for kind in api(hostile_url, "units", run=RUN)["facets"]["error"]:
        assert len(kind) <= 200 and api(hostile_url, "units", run=RUN, error=kind)["matched"] >= 1

    def page(unit_id: str) -> int:
        return len(unit_page(hostile_url, unit_id)[0])

    with ThreadPoolExecutor(4) as pool:  # the server serves pages side by side; each bounded
        sizes = dict(zip(units, pool.map(page, units.values())))
    assert max(sizes.values()) < PAGE_BYTES, sorted(sizes.items(), key=lambda item: -item[1])[:3]
    for name in {name.split("@")[0] for name in units}:
        api(hostile_url, "compare", run=RUN, eval=name, seed=1, a=MODELS[0], b=MODELS[1])
    board = api(hostile_url, "leaderboard", run=RUN)
    assert board["tables"][0]["rows"]
    for name in board["plots"]:
        status, headers, _ = request(hostile_url, f"/api/plot?run={RUN}&name={name}")
        assert status == 200 and headers["Content-Type"] == "image/svg+xml"


def detail(base: str, name: str) -> dict[str, Any]:
    return unit_page(base, units_by_eval(base)[name])[1]


@pytest.mark.parametrize(
    ("name", "field", "note"),
    [
        ("answer_too_deep", "answer", "nested too deep to read as JSON: shown as stored"),
        ("answer_deep", "answer", f"nested more than {MAX_DEPTH} levels deep"),
        ("answer_deep_wide", "answer", f"truncated: showing the first {MAX_TEXT_CHARS:,} characters of its JSON"),
        ("answer_huge_string", "answer", f"truncated: showing the first {MAX_TEXT_CHARS:,} characters of its JSON"),
        ("answer_not_json", "answer", "not JSON: shown as stored"),
        ("metadata_too_deep", "metadata", "nested too deep to read as JSON"),
        ("metadata_not_json", "metadata", "not JSON: shown as stored"),
        ("error_texts_huge", "error_message", f"truncated: showing the first {MAX_TEXT_CHARS:,} of"),
        ("error_texts_huge", "error_traceback", f"truncated: showing the first {MAX_TEXT_CHARS:,} of"),
        ("error_texts_huge", "reasoning", f"truncated: showing the first {MAX_TEXT_CHARS:,} of {5 << 20:,}"),
    ],
)
def test_what_is_cut_says_so(hostile_url: str, name: str, field: str, note: str) -> None:
    shown = detail(hostile_url, name)[field]
    assert note in shown["note"] and len(shown["text"]) <= MAX_TEXT_CHARS


def test_trajectories_of_any_shape_are_bounded_and_say_what_is_left_out(hostile_url: str) -> None:
    too_deep = detail(hostile_url, "trajectory_too_deep")["trajectory"]
    assert too_deep["total"] == 1 and "nested too deep to read as JSON" in too_deep["steps"][0]["note"]
    tiny = detail(hostile_url, "trajectory_tiny_messages")["trajectory"]
    assert (tiny["format"], len(tiny["steps"]), tiny["total"]) == ("messages", MAX_STEPS, 200_000)
    deep = detail(hostile_url, "trajectory_deep_messages")["trajectory"]
    assert sum(len(s["text"]) for s in deep["steps"]) <= MAX_TRAJECTORY_CHARS and deep["total"] == 2_000
    assert f"nested more than {MAX_DEPTH} levels deep" in deep["steps"][0]["note"]
    for name in ("trajectory_wrong_shapes", "trajectory_claude_shapes", "trajectory_codex_shapes"):
        steps = detail(hostile_url, name)["trajectory"]["steps"]
        assert steps and all(len(s["role"]) <= 200 and len(s["title"]) <= 200 for s in steps), name
    many = detail(hostile_url, "artifacts_many")
    assert len(many["artifacts"]) == data.MAX_ARTIFACTS and many["artifacts_left_out"] == 100_000 - data.MAX_ARTIFACTS


def test_numbers_json_has_none_for_are_shown_as_text(hostile_url: str) -> None:
    rows = {row[0]: row[1] for row in detail(hostile_url, "metrics_not_finite")["metrics"]}
    assert rows == {"actual": "NaN", "d.x": "Infinity", "big": "Infinity", "n": "9" * 300}
    assert detail(hostile_url, "cost_infinite")["cost_usd"] == "inf"
    assert "NaN" in detail(hostile_url, "answer_not_finite")["answer"]["text"]


def test_markup_comes_back_as_data_and_bytes_that_are_not_utf8_as_replacements(hostile_url: str) -> None:
    for name in ("answer_odd_text", "metadata_colliding_keys", "trajectory_markup", "error_kind_huge"):
        body, _ = unit_page(hostile_url, units_by_eval(hostile_url)[name])
        assert b"<" not in body and b">" not in body and body.isascii()
    other = detail(hostile_url, "not_utf8")
    assert "\ufffd" in other["answer"]["text"] and "\ufffd" in other["error_message"]["text"]
    odd = detail(hostile_url, "answer_odd_text")["answer"]["text"]  # lone surrogates: not text
    assert odd.startswith("\ufffd \ufffd \x00 \x1b[31m \u202e\u2066 </script>")


def test_the_innocent_units_are_intact(hostile_url: str) -> None:
    for model in MODELS:
        unit = api(hostile_url, "compare", run=RUN, eval="innocent", seed=1, a=model, b=model)["a"]
        assert json.loads(unit["answer"]["text"]) == INNOCENT_ANSWER and unit["answer"]["note"] is None
        assert unit["failure"] is None and unit["verdict"] == "passed"


def read_static(site: Path) -> dict[str, Any]:
    """Every data file of a static view, by key (each a ``rayevalData(key, value);`` call)."""
    found = {}
    for path in (site / "data").rglob("*.js"):
        text = path.read_text(encoding="ascii")
        key, value = re.fullmatch(r"rayevalData\((\"[^\"]*\"),(.*)\);\n", text, re.DOTALL).groups()
        found[json.loads(key)] = json.loads(value)
    return found


def test_the_static_export_finishes_with_every_unit_as_the_server_shows_it(
    hostile_root: Path, hostile_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(static, "DETAIL_CHUNK_CHARS", 1 << 20)
    site = write_static(ViewData(ResultsReader(hostile_root)), tmp_path / "site")
    files = read_static(site)
    details = {uid: d for key, chunk in files.items() if "/units-" in key for uid, d in chunk.items()}
    units = units_by_eval(hostile_url)
    assert set(details) == set(units.values())
    for name, unit_id in units.items():
        assert details[unit_id] == unit_page(hostile_url, unit_id)[1], name
    chunks = [path.stat().st_size for path in (site / "data").rglob("units-*.js")]
    assert len(chunks) > 2 and max(chunks) < 2 * PAGE_BYTES


def test_one_unit_whose_page_cannot_be_made_fails_alone(
    hostile_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever makes a unit's page fail (a class of data nobody foresaw: here, showing its
    answer raising), that unit's page says so, and the export and the other pages go on."""
    shown = data.stored_json_field

    def fails_on_one(text: Any) -> Any:
        if text == HOSTILE["answer_not_json"]["answer_json"]:
            raise RuntimeError("unforeseen")
        return shown(text)

    monkeypatch.setattr(data, "stored_json_field", fails_on_one)
    view = ViewData(ResultsReader(hostile_root))
    files = read_static(write_static(view, tmp_path / "site"))
    details = {
        d["eval_id"]: d for key, chunk in files.items() if "/units-" in key for d in chunk.values()
    }  # one innocent
    assert "RuntimeError" in details["answer_not_json"]["failure"] and details["answer_not_json"]["answer"] is None
    assert (
        details["innocent"]["failure"] is None and json.loads(details["innocent"]["answer"]["text"]) == INNOCENT_ANSWER
    )


@pytest.mark.parametrize(
    "options",
    [
        ["--format", "table"],
        ["--format", "csv"],
        ["--format", "json"],
        ["--format", "html"],
        ["--by", "task"],
        ["--by", "kit", "--format", "json"],
    ],
)
def test_every_report_format_finishes(hostile_root: Path, tmp_path: Path, options: list[str]) -> None:
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "rayeval.cli", "report", str(hostile_root), *options, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    text = out.read_text(encoding="utf-8")
    if "json" in options:  # strict JSON: no NaN or Infinity, which no JSON reader but Python's takes
        json.loads(text, parse_constant=lambda constant: pytest.fail(f"{constant} in the JSON report"))
    assert "m1" in text and "m2" in text


def test_every_unit_page_renders_in_chromium_and_runs_nothing(browser: Any, hostile_url: str) -> None:
    units = units_by_eval(hostile_url)
    for name, unit_id in [*units.items(), ("innocent@m1", units["innocent@m1"])]:
        browser.get(f"{hostile_url}#/unit?run={RUN}&id={unit_id}")
        wait_for(browser, "table.facts", unit_id)  # this unit's page rendered (a failure shows #failure)
        assert browser.find_elements(By.CSS_SELECTOR, "#answer"), name
        assert browser.execute_script("return window.__pwned") is None, name
        assert not browser.find_elements(By.ID, "unit-failure"), name
        assert browser.execute_script("return document.querySelectorAll('main script, main img').length") == 0, name
    browser.get(f"{hostile_url}#/unit?run={RUN}&id={units['trajectory_too_deep']}")
    assert "nested too deep to read as JSON" in wait_for(browser, "#trajectory", "nested too deep").text
    browser.get(f"{hostile_url}#/unit?run={RUN}&id={units['answer_huge_string']}")
    assert "truncated: showing the first 200,000 characters" in wait_for(browser, "#answer", "truncated").text
    browser.get(f"{hostile_url}#/units?run={RUN}&sort=cost&order=desc")
    wait_for(browser, "#counts", f"{len(units)} of {len(units)} units")
    browser.get(f"{hostile_url}#/leaderboard?run={RUN}")
    wait_for(browser, "table.leaderboard", "m1")


def test_the_static_export_renders_in_chromium(
    browser: Any, hostile_root: Path, hostile_url: str, tmp_path: Path
) -> None:
    site = write_static(ViewData(ResultsReader(hostile_root)), tmp_path / "site")
    units = units_by_eval(hostile_url)
    for name in ("trajectory_deep_messages", "answer_odd_text", "metadata_colliding_keys", "not_utf8", "innocent@m2"):
        browser.get(site.joinpath("index.html").as_uri() + f"#/unit?run={RUN}&id={units[name]}")
        wait_for(browser, "table.facts", units[name])
        assert browser.execute_script("return window.__pwned") is None, name
    assert "7391.25" in wait_for(browser, "#answer", "7391.25").text
