#!/usr/bin/env python
"""Benchmark: the report over 1,000,000 synthetic result rows, in memory and from files.

    python scripts/bench_report.py [--rows 1000000] [--repeat 3] [--in-memory-only]

The synthetic units: 4 runs × 10 models × 2 harnesses × 2,500 evals × 5 seeds (1,000,000
rows at the default size), 1% errored runs, 2% of units stored twice (a retry with
``attempt`` 2), nullable costs, task/kit metadata.

In memory: ``evaluation_stats`` (latest attempt per unit, per-run evaluator stats for
``passed`` and ``normalized_score``, progress) plus ``benchmark_table`` over the frame as the
reader returns it (key columns as categoricals), against a naive pandas ``sort_values/
groupby.tail`` + ``groupby.apply`` baseline over plain string columns; both are checked to agree.

From files: the rows written as a results root (one zstd part per run × model with every stored
column, a manifest per run), then ``rayeval report --format json`` and the default text report
against duckdb's SQL for the same table over the same files (latest attempt per unit, per-eval
pass rates, their mean and standard deviation, mean cost and duration), interleaved, best of
``--repeat`` each, printed side by side as a ratio; the JSON is checked to agree with the SQL.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from rayeval.report import benchmark_table, evaluation_stats

N_RUNS, N_MODELS, N_HARNESSES = 4, 10, 2
TASKS = ["qc", "normalization", "clustering", "cell_typing", "differential_expression", "dimensionality_reduction"]
KITS = ["chromium", "bd_rhapsody", "parsebio", "visium", "xenium"]


def synthetic_units(rows: int, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    combos = N_RUNS * N_MODELS * N_HARNESSES
    seeds = 5
    n_retry = int(0.02 * rows)  # 2% of the rows are a second attempt of an earlier unit
    n_units = rows - n_retry
    n_evals = -(-n_units // (combos * seeds))
    idx = np.arange(n_units)
    seed_i = idx % seeds
    eval_i = (idx // seeds) % n_evals
    combo = idx // (seeds * n_evals)
    harness_i = combo % N_HARNESSES
    model_i = (combo // N_HARNESSES) % N_MODELS
    run_i = combo // (N_HARNESSES * N_MODELS)
    retry = rng.choice(n_units, size=n_retry, replace=False)
    all_idx = np.concatenate([idx, retry])
    attempt = np.concatenate([np.ones(n_units, np.int64), np.full(n_retry, 2, np.int64)])
    base = n_units
    n = len(all_idx)
    skill = 0.25 + 0.06 * model_i[all_idx] + 0.03 * harness_i[all_idx]
    difficulty = (eval_i[all_idx] % 17) / 17.0 - 0.5
    p = np.clip(skill - 0.4 * difficulty, 0.02, 0.98)
    passed = rng.random(n) < p
    status = np.where(passed, "passed", "failed").astype(object)
    err = rng.random(n) < 0.01
    kinds = np.array(["error", "timeout", "config_error"], dtype=object)
    status[err] = kinds[rng.integers(0, 3, err.sum())]
    passed &= ~err
    score = np.where(passed, 1.0, rng.random(n) * 0.9)
    score[err] = 0.0
    cost = rng.gamma(2.0, 0.3, n)
    cost[rng.random(n) < 0.05] = np.nan
    duration = rng.gamma(3.0, 100.0, n)
    start = pd.Timestamp("2026-01-01", tz="UTC").value + (all_idx * 1_000_000_000) + attempt * 3_600_000_000_000
    finished = start + (duration * 1e6).astype(np.int64) * 1000  # microseconds, as stored
    unit = all_idx  # unit id = the base row index (stable across attempts)
    e = eval_i[all_idx]
    frame = pd.DataFrame(
        {
            "run_id": pd.Categorical.from_codes(run_i[all_idx], [f"run-{i}" for i in range(N_RUNS)]),
            "model": pd.Categorical.from_codes(model_i[all_idx], [f"model-{i}" for i in range(N_MODELS)]),
            "harness": pd.Categorical.from_codes(harness_i[all_idx], [f"harness-{i}" for i in range(N_HARNESSES)]),
            "unit_id": pd.Categorical.from_codes(unit, [f"u{i:08d}" for i in range(base)]),
            "eval_id": pd.Categorical.from_codes(e, [f"eval-{i:05d}" for i in range(n_evals)]),
            "seed": seed_i[all_idx],
            "attempt": attempt,
            "status": pd.Categorical(status, categories=["passed", "failed", "error", "timeout", "config_error"]),
            "passed": passed,
            "normalized_score": score,
            "cost_usd": cost,
            "duration_s": duration,
            "started_at": pd.to_datetime(start, utc=True),
            "finished_at": pd.to_datetime(finished, utc=True),
            "task": pd.Categorical.from_codes(e % len(TASKS), TASKS),
            "kit": pd.Categorical.from_codes(e % len(KITS), KITS),
        }
    )
    return frame


def fast(units: pd.DataFrame) -> tuple[object, pd.DataFrame]:
    stats = evaluation_stats(units, report=False)
    table = benchmark_table(units)
    return stats, table


def naive(units: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The straightforward pandas version: sort + groupby.tail, then groupby.apply."""
    df = (
        units.sort_values(["run_id", "unit_id", "attempt", "finished_at"])
        .groupby(["run_id", "unit_id"], observed=True)
        .tail(1)
    )
    df = df.assign(is_error=df["status"].isin(["error", "timeout", "config_error"]))

    def run_stats(g: pd.DataFrame) -> pd.Series:
        ok = g[~g["is_error"]]
        s = ok["normalized_score"]
        return pd.Series(
            {
                "num_logs": len(g),
                "num_errors": int(g["is_error"].sum()),
                "num_true": int(ok["passed"].sum()),
                "num_false": int((~ok["passed"]).sum()),
                "mean": s.mean(),
                "std": s.std(),
                "p5": s.quantile(0.05),
                "p50": s.quantile(0.5),
                "p95": s.quantile(0.95),
            }
        )

    stats = df.groupby(["run_id", "model", "harness"], observed=True).apply(run_stats, include_groups=False)

    per_eval = df.groupby(["model", "harness", "eval_id"], observed=True).apply(
        lambda g: pd.Series({"rate": g["passed"].mean()}), include_groups=False
    )

    def model_row(g: pd.DataFrame) -> pd.Series:
        rates = g["rate"] * 100
        n = len(rates)
        half = sps.t.ppf(0.975, n - 1) * rates.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
        return pd.Series(
            {"Accuracy (%)": rates.mean(), "ci_lower": rates.mean() - half, "ci_upper": rates.mean() + half}
        )

    table = per_eval.groupby(["model", "harness"], observed=True).apply(model_row, include_groups=False)
    runs = df.groupby(["model", "harness"], observed=True).apply(
        lambda g: pd.Series({"Cost ($)": g["cost_usd"].mean(), "Duration (s)": g["duration_s"].mean(), "N": len(g)}),
        include_groups=False,
    )
    return stats, table.join(runs)


