"""The viewer's JSON API against a real server on 127.0.0.1: paging, filters, sorting, unit
pages, compare, leaderboard, 404s, traversal attempts and the security headers."""

from __future__ import annotations

import http.client
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from rayeval.report import ReportError, ResultsReader
from rayeval.view import ViewData, ViewServer
from rayeval.view.data import MAX_TEXT_CHARS
from rayeval.view.static import check_out_dir

from .conftest import HOSTILE_ANSWER, HOSTILE_TRACEBACK, HUGE_ERROR_CHARS, REFUSAL_VERDICT, REPLAY_PAIRS, TASK_TEXT


def request(base: str, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """One raw request: the path is sent exactly as given after the base's (no client-side
    normalisation)."""
    url = urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        connection.request(method, url.path.rstrip("/") + path)  # under the server's secret path
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def api(base: str, name: str, **params: Any) -> dict[str, Any]:
    status, _, body = request(base, f"/api/{name}?{urlencode(params)}")
    assert status == 200, body
    return json.loads(body)


def all_rows(base: str, run: str, **params: Any) -> list[dict[str, Any]]:
    page, rows = 1, []
    while True:
        data = api(base, "units", run=run, page=page, **params)
        rows += [dict(zip(data["columns"], row)) for row in data["rows"]]
        if page >= data["pages"]:
            return rows
        page += 1


def test_runs_lists_every_run_with_its_counts(view_url: str) -> None:
    runs = {r["run_id"]: r for r in api(view_url, "runs")["runs"]}
    assert set(runs) == {"reference", "replay", "crafted"}
    assert (
        runs["reference"]["units"] == 20
        and runs["reference"]["passed"] == 20
        and runs["reference"]["status"] == "completed"
    )
    assert runs["replay"]["units"] == 6 * REPLAY_PAIRS * 2
    assert runs["crafted"]["units"] == 6  # the retried unit once
    assert runs["crafted"]["error"] == 1 and runs["crafted"]["failed"] == 2


def test_units_are_paged_server_side(view_url: str) -> None:
    first = api(view_url, "units", run="reference", size=7)
    assert (first["total"], first["matched"], first["pages"], len(first["rows"])) == (
        20,
        20,
        3,
        7,
    )
    rows = all_rows(view_url, "reference", size=7)
    assert len(rows) == 20 and len({r["unit_id"] for r in rows}) == 20
    assert api(view_url, "units", run="reference", size=7, page=3)["rows"].__len__() == 6
    assert api(view_url, "units", run="reference", page=99)["rows"] == []


def test_filters_combine_and_count(view_url: str) -> None:
    everything = all_rows(view_url, "replay", size=500)
    errors = all_rows(view_url, "replay", verdict="error")
    assert errors and all(r["verdict"] == "error" and r["error_type"] for r in errors)
    assert len(errors) == sum(r["verdict"] == "error" for r in everything)
    model = everything[0]["model"]
    picked = all_rows(view_url, "replay", model=model, seed=1, verdict="passed")
    assert picked and all((r["model"], r["seed"], r["verdict"]) == (model, 1, "passed") for r in picked)
    data = api(view_url, "units", run="replay", eval="DE01_pseudobulk_de")
    assert data["matched"] == REPLAY_PAIRS * 2 and sum(data["counts"].values()) == data["matched"]
    kind = errors[0]["error_type"]
    assert all(r["error_type"] == kind for r in all_rows(view_url, "replay", error=kind))
    assert set(data["facets"]) == {"eval", "model", "seed", "error"} and data["facets"]["seed"] == [1, 4]


@pytest.mark.parametrize(
    ("sort", "column"),
    [("cost", "cost_usd"), ("duration", "duration_s"), ("tokens", "tokens")],
)
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_sorting_puts_missing_values_last(view_url: str, sort: str, column: str, order: str) -> None:
    rows = all_rows(
        view_url,
        "replay" if sort != "tokens" else "crafted",
        sort=sort,
        order=order,
        size=9,
    )
    values = [r[column] for r in rows]
    present = [v for v in values if v is not None]
    assert present and values[: len(present)] == present  # None only at the end
    assert present == sorted(present, reverse=order == "desc")


def test_unit_page_of_a_real_run(view_url: str) -> None:
    row = api(
        view_url,
        "units",
        run="reference",
        eval="pbmc_fcgr3a_top_population",
        model="alpha",
    )["rows"][0]
    unit = api(view_url, "unit", run="reference", id=row[0])
    assert unit["eval_id"] == "pbmc_fcgr3a_top_population" and unit["verdict"] == "passed"
    # from the eval file the manifest names
    assert "FCGR3A" in unit["task_prompt"]["text"]["text"]
    assert json.loads(unit["answer"]["text"])["answer"] and unit["reasoning"]["text"]
    assert unit["metrics"] and all(len(pair) == 2 for pair in unit["metrics"])
    assert unit["isolation"] == "sandbox" and unit["error_message"] is None and unit["error_traceback"] is None


@pytest.mark.parametrize(
    ("model", "fmt", "expected"),
    [
        (
            "claude",
            "claude-code",
            [
                ("assistant", "text"),
                ("assistant", "tool_call", "Bash"),
                ("tool", "tool_result"),
            ],
        ),
        (
            "codex",
            "codex",
            [
                ("assistant", "thinking"),
                ("assistant", "tool_call", "shell"),
                ("tool", "tool_result", "exit 0"),
            ],
        ),
        (
            "mini",
            "messages",
            [
                ("system", "text"),
                ("user", "text"),
                ("assistant", "text"),
                ("exit", "text"),
            ],
        ),
    ],
)
def test_trajectories_become_conversations(
    view_url: str, model: str, fmt: str, expected: list[tuple[str, ...]]
) -> None:
    row = api(view_url, "units", run="crafted", model=model, eval="count_cells")["rows"][0]
    unit = api(view_url, "unit", run="crafted", id=row[0])
    steps = unit["trajectory"]["steps"]
    assert unit["trajectory"]["format"] == fmt
    shapes = [(s["role"], s["kind"], s["title"]) for s in steps]
    for shape in expected:
        assert any(actual[: len(shape)] == shape for actual in shapes), (shape, shapes)
    assert TASK_TEXT == unit["task_prompt"]["text"]["text"]
    verdict = {"refusal_verdict.json"} if model in ("codex", "mini") else set()  # mini's: null, no refusal
    assert {a["name"] for a in unit["artifacts"]} == {"trajectory.json", "agent_output.log", *verdict}
    refused = model == "codex"
    assert unit["refusal"] is (True if refused else None) and (unit["refusal_verdict"] is not None) == refused


def test_refusals_per_model_and_on_the_unit_page(view_url: str) -> None:
    board = api(view_url, "leaderboard", run="crafted")["tables"][0]
    refusals = {row[0]: row[board["columns"].index("Refusals")] for row in board["rows"]}
    assert refusals == {"claude": 0, "codex": 1, "hostile": 0, "mini": 0}
    row = api(view_url, "units", run="crafted", model="codex")["rows"][0]
    verdict = api(view_url, "unit", run="crafted", id=row[0])["refusal_verdict"]
    assert json.loads(verdict["text"]) == REFUSAL_VERDICT


def test_huge_fields_are_truncated_with_their_length(view_url: str) -> None:
    row = api(view_url, "units", run="crafted", eval="crash_eval")["rows"][0]
    unit = api(view_url, "unit", run="crafted", id=row[0])
    assert unit["verdict"] == "error" and unit["error_type"] == "AgentCrashed"
    assert unit["error_message"]["length"] == HUGE_ERROR_CHARS and len(unit["error_message"]["text"]) == MAX_TEXT_CHARS


def test_hostile_text_comes_back_as_data(view_url: str) -> None:
    row = api(view_url, "units", run="crafted", eval="hostile_eval")["rows"][0]
    status, headers, body = request(view_url, f"/api/unit?run=crafted&id={row[0]}")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    # escaped: never markup, whatever reads it
    assert b"<" not in body and b">" not in body
    unit = json.loads(body)
    assert unit["error_message"]["text"] == HOSTILE_ANSWER and unit["error_traceback"]["text"] == HOSTILE_TRACEBACK


def test_an_error_row_of_a_real_run_shows_its_message_and_traceback(view_url: str) -> None:
    """The replay run's seed-4 units have no recorded trial: the agent raised, and the unit page
    gives the short message and, apart, the agent's Python traceback ending with it."""
    row = api(view_url, "units", run="replay", verdict="error", seed=4)["rows"][0]
    unit = api(view_url, "unit", run="replay", id=row[0])
    message, traceback = unit["error_message"]["text"], unit["error_traceback"]["text"]
    assert unit["error_type"] == "ReplayError" and "Traceback" not in message
    assert traceback.startswith("Traceback (most recent call last):") and message in traceback.splitlines()[-1]


def test_latest_attempt_only(view_url: str) -> None:
    unit = api(view_url, "unit", run="crafted", id="retried-unit")
    assert unit["attempt"] == 2 and unit["verdict"] == "passed" and unit["reasoning"]["text"] == "second attempt passed"


def test_compare_two_models_on_one_eval(view_url: str) -> None:
    data = api(
        view_url,
        "compare",
        run="reference",
        eval="pbmc_pca_summary",
        seed=1,
        a="alpha",
        b="beta",
    )
    assert data["a"]["model"] == "alpha" and data["b"]["model"] == "beta"
    assert data["a"]["eval_id"] == data["b"]["eval_id"] == "pbmc_pca_summary"
    missing = api(
        view_url,
        "compare",
        run="reference",
        eval="pbmc_pca_summary",
        seed=1,
        a="alpha",
        b="nobody",
    )
    assert missing["b"] is None


def test_leaderboard_and_plots(view_url: str) -> None:
    board = api(view_url, "leaderboard", run="replay")
    main = board["tables"][0]
    assert main["columns"][:5] == [
        "model_name",
        "harness",
        "Accuracy (%)",
        "ci_lower",
        "ci_upper",
    ]
    # error rows carry the agent as harness
    assert len({row[0] for row in main["rows"]}) == REPLAY_PAIRS
    # the page says how the table counts, as the report does: clipped intervals, errors as failures
    errors = sum(row[main["columns"].index("Errors")] for row in main["rows"])
    assert "clipped to [0, 100]" in board["method"] and "count as failures in Accuracy" in board["method"]
    assert errors > 0 and f": {errors} here" in board["method"]
    assert {"accuracy", "cost", "task"} <= set(board["plots"])
    for name in board["plots"]:
        status, headers, body = request(view_url, f"/api/plot?run=replay&name={name}")
        assert status == 200 and headers["Content-Type"] == "image/svg+xml" and b"<svg" in body
    accuracy = [row[2] for row in main["rows"]]
    assert accuracy == sorted(accuracy, reverse=True) and all(0 <= a <= 100 for a in accuracy if not math.isnan(a))


@pytest.mark.parametrize(
    "path",
    [
        "/api/units?run=nope",
        "/api/unit?run=crafted&id=nope",
        "/api/plot?run=replay&name=../../etc/passwd",
        "/nothing",
        "/assets/data.py",
        "/assets/../data.py",
        "/assets/../../../../etc/passwd",
        "/assets/%2e%2e/%2e%2e/etc/passwd",
        "/assets/..%2f..%2fetc%2fpasswd",
        "//etc/passwd",
        "/assets//etc/passwd",
        "/assets/page/app.js",
        "/page/app.js",
    ],
)
def test_unknown_paths_and_traversal_attempts_are_404(view_url: str, path: str) -> None:
    status, headers, body = request(view_url, path)
    assert status == 404 and headers["Content-Type"].startswith("application/json")
    assert b"root:" not in body and b"import" not in body
    assert "default-src 'none'" in headers["Content-Security-Policy"]


@pytest.mark.parametrize("base", ["", "/wrong-token", "/{token}x", "/{prefix}"])
@pytest.mark.parametrize("path", ["/", "/api/runs", "/api/units?run=replay", "/assets/app.js"])
def test_nothing_is_served_outside_the_secret_path(view_url: str, base: str, path: str) -> None:
    """Whatever runs on the machine reaches a loopback port (a sandboxed agent with the host's
    network too): without the server's secret path nothing is served, not even the page."""
    url = urlsplit(view_url)
    token = url.path.strip("/")
    assert len(token) >= 32
    root = f"{url.scheme}://{url.netloc}"
    status, _, body = request(root, base.format(token=token, prefix=token[:-1]) + path)
    assert status == 404 and json.loads(body)["error"] == "no such page"
    assert b"replay" not in body and b"<html" not in body


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/api/units?run=replay&seed=x", "seed"),
        ("/api/units?run=replay&verdict=maybe", "verdict"),
        ("/api/units?run=replay&sort=name", "sort"),
        ("/api/units?run=replay&size=100000", "size"),
        ("/api/unit?run=replay", "id"),
    ],
)
def test_bad_parameters_are_400_naming_them(view_url: str, path: str, problem: str) -> None:
    status, _, body = request(view_url, path)
    assert status == 400 and problem in json.loads(body)["error"]


