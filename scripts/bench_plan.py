#!/usr/bin/env python
"""Driver memory and manifest size of a big plan: the plan as inputs (this version) against the
plan as a list of units (the previous one), for a fresh run and for a resume.

Writes EVALS small eval files (default 100) and plans them × MODELS (10) × SEEDS (1000) = 1M
units with an agent that is never run.  Each scenario runs in a fresh Python process, which
prints its peak RSS (``resource.getrusage`` ru_maxrss) after the imports (baseline) and at the
end, its time, and the manifest's size:

* ``inputs``: what ``run_batch`` does before the first unit runs: load the evals, plan, write
  the manifest (inputs + digest), derive the units to run (a bool per position) and build the
  scheduler's queues.
* ``inputs-resume``: the same as a ``--resume`` of a run whose rows of 90 % of the units are
  stored: real Parquet parts (one per model) holding those unit ids, other columns null, read
  through ``ResultStore.stored_unit_id_array``.
* ``listing`` / ``listing-resume``: the previous version's steps, reproduced here from its
  code (``git show e640127:src/rayeval/batch/engine.py``): every unit as a ``Unit``, the manifest
  validated with a ``PlanEntry`` per unit and written with that list, todo as a list of units,
  per-model queues of units; its resume reads ``ResultStore.stored_unit_ids`` (a set of str).

Then (``--run-units``, default 10000,50000) real runs: ``run_batch`` with the ``sleep`` agent at
0 s, inline, on 100 evals x 1 model x N/100 seeds, each in a fresh driver process; the driver's
peak RSS at each size, and the slope between them is the driver memory per unit.

    python scripts/bench_plan.py                      # 100 evals x 10 models x 1000 seeds
    python scripts/bench_plan.py --seeds 100          # 100,000 units
    python scripts/bench_plan.py --scenarios '' --run-units 20000,100000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

RUN = "bench"
SCENARIOS = ("inputs", "inputs-resume", "listing", "listing-resume")


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def write_stored_rows(root: Path, plan, stored_share: float) -> int:
    """Parquet parts (one per model) with a row for every unit but one in 1/(1-share): real
    parts of the run as readers see them, with only the columns a resume reads filled in."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rayeval.storage.schema import FILE_SCHEMA
    from rayeval.storage.store import encode_partition

    every = round(1 / (1 - stored_share))
    ids = plan.unit_ids(0, len(plan))
    positions = np.arange(len(plan))
    kept = positions % every != 0
    model_of = (positions // len(plan.seeds)) % len(plan.models)
    for model_index, model in enumerate(plan.models):
        mine = kept & (model_of == model_index)
        unit_ids = pa.array(ids[mine].astype(str))
        columns = {name: pa.nulls(len(unit_ids), FILE_SCHEMA.field(name).type) for name in FILE_SCHEMA.names}
        columns["unit_id"] = unit_ids
        columns["attempt"] = pa.array(np.ones(len(unit_ids), dtype=np.int64))
        folder = root / f"run_id={RUN}" / f"model={encode_partition(model)}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns, schema=FILE_SCHEMA), folder / "part-bench-000000.parquet")
    return int(kept.sum())


def _config(evals: Path, out: Path, models: int, seeds: int, resume: bool):
    from rayeval.batch import BatchConfig
    from rayeval.batch.plan import parse_seeds

    return BatchConfig(
        evals=[str(evals)],
        agent="reference",
        models=[f"provider/model-{i}" for i in range(models)],
        seeds=parse_seeds(str(seeds)),
        output=str(out),
        run_id=RUN,
        resume=resume,
    )


def setup(folder: Path, evals: int, models: int, seeds: int) -> dict:
    """The eval files, and the stored rows of the run the resume scenarios finish."""
    from bench_common import make_evals

    from rayeval.batch.plan import Plan
    from rayeval.evals import load_evals

    make_evals(folder / "evals", evals)
    config = _config(folder / "evals", folder / "out", models, seeds, resume=True)
    plan = Plan(load_evals(*config.evals), config.models, config.seeds, config.agent)
    return {
        "units": len(plan),
        "stored": write_stored_rows(folder / "out", plan, stored_share=0.9),
    }


def scenario(name: str, evals: Path, out: Path, models: int, seeds: int) -> dict:
    """One scenario in this (fresh) process."""
    import numpy as np

    from rayeval.batch.plan import Plan, unstored
    from rayeval.batch.queue import UnitQueue
    from rayeval.batch.resume import run_manifest
    from rayeval.evals import load_evals
    from rayeval.storage import ResultStore, RunManifest

    baseline = _rss_mb()
    start = time.perf_counter()
    resume = name.endswith("resume")
    config = _config(evals, out, models, seeds, resume)
    loaded = load_evals(*config.evals)
    store = ResultStore(config.storage.output)
    plan = Plan(loaded, config.models, config.seeds, config.agent)
    if name.startswith("inputs"):
        manifest = run_manifest(config, RUN, loaded, plan, previous=None)
        store.write_manifest(manifest.model_copy(update={"run_id": f"{RUN}-{name}"}))
        stored = store.stored_unit_id_array(RUN) if resume else np.array([], dtype="S32")
        todo = unstored(plan, stored)
        to_run = int(todo.sum())
        UnitQueue(plan, todo, max_concurrency=32, model_limits={})
    else:  # the previous version's steps (engine.run_batch at e640127)
        units = plan.units()
        done_ids = store.stored_unit_ids(RUN) if resume else set()
        todo_units = [unit for unit in units if unit.unit_id not in done_ids]
        to_run = len(todo_units)
        manifest = RunManifest.model_validate(
            {
                "run_id": f"{RUN}-{name}",
                "agent": config.agent,
                "agent_args": config.agent_args,
                "models": config.models,
                "seeds": config.seeds,
                "eval_files": [
                    {
                        "path": str(e.source_path),
                        "id": e.id,
                        "eval_hash": e.content_hash(),
                    }
                    for e in loaded
                ],
                "plan": [
                    {
                        "unit_id": u.unit_id,
                        "eval_id": u.eval_id,
                        "model": u.model,
                        "seed": u.seed,
                    }
                    for u in units
                ],
            }
        )
        # as the previous RunManifest wrote it (model_dump_json with its plan list, indented)
        document = {
            **manifest.model_dump(mode="json"),
            "plan": [entry.model_dump() for entry in manifest.plan],
        }
        store.put_atomic(
            store.manifest_path(f"{RUN}-{name}"),
            json.dumps(document, indent=2).encode(),
        )
        queues: dict[str, deque] = {}
        for unit in todo_units:
            queues.setdefault(unit.model, deque()).append((unit, 1))
    seconds = time.perf_counter() - start
    manifest_bytes = Path(store.manifest_path(f"{RUN}-{name}")).stat().st_size
    return {
        "scenario": name,
        "units": len(plan),
        "to_run": to_run,
        "baseline_mb": round(baseline, 1),
        "peak_mb": round(_rss_mb(), 1),
        "seconds": round(seconds, 2),
        "manifest_bytes": manifest_bytes,
    }


def real_run(units: int, folder: Path) -> dict:
    """A whole run of ``units`` instant units in this (fresh) driver process; its peak RSS
    before the run's summary (which reads every stored row back) and at the end."""
    from rayeval.batch import BatchConfig, engine

    summarize = engine.summarize
    before_summary: list[float] = []

    def noting_the_peak(*args, **kwargs):
        before_summary.append(_rss_mb())
        return summarize(*args, **kwargs)

    engine.summarize = noting_the_peak
    evals = len(list((folder / "evals").glob("*.json")))
    start = time.perf_counter()
    config = BatchConfig(
        evals=[str(folder / "evals")],
        agent="sleep",
        agent_args={"seconds": "0"},
        seeds=list(range(1, units // evals + 1)),
        isolation="inline",
        output=str(folder / "runs"),
        work_root=str(folder / "work"),
        show_progress=False,
    )
    summary = engine.run_batch(config)
    return {
        "units": summary.total_units,
        "stored": summary.stored_rows,
        "run_peak_mb": round(before_summary[0], 1),
        "peak_mb": round(_rss_mb(), 1),
        "seconds": round(time.perf_counter() - start, 1),
    }


def _child(*options: str, src: str | None = None) -> dict:
    """A child process's result; ``src``: the rayeval sources it imports (another version's)."""
    env = {**os.environ, "PYTHONPATH": src} if src else None
    done = subprocess.run(
        [sys.executable, __file__, *options],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evals", type=int, default=100)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument(
        "--run-units",
        default="10000,50000",
        help="sizes of the real runs ('' for none)",
    )
    parser.add_argument(
        "--compare-src",
        help="the src folder of another rayeval version: its real runs too",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        folder = Path(args.folder)
        if args.child == "setup":
            print(json.dumps(setup(folder, args.evals, args.models, args.seeds)))
        elif args.child.startswith("run:"):
            print(json.dumps(real_run(int(args.child[4:]), folder)))
        else:
            print(
                json.dumps(
                    scenario(
                        args.child,
                        folder / "evals",
                        folder / "out",
                        args.models,
                        args.seeds,
                    )
                )
            )
        return
    # Nothing big happens in this process: a child's peak RSS starts from its parent's (Linux
    # keeps ru_maxrss across fork and exec), so the setup runs in a child of its own too.
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        plan = [
            "--folder",
            tmp,
            "--evals",
            str(args.evals),
            "--models",
            str(args.models),
            "--seeds",
            str(args.seeds),
        ]
        prepared = _child("--child", "setup", *plan)
        print(
            f"{args.evals} evals x {args.models} models x {args.seeds} seeds = {prepared['units']:,} units; "
            f"resume: {prepared['stored']:,} stored"
        )
        print(
            f"{'scenario':<16}{'to run':>10}{'baseline MB':>13}{'peak MB':>10}{'planning MB':>13}"
            f"{'seconds':>9}{'manifest bytes':>16}"
        )
        for name in filter(None, args.scenarios.split(",")):
            result = _child("--child", name, *plan)
            print(
                f"{name:<16}{result['to_run']:>10,}{result['baseline_mb']:>13,.0f}{result['peak_mb']:>10,.0f}"
                f"{result['peak_mb'] - result['baseline_mb']:>13,.0f}{result['seconds']:>9.1f}{result['manifest_bytes']:>16,}"
            )
        sizes = [int(units) for units in args.run_units.split(",") if units]
        versions = [("this version", None)] + ([(args.compare_src, args.compare_src)] if args.compare_src else [])
        for label, src in versions:
            report_runs(
                label,
                [_child("--child", f"run:{units}", "--folder", tmp, src=src) for units in sizes],
            )


def report_runs(label: str, runs: list[dict]) -> None:
    for run in runs:
        print(
            f"real run ({label}): {run['units']:,} units ({run['stored']:,} stored) in {run['seconds']} s, "
            f"driver peak RSS {run['run_peak_mb']:,.0f} MB before the summary, {run['peak_mb']:,.0f} MB with it"
        )
    if len(runs) >= 2:
        units = runs[-1]["units"] - runs[0]["units"]
        for key, what in (
            ("run_peak_mb", "during the run"),
            ("peak_mb", "summary included"),
        ):
            slope = (runs[-1][key] - runs[0][key]) * 1024 * 1024 / units
            print(f"driver memory per unit ({label}; peak RSS slope, {what}): {slope:,.0f} bytes")


if __name__ == "__main__":
    main()