def check(fast_table: pd.DataFrame, naive_table: pd.DataFrame, stats: object, naive_stats: pd.DataFrame) -> None:
    ours = fast_table.set_index(["model_name", "harness"]).sort_index()
    theirs = naive_table.copy()
    theirs.index = theirs.index.set_names(["model_name", "harness"])
    theirs.index = pd.MultiIndex.from_arrays(
        [theirs.index.get_level_values(i).astype(str) for i in range(2)], names=theirs.index.names
    )
    theirs = theirs.sort_index()
    for col in ("Accuracy (%)", "ci_lower", "ci_upper", "Cost ($)", "Duration (s)", "N"):
        np.testing.assert_allclose(
            ours[col].to_numpy(float), theirs[col].to_numpy(float), rtol=1e-9, atol=1e-9, err_msg=col
        )
    by_key = {(rs.run_id, rs.model, rs.harness): rs for rs in stats.run_stats}  # type: ignore[attr-defined]
    for key, row in naive_stats.iterrows():
        rs = by_key[tuple(str(k) for k in key)]
        boolean, number = rs.evaluator_stats
        assert (rs.num_logs, rs.num_errors, boolean.num_true, boolean.num_false) == (
            row["num_logs"],
            row["num_errors"],
            row["num_true"],
            row["num_false"],
        )
        np.testing.assert_allclose(
            [number.mean, number.std, number.percentiles["p5"], number.percentiles["p50"], number.percentiles["p95"]],
            row[["mean", "std", "p5", "p50", "p95"]].to_numpy(float),
            rtol=1e-9,
        )


