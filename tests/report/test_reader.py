"""The reader: hive layout, filters, percent-encoded partition values, latest attempt."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rayeval.report import (
    ALL_COLUMNS,
    ReportError,
    ResultsReader,
    benchmark_table,
    eval_frame,
    evaluation_stats,
    latest_attempts,
    read_units,
)
from rayeval.storage.lease import run_lease

from .helpers import RUN_ID, T0, base_row, corpus_rows, write_root


def test_reads_every_corpus_row_with_partition_values(corpus_root: Path, corpus_units: pd.DataFrame) -> None:
    assert len(corpus_units) == 273
    assert set(corpus_units["run_id"]) == {RUN_ID}
    assert corpus_units["model"].nunique() == 14
    assert corpus_units.groupby(["model", "harness"], observed=True).ngroups == 16
    # Key columns come back as categoricals; the heavy text columns are not read by default.
    assert isinstance(corpus_units["eval_id"].dtype, pd.CategoricalDtype)
    assert "reasoning" not in corpus_units.columns
    full = read_units(corpus_root, columns=ALL_COLUMNS)
    assert set(ALL_COLUMNS) - {"metrics"} <= set(full.columns)
    assert full["answer_json"].notna().all()
    # the typed metrics: one float column per metric name, NaN where a grader has none
    degs = full["metric.n_degs_expected"].notna()  # the evals whose answer field is n_degs
    assert degs.any() and not degs.all()
    assert (full.loc[degs, "metric.n_degs_error"] == (full.loc[degs, "metric.n_degs_actual"] - 1150).abs()).all()
    assert set(full["metric.n_degs_pass"].dropna()) == {0.0, 1.0}


def test_filters_by_run_model_and_eval(tmp_path: Path) -> None:
    rows = [dict(r) for r in corpus_rows()]
    other = [dict(r, run_id="second run") for r in rows[:30]]
    root = write_root(tmp_path, rows + other)
    reader = ResultsReader(root)
    assert reader.run_ids() == ["scbench-replay", "second run"]
    assert len(reader.units()) == 303
    assert len(reader.units(runs="second run")) == 30
    assert len(reader.units(runs=["scbench-replay", "second run"], models="gpt-5.5")) == 33
    assert len(reader.units(evals=["DE01_pseudobulk_de", "NRM01_sparse_normalization"])) == 96 + len(
        [r for r in other if r["eval_id"] in ("DE01_pseudobulk_de", "NRM01_sparse_normalization")]
    )
    assert reader.units(runs="no-such-run").empty
    per_eval = eval_frame(reader.units(runs=RUN_ID))
    assert per_eval["n_runs"].sum() == 273


def test_percent_encoded_partition_values_round_trip(tmp_path: Path) -> None:
    model = "org/model v2:β%"
    run = "run 2026/01?x=1"
    root = write_root(
        tmp_path,
        [base_row(run_id=run, model=model, eval_id="e1"), base_row(run_id=run, model=model, eval_id="e2", seed=2)],
    )
    folders = [p.name for p in root.iterdir()]
    assert folders == ["run_id=run%202026%2F01%3Fx%3D1"]
    units = read_units(root, runs=run, models=model)
    assert len(units) == 2
    assert set(units["model"]) == {model} and set(units["run_id"]) == {run}


def test_ignores_manifests_and_hidden_parts(tmp_path: Path) -> None:
    root = write_root(tmp_path, [base_row(run_id="r", eval_id="e1")])
    (root / "manifest.json").write_text("{}")
    (root / "run_id=r" / "manifest.json").write_text('{"status": "running"}')
    hidden = root / "run_id=r" / "model=m" / ".part-inflight.parquet"
    pq.write_table(pa.table({"x": [1]}), hidden)
    (root / "run_id=r" / "_tmp").mkdir()
    pq.write_table(pa.table({"x": [1]}), root / "run_id=r" / "_tmp" / "part-0.parquet")
    assert len(read_units(root)) == 1


def test_missing_or_empty_root(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="does not exist"):
        read_units(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    assert read_units(tmp_path / "empty").empty
    (tmp_path / "file").write_text("x")
    with pytest.raises(ReportError, match="is a file"):
        read_units(tmp_path / "file")
    with pytest.raises(ReportError, match="unknown column"):
        ResultsReader(write_root(tmp_path / "r", [base_row()])).units(columns=["run_id", "nope"])


def _attempts() -> list[dict]:
    """Unit u1: attempts 1 (error), 3 (passed), 2 (failed) → attempt 3 counts.
    Unit u2: two rows with attempt 2 → the later finished_at (passed) counts.
    Unit u3: one failed row. The same unit id in another run is a different unit."""
    t = T0
    return [
        base_row(
            run_id="r",
            unit_id="u1",
            eval_id="e1",
            attempt=1,
            status="error",
            passed=False,
            finished_at=t + timedelta(seconds=9),
        ),
        base_row(
            run_id="r",
            unit_id="u1",
            eval_id="e1",
            attempt=3,
            status="passed",
            passed=True,
            finished_at=t + timedelta(seconds=1),
        ),
        base_row(
            run_id="r",
            unit_id="u1",
            eval_id="e1",
            attempt=2,
            status="failed",
            passed=False,
            finished_at=t + timedelta(seconds=5),
        ),
        base_row(
            run_id="r",
            unit_id="u2",
            eval_id="e2",
            attempt=2,
            status="failed",
            passed=False,
            finished_at=t + timedelta(seconds=2),
        ),
        base_row(
            run_id="r",
            unit_id="u2",
            eval_id="e2",
            attempt=2,
            status="passed",
            passed=True,
            finished_at=t + timedelta(seconds=3),
        ),
        base_row(run_id="r", unit_id="u3", eval_id="e2", seed=2, status="failed", passed=False),
        base_row(run_id="r2", unit_id="u1", eval_id="e1", status="failed", passed=False),
    ]


def test_latest_attempt_counted_once(tmp_path: Path) -> None:
    root = write_root(tmp_path, _attempts(), per_file=2)  # attempts spread over several part files
    reader = ResultsReader(root)
    assert len(reader.all_attempts()) == 7
    units = reader.units()
    assert len(units) == 4
    r = units[units["run_id"] == "r"].set_index("unit_id")
    assert r.loc["u1", "attempt"] == 3 and r.loc["u1", "status"] == "passed"
    assert r.loc["u2", "status"] == "passed"
    # Everything downstream dedupes too, even when handed all attempts.
    everything = reader.all_attempts()
    table = benchmark_table(everything, by=["run_id"])
    assert table.set_index("run_id")["N"].to_dict() == {"r": 3, "r2": 1}
    # run r: e1 → 1/1, e2 → 1/2 → accuracy 75%
    assert table.set_index("run_id").loc["r", "Accuracy (%)"] == pytest.approx(75.0)
    stats = evaluation_stats(everything)
    assert sorted(rs.num_logs for rs in stats.run_stats) == [1, 3]
    assert stats.units_done == 4 and stats.num_errors == 0


def test_latest_attempts_is_idempotent_and_keeps_order(corpus_units: pd.DataFrame) -> None:
    doubled = pd.concat([corpus_units, corpus_units.assign(attempt=corpus_units["attempt"] + 1)], ignore_index=True)
    once = latest_attempts(doubled)
    assert len(once) == 273
    assert (once["attempt"] == 2).all()
    assert latest_attempts(once) is once
    # A frame that was marked but then concatenated is checked again.
    again = pd.concat([once, once], ignore_index=True)
    assert len(latest_attempts(again)) == 273


def test_reads_from_s3(tmp_path: Path, s3_bucket) -> None:
    root = write_root(tmp_path, corpus_rows())
    for path in root.rglob("*.parquet"):
        s3_bucket.put(f"results/{path.relative_to(root).as_posix()}", path.read_bytes())
    units = read_units(s3_bucket.uri("results"), runs=RUN_ID, s3_endpoint_url=s3_bucket.endpoint_url)
    assert len(units) == 273
    assert ResultsReader(s3_bucket.uri("results"), s3_bucket.endpoint_url).run_ids() == [RUN_ID]


def test_reads_what_the_storage_writer_writes(tmp_path: Path) -> None:
    """Same numbers through rayeval.storage.ResultStore (the real writer) as through the helper."""
    from rayeval.storage import ResultStore, RunManifest, UnitRecord

    store = ResultStore(tmp_path / "store")
    store.write_rows(RUN_ID, [UnitRecord.model_validate(r) for r in corpus_rows()])
    store.write_manifest(RunManifest(run_id=RUN_ID, status="running", total_units=300))
    reader = ResultsReader(tmp_path / "store")
    units = reader.units()
    helper = read_units(write_root(tmp_path / "helper", corpus_rows()))
    pd.testing.assert_frame_equal(benchmark_table(units), benchmark_table(helper))
    with run_lease(store, RUN_ID).take():  # its driver, still at work
        manifests = reader.manifests()
    assert manifests[RUN_ID]["status"] == "running" and manifests[RUN_ID]["total_units"] == 300
    stats = evaluation_stats(units, planned_units={RUN_ID: 300}, run_status=manifests)
    assert stats.status == "running" and stats.progress.startswith("273/300 units done (91.0%), 0 errors, ETA ")


def test_a_running_run_whose_driver_is_gone_reads_as_interrupted(tmp_path: Path) -> None:
    """A manifest left 'running' (its driver killed, or its disk full before it could be marked)
    says 'interrupted' once no driver holds the run: released, expired, or its process gone."""
    from rayeval.storage import ResultStore, RunManifest, UnitRecord

    store = ResultStore(tmp_path / "store")
    store.write_rows(RUN_ID, [UnitRecord.model_validate(r) for r in corpus_rows()])
    store.write_manifest(RunManifest(run_id=RUN_ID, status="running", total_units=300))
    reader = ResultsReader(tmp_path / "store")
    assert reader.manifests()[RUN_ID]["status"] == "interrupted"  # no lease at all
    lease = run_lease(store, RUN_ID, ttl_s=1).take()
    assert reader.manifests()[RUN_ID]["status"] == "running"
    time.sleep(1.2)  # not renewed: expired
    assert reader.manifests()[RUN_ID]["status"] == "interrupted"
    lease.release()
    stats = evaluation_stats(reader.units(), planned_units={RUN_ID: 300}, run_status=reader.manifests())
    assert stats.status == "cancelled"  # Humanloop's word for a run that stopped unfinished


def test_a_column_only_later_parts_carry_is_read(tmp_path: Path) -> None:
    """A writer's extra column (``batch_id``) is read from every part that has it, even when
    the first part (sorted by path: another run, an older writer) has none."""
    root = write_root(tmp_path, [base_row(run_id="a-run", eval_id="e1")])
    later = root / "run_id=b-run" / "model=m"
    later.mkdir(parents=True)
    row = {k: v for k, v in base_row(run_id="b-run", eval_id="e2").items() if k not in ("run_id", "model")}
    pq.write_table(
        pa.Table.from_pylist([row]).append_column("batch_id", pa.array(["batch-7"])), later / "part-0.parquet"
    )

    units = read_units(root)
    batches = dict(zip(units["run_id"], units["batch_id"]))
    assert pd.isna(batches["a-run"]) and batches["b-run"] == "batch-7"
    stats = evaluation_stats(units)
    assert {rs.run_id: rs.batch_id for rs in stats.run_stats} == {"a-run": "a-run", "b-run": "batch-7"}


def test_an_extra_column_with_conflicting_types_is_named(tmp_path: Path) -> None:
    """Parts that disagree on an extra column's type: the later one (in path order) is left out,
    named with the column, and the other run reads on (not a crash deep in Arrow)."""
    root = tmp_path / "root"
    for run, value in (("a-run", pa.array(["batch-7"])), ("b-run", pa.array([[1, 2]]))):
        folder = root / f"run_id={run}" / "model=m"
        folder.mkdir(parents=True)
        row = {k: v for k, v in base_row(run_id=run).items() if k not in ("run_id", "model")}
        pq.write_table(pa.Table.from_pylist([row]).append_column("batch_id", value), folder / "part-0.parquet")
    reader = ResultsReader(root)
    units = reader.units()
    assert list(units["run_id"]) == ["a-run"] and list(units["batch_id"]) == ["batch-7"]
    (skipped,) = reader.skipped
    assert skipped.path == str(root / "run_id=b-run" / "model=m" / "part-0.parquet")
    assert (
        skipped.problem == "incompatible schema: column batch_id is list<element: int64>, where other parts have string"
    )


@pytest.mark.parametrize("where", ["local", "s3"])
def test_read_results_gives_run_id_and_model_columns_of_one_run(where: str, tmp_path: Path, request) -> None:
    """``rayeval.read_results(root, run=...)``: the run's rows with ``run_id`` and ``model``
    (folder names, which ``pd.read_parquet`` of the run's folder leaves out), every column,
    the latest attempt of each unit unless every attempt is asked for, ``latest`` the newest run."""
    import rayeval
    from rayeval.storage import ResultStore, RunManifest

    root = str(write_root(tmp_path / "local", _attempts()))
    for run, day in (("r", 1), ("r2", 2)):  # r2 is the newer run
        ResultStore(root).write_manifest(
            RunManifest(run_id=run, status="completed", created_at=T0 + timedelta(days=day))
        )
    options = {}
    if where == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        for path in Path(root).rglob("*"):
            if path.is_file():
                bucket.put(f"results/{path.relative_to(root).as_posix()}", path.read_bytes())
        root, options = bucket.uri("results"), {"s3_endpoint_url": bucket.endpoint_url}
    assert "run_id" not in pd.read_parquet(f"{tmp_path / 'local'}/run_id=r").columns  # what read_results fixes
    rows = rayeval.read_results(root, run="r", **options)
    assert set(rows["run_id"]) == {"r"} and set(rows["model"]) == {"m"} and len(rows) == 3
    assert set(rows.set_index("unit_id")["attempt"].items()) == {("u1", 3), ("u2", 2), ("u3", 1)}
    assert {"answer_json", "reasoning", "metadata_json"} <= set(rows.columns)  # every column, not the report's few
    assert len(rayeval.read_results(root, run="r", attempts="all", **options)) == 6
    newest = rayeval.read_results(root, run="latest", **options)
    assert set(newest["run_id"]) == {"r2"} and len(newest) == 1
    assert len(rayeval.read_results(root, **options)) == 4  # every run
    with pytest.raises(ReportError, match="attempts must be one of latest, all"):
        rayeval.read_results(root, attempts="first", **options)  # type: ignore[arg-type]