def test_every_response_carries_the_security_headers(view_url: str) -> None:
    for path in (
        "/",
        "/assets/app.js",
        "/assets/app.css",
        "/api/runs",
        "/api/plot?run=replay&name=accuracy",
        "/missing",
    ):
        _, headers, _ = request(view_url, path)
        policy = headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy and "default-src 'none'" in policy
        assert headers["X-Content-Type-Options"] == "nosniff"
    status, _, _ = request(view_url, "/api/runs", method="POST")
    assert status == 405


def test_one_run_only(view_root: Path) -> None:
    server = ViewServer(ViewData(ResultsReader(view_root), ["reference"]))
    server.start()
    try:
        assert [r["run_id"] for r in api(server.url, "runs")["runs"]] == ["reference"]
        assert request(server.url, "/api/units?run=replay")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_static_output_inside_the_results_root_is_refused(view_root: Path, tmp_path: Path) -> None:
    for inside in (view_root, view_root / "site", view_root / "run_id=reference" / "x"):
        with pytest.raises(ReportError, match="inside the results root"):
            check_out_dir(inside, str(view_root))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ReportError, match="not a static view"):
        check_out_dir(tmp_path / "mine", str(view_root))


def test_cli_serves_and_refuses_cleanly(view_root: Path, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "rayeval.cli",
        "view",
        str(view_root),
        "--port",
        "0",
        "--run",
        "latest",
    ]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert "serving" in line, line + server.stderr.read()
        url = line.split(" at ")[1].split()[0]
        assert len(api(url, "runs")["runs"]) == 1
    finally:
        server.terminate()
        server.wait(timeout=60)
    for args, message in (
        ([str(tmp_path / "missing")], "does not exist"),
        ([str(view_root), "--run", "nope"], "no run 'nope'"),
        (
            [str(view_root), "--static", str(view_root / "site")],
            "inside the results root",
        ),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "rayeval.cli", "view", *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (view_root / "site").exists()


def test_a_static_view_that_fails_leaves_nothing_and_the_same_command_works_again(
    view_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its pages are made beside the folder and take its place once whole: a failure (a full
    disk, Ctrl-C) leaves no half-made folder for the retry to refuse, and an earlier view
    stays whole."""
    from rayeval.cli import main as rayeval_main
    from rayeval.view import static

    site = tmp_path / "site"
    written = static._write_run

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(static, "_write_run", fails)
    assert rayeval_main(["view", str(view_root), "--static", str(site)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its half-made pages
    monkeypatch.setattr(static, "_write_run", written)
    assert rayeval_main(["view", str(view_root), "--static", str(site)]) == 0
    index = (site / "index.html").read_bytes()
    monkeypatch.setattr(static, "_write_run", fails)
    assert rayeval_main(["view", str(view_root), "--static", str(site)]) == 2  # a rebuild that fails
    assert (site / "index.html").read_bytes() == index and sorted(p.name for p in tmp_path.iterdir()) == ["site"]