def best_of(fn, repeat: int):  # type: ignore[no-untyped-def]
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


ERROR_SQL = "('error', 'timeout', 'config_error')"
# The same numbers as `rayeval report --format json` (model × harness, errors count as failures),
# as one would write them in SQL: the latest attempt per unit, per-eval pass rates, their mean
# and sample standard deviation, mean cost and duration per run.
DUCKDB_SQL = f"""
WITH units AS (
    SELECT * FROM read_parquet('{{parts}}', hive_partitioning = true)
    QUALIFY row_number() OVER (PARTITION BY run_id, unit_id ORDER BY attempt DESC, finished_at DESC) = 1
), per_eval AS (
    SELECT model, harness, eval_id,
           avg(CASE WHEN coalesce(passed, false) AND status NOT IN {ERROR_SQL} THEN 1.0 ELSE 0.0 END) AS rate
    FROM units GROUP BY model, harness, eval_id
), accuracy AS (
    SELECT model, harness, avg(rate) * 100 AS accuracy, stddev_samp(rate) * 100 AS sd, count(*) AS n_evals
    FROM per_eval GROUP BY model, harness
), runs AS (
    SELECT model, harness, avg(cost_usd) AS cost, avg(duration_s) AS duration, count(*) AS n,
           count(*) FILTER (WHERE status IN {ERROR_SQL}) AS errors
    FROM units GROUP BY model, harness
)
SELECT * FROM accuracy JOIN runs USING (model, harness) ORDER BY accuracy DESC, model, harness
"""


