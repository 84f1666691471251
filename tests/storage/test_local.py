"""Local round trips: layout, percent-encoding, readers, manifest, empty runs."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from rayeval.storage import (
    FILE_SCHEMA,
    TABLE_SCHEMA,
    EvalFileRef,
    ResultStore,
    RunManifest,
)
from rayeval.storage.manifest import mask_command_line

from .helpers import make_row, make_rows

MODELS = ["anthropic/claude@x", "openai/gpt-5 mini", "plain"]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_round_trip_layout_and_readers(local_store: ResultStore):
    rows = make_rows("run-1", MODELS, 300)
    with local_store.open_writer("run-1", writer_id="w1") as writer:
        writer.add(rows)
    root = Path(local_store.base)
    files = _files(root)
    # One part per model, percent-encoded folder names, nothing else left behind (WAL removed).
    assert files == [
        "run_id=run-1/model=anthropic%2Fclaude%40x/part-w1-000000.parquet",
        "run_id=run-1/model=openai%2Fgpt-5%20mini/part-w1-000001.parquet",
        "run_id=run-1/model=plain/part-w1-000002.parquet",
    ]
    # Partition columns live only in the path.
    assert pq.read_schema(root / files[0]).names == FILE_SCHEMA.names

    table = local_store.read_table("run-1")
    assert table.schema == TABLE_SCHEMA
    assert table.num_rows == 300
    assert set(table.column("run_id").to_pylist()) == {"run-1"}
    by_unit = {r["unit_id"]: r for r in table.to_pylist()}
    for row in rows:
        stored = by_unit[row.unit_id]
        assert stored["model"] == row.model  # decoded from the path
        assert stored["score"] == row.score and stored["started_at"] == row.started_at

    frame = pd.read_parquet(local_store.run_uri("run-1"))
    assert len(frame) == 300
    assert sorted(frame["model"].astype(str).unique()) == sorted(MODELS)
    assert frame["unit_id"].is_unique


def test_filters_and_multiple_runs(local_store: ResultStore):
    for run in ("r-a", "r/b"):
        with local_store.open_writer(run) as writer:
            writer.add(make_rows(run, MODELS, 60))
    assert local_store.list_runs() == ["r-a", "r/b"]
    assert local_store.read_table().num_rows == 120
    assert set(local_store.read_table().column("run_id").to_pylist()) == {"r-a", "r/b"}
    only = local_store.read_table("r/b", models=["plain"])
    assert only.num_rows == 20 and set(only.column("model").to_pylist()) == {"plain"}
    evals = local_store.read_table("r-a", eval_ids=["eval-001", "eval-002"])
    assert set(evals.column("eval_id").to_pylist()) == {"eval-001", "eval-002"}
    assert local_store.stored_unit_ids("r-a") == {r.unit_id for r in make_rows("r-a", MODELS, 60)}


def test_stored_unit_ids_as_a_sorted_array_of_bytes(local_store: ResultStore) -> None:
    """What --resume looks a big plan up in: every stored row's unit id, 32-character ids (the
    engine's) and others (earlier or foreign writers) alike, a unit with two rows twice."""
    rows = make_rows("r", MODELS, 50) + [make_row("r", "plain", i, unit_id=f"{i:032x}") for i in range(5)]
    rows.append(make_row("r", "plain", 3, unit_id=f"{3:032x}", attempt=2))
    with local_store.open_writer("r") as writer:
        writer.add(rows)
    assert local_store.stored_unit_id_array("r").tolist() == sorted(row.unit_id.encode() for row in rows)
    assert local_store.stored_unit_id_array("nothing").tolist() == []


def test_empty_and_missing(local_store: ResultStore, tmp_path: Path):
    assert local_store.stored_unit_ids("nothing") == set()
    assert local_store.list_runs() == []
    empty = local_store.read_table("nothing")
    assert empty.num_rows == 0 and empty.schema == TABLE_SCHEMA
    assert local_store.read_table().num_rows == 0
    assert local_store.read_manifest("nothing") is None
    # A run folder with only a manifest: still no rows.
    local_store.write_manifest(RunManifest(run_id="only-manifest"))
    assert local_store.stored_unit_ids("only-manifest") == set()
    assert local_store.read_table("only-manifest").num_rows == 0


