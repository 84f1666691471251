"""Sandbox benchmarks (issue 15): the cost of running each unit in its own process, and
inspect_ai at the same shape, each level against the others measured in the same run.

  (a) shape:   `rayeval run` on the repository's 10 example evals x 200 seeds = 2,000 units of
               the `sleep` agent at 0.5 s, --max-concurrency 250, on an embedded Ray, once per
               isolation level (sandbox, process, and inline as the floor without isolation).
               The command runs in a subprocess, timed from outside, as a user runs it. Per
               level: wall (command start to end); start-up (command start to the first unit's
               started_at); span (first unit start to last unit end); (wall - start-up) / ideal
               and span / ideal, ideal = units x 0.5 s / 250 = 4 s. The goal: wall within
               1.3 x ideal plus start-up, sandboxed, on 2 cores.
  (b) unit:    the per-unit start cost, on one UnitRunner driven directly (no Ray, no grading,
               no storage): its first unit (the runner's own start), then 300 sequential units
               of `sleep` at 0 s: wall ms per unit, CPU ms per unit of this process
               (time.process_time: spec, sockets, control groups, pidfd) and of the runner's
               process tree (utime+stime+cutime+cstime from /proc/<pid>/stat of the runner and
               its live descendants: bubblewrap, the runner, which reaps every unit, so their
               CPU is in its cutime/cstime), and machine-wide busy CPU from /proc/stat (for
               context: it counts other processes too). Then 1,000 units at 0.5 s from 250
               threads on that one runner (as a worker's threads share one): wall against ideal
               (1,000 x 0.5 / 250 = 2 s). inline: a thread per unit (`run_inline`), the same
               agent.
  (c) inspect: inspect_ai (a separate virtual environment, never a dependency of rayeval) at
               the shape of (a): a Task of 2,000 samples whose solver runs `sleep 0.5` in the
               `local` sandbox (sandbox().exec: a subprocess in a temporary folder, no isolation;
               Docker is not available here), and a variant that awaits asyncio.sleep(0.5),
               trivial scorer, model mockllm/model, --max-samples/--max-subprocesses/
               --max-sandboxes 250, no display. `inspect eval` in a subprocess, timed from
               outside; start-up and span from the log's sample start and end times.

  (f) floor:   what a fresh unit-private process costs before it does anything: an interpreter
               that has imported what a unit runner imports (the runner's preloads) forks, or
               clones into the user, mount, pid, ipc and uts namespaces a sandboxed unit gets,
               and the child exits at once; 300 times each, the parent waiting for each child.
               Per process: median ms from the call to the child running Python, and CPU ms of
               parent and child together (fork, copy-on-write, exit).

Rounds alternate the levels (the order rotates each round), each after `settle()` (as in
bench_common.py); medians over rounds are reported. The machine's load average is printed at
the start and end, and recorded per measurement: on 2 cores other processes move every figure.

One-time setup for (c), outside this script (nothing is fetched while it runs):
    python -m venv /tmp/inspect-venv && /tmp/inspect-venv/bin/pip install inspect-ai==0.3.285

Usage: python scripts/bench_sandbox.py [--inspect-python /tmp/inspect-venv/bin/python]
           [--which a,b,c,f] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# scripts/ is on sys.path when run as a script
from bench_common import CLK_TCK, compile_bytecode, epoch, loadavg, machine_busy_seconds, settle

REPO = Path(__file__).resolve().parents[1]
LEVELS = ("sandbox", "process", "inline")
INSPECT_VARIANTS = {"exec": "inspect local sandbox exec(sleep)", "asyncio": "inspect asyncio.sleep"}


# ------------------------------------------------------------------------------ the machine
def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # from the state on: the name may hold spaces


def tree_cpu_seconds(root: int) -> float:
    """utime+stime+cutime+cstime of ``root`` and its live descendants (a parent's c-times hold
    its reaped children, so nothing is counted twice while the tree is alive)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat(int(name))) is not None:
            stats[int(name)] = fields
            children.setdefault(int(fields[1]), []).append(int(name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        fields = stats.get(pid)
        if fields is not None:
            total += sum(int(x) for x in fields[11:15])
        todo.extend(children.get(pid, []))
    return total / CLK_TCK


def _median(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return statistics.median(values) if values else None


# ------------------------------------------------------------------------------ (a) rayeval run
def bench_rayeval_run(
    work: Path,
    evals: Path,
    isolation: str,
    seeds: int,
    seconds: float,
    concurrency: int,
    tag: str,
    source: str | None = None,
    agent: str = "sleep",
) -> dict:
    """One `rayeval run` in a subprocess, timed from outside; figures from its rows.
    ``source``: a `src` folder of another checkout of rayeval to run instead (a baseline).
    ``agent``: ``sleep`` (the built-in) or ``module`` (a user's ``module:function`` agent doing
    the same sleep, in a project folder the command runs from, as a user runs one); units ask
    for 0.01 CPU and 64 MiB either way (the built-in's own declaration: a module:function agent
    asks 512 MiB unless told, which lets only 45 units run at once on a 23 GiB machine)."""
    import pandas as pd

    from rayeval.storage import ERROR_STATUSES

    output, run_id = work / f"out-{tag}", f"{isolation}-{agent}-{tag}"
    cwd, name = REPO, "sleep"
    if agent in USER_AGENTS:
        cwd, name = work / "project", f"bench_user_agent:{USER_AGENTS[agent]}"
        cwd.mkdir(exist_ok=True)
        (cwd / "bench_user_agent.py").write_text(USER_AGENT)
    command = [
        shutil.which("rayeval") or "rayeval", "run", str(evals), "--agent", name, "--agent-arg", f"seconds={seconds}",
        "--seeds", str(seeds), "--max-concurrency", str(concurrency), "--isolation", isolation, "--unit-cpus", "0.01",
        "--unit-memory", "64M",
        "--output", str(output), "--run-id", run_id, "--no-progress",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # an embedded Ray, as on a laptop
    if source is not None:
        env["PYTHONPATH"] = source
    load = loadavg()[0]
    busy = machine_busy_seconds()
    with open(work / f"log-{tag}.txt", "wb") as log:
        start_epoch, start = time.time(), time.monotonic()
        code = subprocess.run(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
        wall = time.monotonic() - start
    busy = machine_busy_seconds() - busy
    if code != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {code}:\n{(work / f'log-{tag}.txt').read_text()[-3000:]}")
    rows = pd.read_parquet(
        output / f"run_id={run_id}",
        columns=["started_at", "finished_at", "agent_s", "duration_s", "status", "isolation"],
    )
    first, last = epoch(rows.started_at.min()), epoch(rows.finished_at.max())
    shutil.rmtree(output, ignore_errors=True)
    return {
        "command": " ".join(command[1:]),
        "units": len(rows),
        "errors": int(
            rows.status.isin(list(ERROR_STATUSES)).sum()
        ),  # the sleep agent's "failed" (no answer) is no error
        "isolation_recorded": sorted(rows.isolation.unique().tolist()),
        "wall_s": wall,
        "startup_s": first - start_epoch,
        "span_s": last - first,
        "agent_s_median": float(rows.agent_s.median()),
        "agent_s_p95": float(rows.agent_s.quantile(0.95)),
        "unit_overhead_s_median": float((rows.duration_s - rows.agent_s).median()),
        "machine_cpu_s": busy,
        "load1_before": load,
    }


USER_AGENT = """\
\"\"\"Written by rayeval's scripts/bench_sandbox.py: a user's own agent that sleeps.\"\"\"
import time


def solve(task_prompt, work_dir, context):
    time.sleep(float(context.args["seconds"]))


def solve_without_data(task_prompt, work_dir, context):
    time.sleep(float(context.args["seconds"]))


solve_without_data.needs_data = False  # as the built-in sleep agent declares: no inputs staged
"""
#: (a)'s user agents: ``module`` gets the eval's data staged, as any user's agent does unless
#: it says otherwise; ``module-nodata`` declares that it reads none, as the built-in does.
USER_AGENTS = {"module": "solve", "module-nodata": "solve_without_data"}


# ------------------------------------------------------------------------------ (c) inspect_ai
INSPECT_TASK = '''\
"""Written by rayeval's scripts/bench_sandbox.py: `samples` samples whose solver sleeps."""
import asyncio

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import Score, Target, mean, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox


@solver
def sleep_solver(mode: str, seconds: float):
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        if mode == "exec":  # a process in the sample's sandbox, as an agent's tool call runs
            result = await sandbox().exec(["sleep", str(seconds)])
            if not result.success:
                raise RuntimeError(result.stderr)
        else:
            await asyncio.sleep(seconds)
        return state

    return solve


@scorer(metrics=[mean()])
def trivial():
    async def score(state: TaskState, target: Target) -> Score:
        return Score(value=1.0)

    return score


@task
def sleep_task(samples: int = 2000, mode: str = "exec", seconds: float = 0.5):
    return Task(
        dataset=[Sample(id=i, input=f"unit {i}", target="") for i in range(samples)],
        solver=sleep_solver(mode, seconds),
        scorer=trivial(),
        sandbox="local" if mode == "exec" else None,
    )
'''

INSPECT_READER = """\
import json, sys
from inspect_ai.log import read_eval_log, read_eval_log_sample_summaries
path = sys.argv[1]
header = read_eval_log(path, header_only=True)
samples = read_eval_log_sample_summaries(path)
starts = [s.started_at for s in samples if s.started_at]
ends = [s.completed_at for s in samples if s.completed_at]
print(json.dumps({
    "status": header.status, "samples": len(samples), "errors": sum(1 for s in samples if s.error),
    "first_start": min(starts) if starts else None, "last_end": max(ends) if ends else None,
}))
"""


def inspect_version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import inspect_ai; print(inspect_ai.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()


def bench_inspect(work: Path, python: str, mode: str, units: int, seconds: float, concurrency: int, tag: str) -> dict:
    """One `inspect eval` in a subprocess, timed from outside; figures from its log."""
    folder = work / "inspect"
    folder.mkdir(exist_ok=True)
    task_file, reader = folder / "sleep_task.py", folder / "read_log.py"
    task_file.write_text(INSPECT_TASK)
    reader.write_text(INSPECT_READER)
    log_dir = folder / f"logs-{tag}"
    command = [
        python, "-m", "inspect_ai", "eval", task_file.name, "--model", "mockllm/model",
        "-T", f"samples={units}", "-T", f"mode={mode}", "-T", f"seconds={seconds}",
        "--max-samples", str(concurrency), "--max-subprocesses", str(concurrency), "--max-sandboxes", str(concurrency),
        "--display", "none", "--log-dir", str(log_dir),
    ]  # fmt: skip
    load = loadavg()[0]
    busy = machine_busy_seconds()
    with open(folder / f"out-{tag}.txt", "wb") as log:
        start_epoch, start = time.time(), time.monotonic()
        code = subprocess.run(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
        wall = time.monotonic() - start
    busy = machine_busy_seconds() - busy
    logs = sorted(log_dir.glob("*.eval"))
    if code != 0 or not logs:
        raise RuntimeError(f"inspect eval exited with {code}:\n{(folder / f'out-{tag}.txt').read_text()[-3000:]}")
    read = subprocess.run([python, str(reader), str(logs[-1])], capture_output=True, text=True, check=True)
    found = json.loads(read.stdout)
    shutil.rmtree(log_dir, ignore_errors=True)
    first, last = epoch(found["first_start"]), epoch(found["last_end"])
    return {
        "command": " ".join(["inspect", *command[3:]]),
        "units": found["samples"],
        "errors": found["errors"],
        "status": found["status"],
        "wall_s": wall,
        "startup_s": first - start_epoch,
        "span_s": last - first,
        "machine_cpu_s": busy,
        "load1_before": load,
    }


# ------------------------------------------------------------------------------ (b) one runner
def bench_unit_cost(
    work: Path, isolation: str, seq_units: int, conc_units: int, concurrency: int, seconds: float, tag: str
) -> dict:
    """Units on one UnitRunner (or inline threads), driven directly from this process."""
    from rayeval import load_evals
    from rayeval.agents.resolve import agent_ref, resolve_agent
    from rayeval.data.cache import default_cache_dir
    from rayeval.sandbox import SandboxConfig, UnitRunner, unit_runner
    from rayeval.sandbox.isolation import run_inline
    from rayeval.unit.context import AgentContext, call_agent
    from rayeval.unit.runner import unit_sandbox
    from rayeval.unit.unit_agent import unit_spec

    eval_ = load_evals(REPO / "evals")[0]
    root = work / f"units-{isolation}-{tag}"
    dirs = [root / f"u{i:05d}" for i in range(1 + seq_units + conc_units)]
    for folder in dirs:  # made before the clocks start: the units' own cost only
        folder.mkdir(parents=True)
    runners: list[UnitRunner] = []  # every runner started here, for their CPU and to close them
    ref = agent_ref("sleep")
    function = resolve_agent("sleep")

    def run_one(runner: UnitRunner | None, work_dir: Path, secs: float) -> None:
        context = AgentContext(eval_id=eval_.id, args={"seconds": str(secs)})
        if runner is None:
            outcome = run_inline(lambda: call_agent(function, eval_.task, work_dir, context), 600)
        else:
            outcome = runner.run(unit_spec(runner, ref, eval_.task, work_dir, context, []), 600)
        if outcome.kind != "returned":
            raise RuntimeError(f"{isolation} unit: {outcome.kind} {outcome.error_type}: {outcome.error_message}")

    def runner_for(work_root: Path) -> UnitRunner | None:
        if isolation == "inline":
            return None
        runner = unit_runner(unit_sandbox(SandboxConfig(), ref, {}), isolation, work_root, default_cache_dir())
        if runner not in runners:
            runners.append(runner)
        return runner

    def runners_cpu() -> float:
        # from the process each runner object started: bubblewrap (sandbox) or the runner (process)
        return sum(tree_cpu_seconds(r._process.pid) for r in runners if r._process is not None)

    def measure(count: int, body) -> dict:
        load = loadavg()[0]
        cpu, tree, busy, start = time.process_time(), runners_cpu(), machine_busy_seconds(), time.monotonic()
        body()
        wall = time.monotonic() - start
        cpu, tree, busy = time.process_time() - cpu, runners_cpu() - tree, machine_busy_seconds() - busy
        return {
            "wall_s": wall, "wall_ms_per_unit": 1e3 * wall / count, "caller_cpu_ms_per_unit": 1e3 * cpu / count,
            "runner_cpu_ms_per_unit": 1e3 * tree / count, "machine_cpu_ms_per_unit": 1e3 * busy / count,
            "runners": len(runners), "load1_before": load, "ideal_s": count * seconds / concurrency,
        }  # fmt: skip

    shared = runner_for(root)
    start = time.monotonic()
    run_one(shared, dirs[0], 0)  # starts the runner: once per runner
    first_unit = time.monotonic() - start

    def sequential() -> None:
        for folder in dirs[1 : 1 + seq_units]:
            run_one(shared, folder, 0)

    def concurrent() -> None:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(lambda folder: run_one(shared, folder, seconds), dirs[1 + seq_units :]))

    result: dict[str, Any] = {"first_unit_s": first_unit}
    try:
        result["sequential"] = measure(seq_units, sequential)
        settle(0.5)
        result["concurrent"] = measure(conc_units, concurrent)
    finally:
        for runner in runners:
            runner.close()
        shutil.rmtree(root, ignore_errors=True)
    result["concurrent"]["ratio"] = result["concurrent"]["wall_s"] / result["concurrent"]["ideal_s"]
    return result


# ------------------------------------------------------------------------------ report
def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def summarize_shape(records: dict[str, list[dict]], ideal: float) -> dict[str, dict]:
    summary = {}
    for label, rounds in records.items():
        wall, startup, span = (_median(rounds, k) for k in ("wall_s", "startup_s", "span_s"))
        after = [r["wall_s"] - r["startup_s"] for r in rounds]
        summary[label] = {
            "wall_s": wall, "startup_s": startup, "span_s": span,
            "wall_minus_startup_s": statistics.median(after),
            "ratio_wall_minus_startup": statistics.median(after) / ideal, "ratio_span": span / ideal,
            "errors": sum(r["errors"] for r in rounds), "units": rounds[0]["units"],
            "agent_s_median": _median(rounds, "agent_s_median"), "unit_overhead_s_median": _median(rounds, "unit_overhead_s_median"),
            "machine_cpu_s": _median(rounds, "machine_cpu_s"),
            "rounds_wall_minus_startup_s": after, "rounds_span_s": [r["span_s"] for r in rounds],
            "command": rounds[0]["command"],
        }  # fmt: skip
    return summary


def print_shape(
    summary: dict[str, dict], units: int, seconds: float, concurrency: int, ideal: float, rounds: int
) -> None:
    print(
        f"\n(a)/(c) {units} units x {seconds} s at concurrency {concurrency}: ideal {ideal:.1f} s; median of {rounds} round(s); "
        "start-up = command start -> first unit started; span = first unit start -> last unit end"
    )
    head = f"{'':34} {'wall s':>7} {'start-up':>8} {'wall-su':>7} {'/ideal':>6} {'span s':>7} {'/ideal':>6} {'rounds (wall-su)':>20} {'agent_s':>7} {'unit+':>6} {'CPU-s':>6} {'err':>4}"
    print(head)
    for label, s in summary.items():
        per_round = ",".join(f"{v:.1f}" for v in s["rounds_wall_minus_startup_s"])
        print(
            f"{label:34} {s['wall_s']:7.2f} {s['startup_s']:8.2f} {s['wall_minus_startup_s']:7.2f} {s['ratio_wall_minus_startup']:6.2f} "
            f"{s['span_s']:7.2f} {s['ratio_span']:6.2f} {per_round:>20} {fmt(s['agent_s_median'], '.3f'):>7} "
            f"{fmt(s['unit_overhead_s_median'], '.3f'):>6} {fmt(s['machine_cpu_s'], '.1f'):>6} {s['errors']:4d}"
        )
    print(
        "  wall-su: wall minus start-up (goal: <= 1.3 x ideal); agent_s: median seconds a unit's agent took (rows); "
        "unit+: median duration_s - agent_s (work folder, control groups, listing); CPU-s: machine-wide busy CPU-seconds "
        "during the command (other processes included)"
    )


def summarize_units(records: dict[str, list[dict]]) -> dict[str, dict]:
    summary = {}
    for level, rounds in records.items():
        summary[level] = {"first_unit_s": _median(rounds, "first_unit_s")}
        for key in ("sequential", "concurrent"):
            parts = [r[key] for r in rounds if key in r]
            if parts:
                summary[level][key] = {k: _median(parts, k) for k in parts[0]}
                summary[level][key]["rounds_wall_s"] = [p["wall_s"] for p in parts]
    return summary


def print_units(
    summary: dict[str, dict], seq_units: int, conc_units: int, concurrency: int, seconds: float, rounds: int
) -> None:
    print(f"\n(b) UnitRunner driven directly (no Ray), median of {rounds} round(s); ms per unit")
    print(f"  {seq_units} sequential units at 0 s, one runner:")
    print(f"  {'level':8} {'1st unit s':>10} {'wall':>7} {'caller CPU':>10} {'runner CPU':>10} {'machine CPU':>11}")
    for level, s in summary.items():
        q = s["sequential"]
        print(
            f"  {level:8} {s['first_unit_s']:10.3f} {q['wall_ms_per_unit']:7.2f} {q['caller_cpu_ms_per_unit']:10.2f} "
            f"{q['runner_cpu_ms_per_unit']:10.2f} {q['machine_cpu_ms_per_unit']:11.2f}"
        )
    print(f"  {conc_units} units at {seconds} s from {concurrency} threads:")
    print(
        f"  {'level':8} {'wall s':>7} {'ideal':>5} {'ratio':>5} {'caller CPU':>10} {'runner CPU':>10} {'machine CPU':>11}  rounds (wall s)"
    )
    for level, s in summary.items():
        c = s["concurrent"]
        print(
            f"  {level:8} {c['wall_s']:7.2f} {c['ideal_s']:5.1f} {c['ratio']:5.2f} {c['caller_cpu_ms_per_unit']:10.2f} "
            f"{c['runner_cpu_ms_per_unit']:10.2f} {c['machine_cpu_ms_per_unit']:11.2f}  {','.join(f'{w:.2f}' for w in c['rounds_wall_s'])}"
        )
    print(
        "  1st unit: the runner's start plus one unit (once per runner); caller CPU: this process (time.process_time: "
        "spec, sockets, control groups, starting runners); runner CPU: the runners' process trees, units included; "
        "machine CPU: /proc/stat, all processes (on a busy machine, others' too)"
    )


# ------------------------------------------------------------------------------ (f) the floor
FLOOR = """
import gc, importlib, json, os, sys, time
from rayeval.agents.resolve import agent_ref
from rayeval.unit.unit_agent import UNIT_PRELOAD
from rayeval.sandbox import namespaces as ns
from rayeval.sandbox.unit_runner import _NAMESPACES
for module in (*UNIT_PRELOAD, *agent_ref("sleep").preload):
    importlib.import_module(module)
gc.freeze()
figures = {}
for kind, flags in (("fork", 0), ("clone into the namespaces", _NAMESPACES)):
    started, read_end, write_end = [], *os.pipe()
    cpu = os.times()
    for _ in range(300):
        start = time.perf_counter()
        pid = ns.clone(flags)
        if pid == 0:
            os.write(write_end, str(time.perf_counter() - start).encode().ljust(32))
            os._exit(0)
        started.append(float(os.read(read_end, 32)))
        os.waitpid(pid, 0)
    end = os.times()
    spent = sum(getattr(end, f) - getattr(cpu, f) for f in ("user", "system", "children_user", "children_system"))
    figures[kind] = {"running_ms": 1e3 * sorted(started)[150], "cpu_ms": 1e3 * spent / 300}
print(json.dumps(figures))
"""


def bench_floor() -> dict:
    """(f): one fresh process's cost, in a subprocess that imported what a unit runner imports."""
    done = subprocess.run([sys.executable, "-c", FLOOR], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--which",
        default="a,b,c",
        help="a: rayeval run per level; b: one runner's per-unit cost; c: inspect_ai; f: a fresh process's floor",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--evals", default=str(REPO / "evals"), help="eval folder for (a) (default: the repository's 10 examples)"
    )
    parser.add_argument(
        "--units", type=int, default=2000, help="units for (a) and (c); (a) runs units / number of evals seeds"
    )
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, default=250)
    parser.add_argument("--levels", default=",".join(LEVELS))
    parser.add_argument(
        "--agents",
        default="sleep,module,module-nodata",
        help="(a)'s agents: sleep (built-in), module (a module:function agent, data staged), "
        "module-nodata (one declaring needs_data = False, as sleep does)",
    )
    parser.add_argument("--seq-units", type=int, default=300)
    parser.add_argument("--conc-units", type=int, default=1000)
    parser.add_argument(
        "--inspect-python",
        help="python of a virtual environment with inspect-ai (see the docstring); (c) is skipped without it",
    )
    parser.add_argument("--inspect-variants", default=",".join(INSPECT_VARIANTS))
    parser.add_argument("--json", help="write every figure (each round and the medians) to this file")
    args = parser.parse_args()
    which = set(args.which.split(","))
    levels = [lv for lv in args.levels.split(",") if lv]
    variants = [v for v in args.inspect_variants.split(",") if v]

    from rayeval import __version__, load_evals

    compile_bytecode()
    started = loadavg()
    print(
        f"rayeval {__version__}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; load average at start: "
        f"{started[0]:.2f} {started[1]:.2f} {started[2]:.2f}"
    )
    evals_count = len(load_evals(args.evals))
    seeds = max(1, args.units // evals_count)
    units_a = seeds * evals_count
    ideal = units_a * args.seconds / args.concurrency
    inspect = None
    if "c" in which:
        if args.inspect_python:
            inspect = inspect_version(args.inspect_python)
            print(f"inspect_ai {inspect} from {args.inspect_python}")
        else:
            print(
                "(c) skipped: no --inspect-python given (python -m venv /tmp/inspect-venv && "
                "/tmp/inspect-venv/bin/pip install inspect-ai==0.3.285, then --inspect-python /tmp/inspect-venv/bin/python)"
            )

    jobs: list[tuple[str, Any]] = []
    if "a" in which:
        jobs += [
            (
                f"rayeval {lv} {agent}",
                lambda work, tag, lv=lv, agent=agent: bench_rayeval_run(
                    work, Path(args.evals), lv, seeds, args.seconds, args.concurrency, tag, agent=agent
                ),
            )
            for agent in args.agents.split(",")
            for lv in levels
        ]
    if inspect is not None:
        jobs += [
            (
                INSPECT_VARIANTS[v],
                lambda work, tag, v=v: bench_inspect(
                    work, args.inspect_python, v, units_a, args.seconds, args.concurrency, tag
                ),
            )
            for v in variants
        ]
    shape: dict[str, list[dict]] = {label: [] for label, _ in jobs}
    units: dict[str, list[dict]] = {lv: [] for lv in levels} if "b" in which else {}
    with tempfile.TemporaryDirectory(prefix="rayeval-bench-sandbox-") as tmp:
        work = Path(tmp)
        for round_ in range(1, args.rounds + 1):
            shift = (round_ - 1) % max(1, len(jobs))
            for label, job in jobs[shift:] + jobs[:shift]:
                settle()
                record = job(work, f"r{round_}")
                shape[label].append(record)
                print(
                    f"round {round_} {label}: wall {record['wall_s']:.2f} s, start-up {record['startup_s']:.2f} s, "
                    f"span {record['span_s']:.2f} s ({record['span_s'] / ideal:.2f}x ideal), "
                    f"wall-start-up {(record['wall_s'] - record['startup_s']) / ideal:.2f}x ideal, "
                    f"{record['units']} units, {record['errors']} errors, load {record['load1_before']:.1f}",
                    flush=True,
                )
            for level, records in units.items():
                settle()
                record = bench_unit_cost(
                    work, level, args.seq_units, args.conc_units, args.concurrency, args.seconds, f"r{round_}"
                )
                records.append(record)
                q, c = record["sequential"], record["concurrent"]
                print(
                    f"round {round_} unit cost {level}: first unit {record['first_unit_s']:.3f} s; sequential "
                    f"{q['wall_ms_per_unit']:.2f} ms/unit wall, CPU caller {q['caller_cpu_ms_per_unit']:.2f} + runner "
                    f"{q['runner_cpu_ms_per_unit']:.2f} ms (machine {q['machine_cpu_ms_per_unit']:.2f}); concurrent "
                    f"{c['wall_s']:.2f} s = {c['ratio']:.2f}x ideal, load {q['load1_before']:.1f}",
                    flush=True,
                )
    if "f" in which:
        for round_ in range(1, args.rounds + 1):
            settle()
            for kind, figure in bench_floor().items():
                print(f"round {round_} floor, {kind} and exit: child running after {figure['running_ms']:.3f} ms, "
                      f"{figure['cpu_ms']:.2f} ms CPU (parent and child)", flush=True)  # fmt: skip
    ended = loadavg()
    shape_summary = summarize_shape(shape, ideal) if shape else {}
    units_summary = summarize_units(units) if units else {}
    if shape_summary:
        print_shape(shape_summary, units_a, args.seconds, args.concurrency, ideal, args.rounds)
    if units_summary:
        print_units(units_summary, args.seq_units, args.conc_units, args.concurrency, args.seconds, args.rounds)
    print(
        f"\nload average at start {started[0]:.2f} {started[1]:.2f} {started[2]:.2f}, at end {ended[0]:.2f} {ended[1]:.2f} {ended[2]:.2f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "rayeval": __version__, "inspect_ai": inspect,
                        "loadavg_start": started, "loadavg_end": ended},
            "shape": {"units": units_a, "seconds": args.seconds, "concurrency": args.concurrency, "ideal_s": ideal,
                      "rounds": args.rounds, "median": shape_summary, "each_round": shape},
            "unit_cost": {"sequential_units": args.seq_units, "concurrent_units": args.conc_units, "median": units_summary, "each_round": units},
        }, indent=2, default=str))  # fmt: skip
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