def write_root(units: pd.DataFrame, root: Path) -> None:
    """The rows as a results root: one zstd part per run × model with every stored column (the
    free-text ones short), and a completed manifest per run."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rayeval.storage.schema import FILE_SCHEMA

    filler = {
        "eval_hash": "0" * 16,
        "agent": "replay",
        "grader_type": "numeric_tolerance",
        "metrics_json": "{}",
        "reasoning": "within tolerance",
        "answer_json": '{"value": 1}',
        "answer_source": "eval_answer.json",
        "node": "node-1",
        "isolation": "sandbox",
        "time_horizon": "short",
        "eval_type": "numeric",
        "metadata_json": "{}",
        "artifacts_json": "[]",
        "rayeval_version": "0.1.0",
    }
    for (run, model), part in units.groupby(["run_id", "model"], observed=True):
        folder = root / f"run_id={run}" / f"model={model}"
        folder.mkdir(parents=True)
        n = len(part)
        columns = []
        for field in FILE_SCHEMA:
            if field.name in part.columns:
                values = part[field.name]
                if isinstance(values.dtype, pd.CategoricalDtype):
                    values = values.astype(str)
                columns.append(pa.array(values.to_numpy(), type=field.type, from_pandas=True))
            elif field.name in filler:
                columns.append(pa.array([filler[field.name]] * n, type=field.type))
            elif field.name in ("score", "score_max"):
                columns.append(pa.array(part["normalized_score"].to_numpy(), type=field.type))
            else:
                columns.append(pa.nulls(n, type=field.type))
        pq.write_table(pa.Table.from_arrays(columns, schema=FILE_SCHEMA), folder / "part-bench-0.parquet",
                       compression="zstd")  # fmt: skip
    for run in units["run_id"].cat.categories:
        total = int((units["run_id"] == run).sum() - ((units["run_id"] == run) & (units["attempt"] > 1)).sum())
        manifest = {"run_id": run, "status": "completed", "total_units": total, "created_at": "2026-01-01T00:00:00Z"}
        (root / f"run_id={run}" / "_manifest.json").write_text(json.dumps(manifest))


def rayeval_report(root: Path, out: Path, fmt: str) -> None:
    from rayeval.report.cli import main as report_main

    with contextlib.redirect_stderr(io.StringIO()):  # "wrote <out>"
        code = report_main(["report", str(root), "--format", fmt, "--out", str(out)])
    assert code == 0, code


def duckdb_report(root: Path) -> pd.DataFrame:
    import duckdb

    table = duckdb.sql(DUCKDB_SQL.format(parts=f"{root}/run_id=*/model=*/*.parquet")).df()
    n = table["n_evals"].to_numpy(float)
    half = sps.t.ppf(0.975, n - 1) * table["sd"].to_numpy(float) / np.sqrt(n)
    table["ci_lower"] = np.clip(table["accuracy"] - half, 0, 100)
    table["ci_upper"] = np.clip(table["accuracy"] + half, 0, 100)
    return table


def check_files(report_json: Path, theirs: pd.DataFrame) -> None:
    import json

    ours = pd.DataFrame(json.loads(report_json.read_text())).set_index(["model_name", "harness"]).sort_index()
    theirs = theirs.set_index(["model", "harness"]).sort_index()
    pairs = {
        "Accuracy (%)": "accuracy",
        "ci_lower": "ci_lower",
        "ci_upper": "ci_upper",
        "Cost ($)": "cost",
        "Duration (s)": "duration",
        "N": "n",
        "Errors": "errors",
    }
    for col, other in pairs.items():  # the JSON is rounded as published (2 dp; cost 4 dp)
        np.testing.assert_allclose(ours[col].to_numpy(float), theirs[other].to_numpy(float), atol=0.0051, err_msg=col)


def files_comparison(units: pd.DataFrame, repeat: int) -> None:
    """`rayeval report` (text and json) against duckdb's SQL over the same files."""
    with tempfile.TemporaryDirectory() as tmp:
        root, out = Path(tmp) / "results", Path(tmp) / "report"
        t0 = time.perf_counter()
        write_root(units, root)
        print(
            f"results root: {sum(1 for _ in root.rglob('*.parquet'))} parts written in {time.perf_counter() - t0:.1f} s"
        )
        duck_s = json_s = text_s = float("inf")
        for _ in range(repeat):  # interleaved, so that a change in the machine's load hits all three
            one, theirs = best_of(lambda: duckdb_report(root), 1)
            duck_s = min(duck_s, one)
            json_s = min(json_s, best_of(lambda: rayeval_report(root, out, "json"), 1)[0])
            check_files(out, theirs)
            text_s = min(text_s, best_of(lambda: rayeval_report(root, out, "table"), 1)[0])
        print("rayeval report --format json agrees with duckdb's SQL (accuracy, CI, cost, duration, N, errors)")
        print(f"duckdb SQL over the files (best of {repeat}):        {duck_s:.3f} s")
        print(f"rayeval report --format json (best of {repeat}):     {json_s:.3f} s   ratio {json_s / duck_s:.2f}")
        print(f"rayeval report (text; best of {repeat}):             {text_s:.3f} s   ratio {text_s / duck_s:.2f}")
        print(f"goal ratio <= 1.0: {'met' if max(json_s, text_s) <= duck_s else 'MISSED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--in-memory-only", action="store_true", help="skip the comparison over files (rayeval report vs duckdb)"
    )
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    units = synthetic_units(args.rows)
    print(
        f"synthetic rows: {len(units):,} ({units['unit_id'].nunique():,} units, "
        f"{(units['attempt'] > 1).sum():,} retries) built in {time.perf_counter() - t0:.2f} s"
    )

    fast_s, (stats, table) = best_of(lambda: fast(units), args.repeat)
    naive_s, (naive_stats, naive_table) = best_of(lambda: naive(units), 1)
    check(table, naive_table, stats, naive_stats)
    print("results agree (accuracy, CI, cost, duration, N; per-run evaluator stats)")
    print(f"rayeval.report (EvaluationStats + benchmark table): {fast_s:.3f} s (best of {args.repeat})")
    print(f"naive pandas groupby/apply baseline:                {naive_s:.3f} s")
    print(f"speed-up: {naive_s / fast_s:.1f}x   goal <= 2 s: {'met' if fast_s <= 2.0 else 'MISSED'}")
    if not args.in_memory_only:
        files_comparison(units, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