@pytest.mark.parametrize(
    ("argv", "stored"),
    [
        (["--agent-arg=api_key=sk-live-1", "--agent-arg", "token=tok-live-1"], ["--agent-arg=api_key=***", "--agent-arg", "token=***"]),
        (["--agent-a=authToken=x", "--api-key=k", "--token", "t"], ["--agent-a=authToken=***", "--api-key=***", "--token", "***"]),
        (["--agent-arg=max_tokens=100", "--filter=task=qc", "--agent-arg", "model=m", "--seeds=4"], None),
    ],
)  # fmt: skip
def test_a_manifests_command_line_masks_secret_pairs_in_every_form(
    argv: list[str], stored: list[str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An option's ``KEY=VALUE`` is a pair as one alone is, and this process's own command line
    (the default) is masked as one given is."""
    monkeypatch.setattr(sys, "argv", ["rayeval", "run", *argv])
    assert RunManifest(run_id="r").command_line == ["rayeval", "run", *(argv if stored is None else stored)]
    assert mask_command_line(argv) == (argv if stored is None else stored)


def test_a_manifest_masks_the_runs_secrets_wherever_they_appear() -> None:
    """The run's secrets (given in the validation context) in any argument and the command
    line, as well as those masked by name."""
    handed = "serp-live-0123456789"
    manifest = RunManifest.model_validate(
        {"run_id": "r", "agent_args": {"query_key_file": "k", "note": f"uses {handed}"},
         "command_line": ["rayeval", "--agent-arg", f"note=uses {handed}"]},
        context={"secrets": frozenset({handed})},
    )  # fmt: skip
    assert manifest.agent_args == {"query_key_file": "***", "note": "uses ***"}
    assert manifest.command_line == ["rayeval", "--agent-arg", "note=uses ***"]
    assert manifest.secret_args_changed({"query_key_file": "k", "note": "uses another"}) == ["note"]


def test_manifest_round_trip_and_hidden_from_readers(local_store: ResultStore, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-supersecret-123")
    manifest = RunManifest(
        run_id="run-m",
        agent="claude_code",
        agent_args={
            "api_key": "sk-live-abcdefgh",
            "authToken": "abcd",
            "max_tokens": 4096,
            "nested": {"password": "hunter2hunter2", "note": "uses tok-supersecret-123"},
        },
        models=["m/x"],
        seeds=[0, 1, 2, 3],
        eval_files=[EvalFileRef(path="evals/a.json", id="e0", eval_hash="abc")],
        total_units=4,
        command_line=["rayeval", "run", "--api-key", "sk-cli-secret-1", "--token=zzzzzzzzzz", "--seeds", "4"],
    )
    assert manifest.agent_args["api_key"] == "***"
    assert manifest.agent_args["authToken"] == "***"
    assert manifest.agent_args["max_tokens"] == 4096
    assert manifest.agent_args["nested"] == {"password": "***", "note": "uses ***"}
    assert manifest.command_line == ["rayeval", "run", "--api-key", "***", "--token=***", "--seeds", "4"]
    assert manifest.python_version and manifest.pyarrow_version and manifest.host

    with local_store.open_writer("run-m") as writer:
        writer.add([make_row("run-m", "m/x", i) for i in range(4)])
    stored = local_store.write_manifest(manifest)
    assert stored.updated_at >= manifest.updated_at
    assert local_store.read_manifest("run-m") == stored
    raw = Path(local_store.manifest_path("run-m")).read_text()
    assert "sk-live" not in raw and "hunter2" not in raw and "supersecret" not in raw
    assert json.loads(raw)["status"] == "running"

    done = local_store.write_manifest(stored.with_status("completed"))
    again = local_store.read_manifest("run-m")
    assert again.status == "completed" and again.finished_at is not None and again == done
    # No temp file left, and the manifest is invisible to Parquet readers.
    run_dir = Path(local_store.run_path("run-m"))
    assert sorted(p.name for p in run_dir.iterdir() if p.is_file()) == ["_manifest.json"]
    assert len(pd.read_parquet(local_store.run_uri("run-m"))) == 4
    assert local_store.list_runs() == ["run-m"]


def test_git_revision_recorded(monkeypatch, tmp_path):
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    inside = RunManifest(run_id="x").git_revision
    assert inside is None or len(inside) == 40  # None only if the tree is not a git checkout
    monkeypatch.chdir(tmp_path)
    assert RunManifest(run_id="x").git_revision is None


def test_pandas_ignores_wal_of_a_live_writer(local_store: ResultStore):
    writer = local_store.open_writer("live", flush_rows=10, flush_seconds=60)
    try:
        writer.add(make_rows("live", ["m"], 15))  # 15 rows sealed, stored
        writer.flush()
        writer.add(make_rows("live", ["m"], 3, start=100))  # 3 rows only in buffer + WAL
        wal = Path(local_store.run_path("live")) / "_wal"
        assert any(p.suffix == ".jsonl" and p.stat().st_size > 0 for p in wal.iterdir())
        assert len(pd.read_parquet(local_store.run_uri("live"))) == 15
        assert local_store.read_table("live").num_rows == 15
    finally:
        writer.close()
    assert not (Path(local_store.run_path("live")) / "_wal").exists()
    assert local_store.read_table("live").num_rows == 18


def test_reused_writer_id_never_overwrites(local_store: ResultStore):
    for batch in range(3):
        with local_store.open_writer("reuse", writer_id="fixed") as writer:
            writer.add(make_rows("reuse", ["m"], 10, start=batch * 10))
    names = sorted(os.listdir(local_store.model_path("reuse", "m")))
    assert names == ["part-fixed-000000.parquet", "part-fixed-000001.parquet", "part-fixed-000002.parquet"]
    assert local_store.read_table("reuse").num_rows == 30


def test_rejects_rows_of_another_run(local_store: ResultStore):
    with local_store.open_writer("mine") as writer:
        with pytest.raises(ValueError):
            writer.add(make_row("other", "m", 1))
        writer.add({**make_row("mine", "m", 2).model_dump()})  # a plain dict is validated
    assert local_store.stored_unit_ids("mine") == {"u-m-000002"}


def test_rows_added_as_json_lines_are_stored_like_rows(local_store: ResultStore):
    """``add_lines`` takes rows a worker already encoded; Parquet holds the same values as ``add``."""
    tricky = [
        make_row(
            "lines", "m/1", 1, reasoning='ünïcödé "quoted" \\ back\nnew line \u2028', answer_json=None, cost_usd=None
        ),
        make_row(
            "lines", "m/1", 2, error_message="x" * 3_000_000, input_tokens=2**62
        ),  # a line longer than Arrow's block
        make_row("lines", "m/1", 3, started_at=make_row("lines", "m/1", 3).started_at.replace(microsecond=7)),
    ]
    with local_store.open_writer("lines") as writer:
        writer.add_lines("m/1", [row.to_line() for row in tricky])
    with local_store.open_writer("lines-as-rows") as writer:
        writer.add([row.model_copy(update={"run_id": "lines-as-rows"}) for row in tricky])
    stored = local_store.read_table("lines").to_pylist()
    again = local_store.read_table("lines-as-rows").to_pylist()
    assert [{**r, "run_id": None} for r in stored] == [{**r, "run_id": None} for r in again]
    expected = [row.model_dump() for row in tricky]
    assert [{k: r[k] for k in expected[0]} for r in sorted(stored, key=lambda r: r["unit_id"])] == expected


def test_add_lines_rejects_lines_of_another_run_or_model(local_store: ResultStore):
    with local_store.open_writer("mine") as writer:
        with pytest.raises(ValueError, match="not a JSON line of a row of run 'mine' and model 'm'"):
            writer.add_lines("m", [make_row("other", "m", 1).to_line()])
        with pytest.raises(ValueError, match="model 'n'"):
            writer.add_lines("n", [make_row("mine", "m", 1).to_line()])
        with pytest.raises(ValueError, match="need a model"):
            writer.add_lines("", [])
    assert local_store.stored_unit_ids("mine") == set()


def test_nan_and_infinite_floats_survive_parquet_and_the_wal(local_store: ResultStore):
    """A NaN score is stored as NaN (not null) and a crashed writer's WAL still recovers it."""
    row = make_row("nan", "m", 1, score=float("nan"), duration_s=float("inf"))
    with local_store.open_writer("nan") as writer:
        writer.add(row)
    (stored,) = local_store.read_table("nan").to_pylist()
    assert math.isnan(stored["score"]) and stored["duration_s"] == math.inf
    crashed = local_store.open_writer("nan-wal", writer_id="gone", flush_seconds=3600)
    crashed.add(row.model_copy(update={"run_id": "nan-wal"}))
    crashed._wal.close(remove=False)  # the process died: its WAL stays behind, unlocked
    assert ResultStore(local_store.root).recover("nan-wal") == 1
    (recovered,) = local_store.read_table("nan-wal").to_pylist()
    assert math.isnan(recovered["score"]) and recovered["duration_s"] == math.inf
