"""Model layer benchmark (issue 18): N prompt-agent units against a loopback model server
answering after D seconds, at --max-concurrency C.

  (a) cold: the run with an empty response cache, against the ideal N*D/C and against the bare
      OpenAI SDK (AsyncOpenAI, one asyncio loop, C requests at once) making the same N calls
      in the same process run (see ../shared/notes/models.md: the SDK's own CPU is the limit
      on this class of machine); Ray's start-up is measured apart and not included.
  (b) warm: the same run again on the filled cache: its model calls (the goal: 0) and wall.
  (c) limited: (a) with ``max_connections=C``, the request limit shared by the run's workers
      (a Ray actor: two actor calls a request), on an empty cache.
  (d) judged: (a) with each eval graded by a one-criterion ``rubric`` whose judge is the same
      server (a call of --judge-delay seconds more per unit, default D), judge concurrency C:
      the judges' share of the wall time against (a) (goal: at most 10 % more).
  (e) gateway: the bare SDK's N calls (C at once) made through rayeval's model gateway, run in
      a process of its own as in a worker, against the same calls direct, two rounds each in
      turn (goal: at most 1.05x the time); the time to the first streamed byte of 100 calls one
      after the other, direct and through it (goal: at most 2 ms more at the median); and the
      gateway's CPU per call.

The server runs in its own process (tests/agents/fake_model_server.py), so its threads do not
share the driver's interpreter lock.

Usage: python scripts/bench_models.py [--units 1000] [--delay 0.2] [--judge-delay D] [--concurrency 100]
                                     [--which cold,warm,limited,judged,gateway]

Units of seconds with judges of about a second (the shape real runs have):
``--units 200 --delay 5 --judge-delay 1 --concurrency 50 --which cold,judged``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import ray

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from bench_common import ray_startup_seconds, settle, unit_timing

from rayeval.agents.prompt import ANSWER_INSTRUCTION
from rayeval.batch import BatchConfig, run_batch

EVALS = 100
ANSWER = '<EVAL_ANSWER>{"answer": "B"}</EVAL_ANSWER>'
JUDGED = {"type": "rubric", "config": {
    "answer_field": "answer", "criteria": [{"description": "answers B", "score_delta": 1}],
    "model_id": "openai/gpt-4o",
}}  # fmt: skip


def reply(body: dict, delay_s: float, judge_delay_s: float) -> str:
    """The judge's verdict to a judge's request (it has a system prompt), else the agent's
    answer, each after its delay."""
    if any(message.get("role") == "system" for message in body.get("messages", [])):
        time.sleep(judge_delay_s)
        return json.dumps({"met": True, "rationale": "it answers B"})
    time.sleep(delay_s)
    return f"It is B.\n{ANSWER}"


def serve(delay_s: float, judge_delay_s: float, pipe: Connection) -> None:
    """The loopback server, in this child process: sends its URL, then answers each message on
    ``pipe`` with (model requests so far, most in flight at once)."""
    from tests.agents.fake_model_server import FakeModelServer

    answer = functools.partial(reply, delay_s=delay_s, judge_delay_s=judge_delay_s)
    server = FakeModelServer(script=[], answer=answer).start()
    pipe.send(server.url)
    while pipe.recv() != "stop":
        pipe.send((len(server.model_requests()), server.max_in_flight))
    server.stop()


def make_evals(folder: Path, grader: dict | None = None) -> list[str]:
    """Multiple-choice evals (or graded by ``grader``) with distinct tasks (distinct requests,
    distinct cache entries)."""
    folder.mkdir(parents=True)
    tasks = []
    for index in range(EVALS):
        task = f'Question {index}: A or B? Answer as <EVAL_ANSWER>{{"answer": "A|B"}}</EVAL_ANSWER>'
        body = {
            "id": f"bench_{index:03d}",
            "task": task,
            "metadata": {"task": "bench", "kit": "none"},
            "grader": grader or {"type": "multiple_choice", "config": {"correct_answer": "B"}},
        }
        (folder / f"bench_{index:03d}.json").write_text(json.dumps(body))
        tasks.append(task)
    return tasks


def counts(pipe: Connection) -> tuple[int, int]:
    pipe.send("count")
    return pipe.recv()


async def bare_sdk(
    base_url: str, tasks: list[str], units: int, concurrency: int, api_key: str = "sk-bench-not-a-key"
) -> float:
    """Seconds for the same calls made with the bare SDK: C at once, one asyncio loop."""
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    limit = asyncio.Semaphore(concurrency)

    async def call(task: str, seed: int) -> None:
        async with limit:
            await client.chat.completions.create(
                model="gpt-4o",
                messages=[{"role": "user", "content": task + ANSWER_INSTRUCTION}],
                temperature=0,
                seed=seed,
            )

    start = time.monotonic()
    seeds = range(1, units // EVALS + 1)
    await asyncio.gather(*(call(task, seed) for task in tasks for seed in seeds))
    elapsed = time.monotonic() - start
    await client.close()
    return elapsed


def serve_gateway(upstream: str, pipe: Connection) -> None:
    """rayeval's gateway in this child process (as in a worker), one unit's session open:
    sends its OpenAI base URL, the unit's token and its pid, then stops when told."""
    from rayeval.gateway.server import Gateway, Upstream

    with Gateway() as gateway:
        session = gateway.open({"openai": Upstream(upstream, ("sk-bench-not-a-key",))})
        pipe.send((gateway.base_url("openai"), session.token, os.getpid()))
        pipe.recv()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_byte_ms(base_url: str, api_key: str, calls: int = 100) -> float:
    """The median milliseconds to the first streamed chunk of ``calls`` calls made in turn."""
    import statistics

    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Stream."}], stream=True
        )
        next(iter(stream))
        times.append((time.perf_counter() - start) * 1000)
        stream.close()
    client.close()
    return statistics.median(times)


GATEWAY_ROUNDS = 5


def bench_gateway(base_url: str, tasks: list[str], units: int, concurrency: int, ideal: float) -> None:
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=serve_gateway, args=(base_url, theirs), daemon=True)
    process.start()
    gateway_url, token, pid = ours.recv()
    direct, through = [], []
    cpu = 0.0
    for _ in range(GATEWAY_ROUNDS):  # in turn, best of each: the noise of a shared 2-core machine is ~5 %
        settle()
        direct.append(asyncio.run(bare_sdk(base_url, tasks, units, concurrency)))
        settle()
        before = cpu_seconds(pid)
        through.append(asyncio.run(bare_sdk(gateway_url, tasks, units, concurrency, token)))
        cpu += cpu_seconds(pid) - before
    print(f"gateway: {units} calls, direct {min(direct):.2f}s / through the gateway {min(through):.2f}s (best of "
          f"{GATEWAY_ROUNDS} each) = {min(through) / min(direct):.3f}x (goal <= 1.05x), {min(through) / ideal:.2f}x ideal; "
          f"the gateway's CPU {cpu / (GATEWAY_ROUNDS * units) * 1000:.2f} ms a call")  # fmt: skip
    settle()
    direct_ms, through_ms = first_byte_ms(base_url, "sk-bench-not-a-key"), first_byte_ms(gateway_url, token)
    print(f"gateway: first streamed byte, median of 100 calls: direct {direct_ms:.2f} ms, through the gateway "
          f"{through_ms:.2f} ms: {through_ms - direct_ms:+.2f} ms (goal <= +2 ms)")  # fmt: skip
    ours.send("stop")
    process.join(10)


def run(
    work: Path, base_url: str, units: int, concurrency: int, run_id: str, evals: str = "evals", **options: str
) -> tuple[float, float]:
    """(wall of the run, Ray's start-up measured before it); ``options``: more --agent-arg."""
    startup = ray_startup_seconds()
    start = time.monotonic()
    run_batch(BatchConfig(
        evals=[str(work / evals)], agent="prompt", judge_concurrency=concurrency, models=["openai/gpt-4o"], seeds=list(range(1, units // EVALS + 1)),
        agent_args={"base_url": base_url, "temperature": "0", "cache": str(work / "responses"), **options},
        output=str(work / "out"), run_id=run_id, max_concurrency=concurrency, show_progress=False,
    ))  # fmt: skip
    wall = time.monotonic() - start
    ray.shutdown()
    return wall, startup


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--units", type=int, default=1000, help="a multiple of 100 (100 evals x seeds)")
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--judge-delay", type=float, help="seconds a judge call takes (default: --delay)")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--which", default="cold,warm,limited,judged,gateway", help="which runs, in this order")
    args = parser.parse_args()
    judge_delay = args.delay if args.judge_delay is None else args.judge_delay
    which = [name for name in ("cold", "warm", "limited", "judged") if name in args.which.split(",")]
    os.environ["OPENAI_API_KEY"] = "sk-bench-not-a-key"  # the agent's and the judge's
    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.get_context("spawn").Process(
        target=serve, args=(args.delay, judge_delay, theirs), daemon=True
    )
    server.start()
    base_url = f"{ours.recv()}/v1"
    os.environ["OPENAI_BASE_URL"] = base_url  # the judge's (the agent's comes as --agent-arg)
    ideal = args.units * args.delay / args.concurrency
    with tempfile.TemporaryDirectory(prefix="bench_models_") as folder:
        work = Path(folder)
        tasks = make_evals(work / "evals")
        make_evals(work / "evals_judged", JUDGED)
        walls = {}
        sdk = asyncio.run(bare_sdk(base_url, tasks, args.units, args.concurrency))
        before, _ = counts(ours)
        print(f"bare SDK: {before} calls in {sdk:.2f}s = {sdk / ideal:.2f}x ideal ({ideal:.1f}s)")
        runs = {"cold": {}, "warm": {}, "limited": {"max_connections": str(args.concurrency)}, "judged": {}}
        for name in which:
            options = runs[name]
            if name in ("limited", "judged") and (work / "responses").exists():
                shutil.rmtree(work / "responses")
            settle()
            evals = "evals_judged" if name == "judged" else "evals"
            wall, startup = run(work, base_url, args.units, args.concurrency, name, evals, **options)
            walls[name] = wall
            after, in_flight = counts(ours)
            to_first, span = unit_timing(work / "out", name)
            print(f"{name}: {after - before} model calls (at most {in_flight} at once so far), wall {wall:.2f}s = "
                  f"{wall / ideal:.2f}x ideal, {wall / sdk:.2f}x the bare SDK (Ray start-up {startup:.1f}s not included); "
                  f"worker start-up {to_first:.1f}s, then {span:.2f}s = {span / ideal:.2f}x ideal, {span / sdk:.2f}x the SDK")  # fmt: skip
            before = after
        if "gateway" in args.which.split(","):
            bench_gateway(base_url, tasks, args.units, args.concurrency, ideal)
        if {"cold", "judged"} <= walls.keys():
            print(f"judged: wall {walls['judged']:.2f}s = {walls['judged'] / walls['cold']:.2f}x the cold run's "
                  f"(goal <= 1.10x): the judges' share {walls['judged'] / walls['cold'] - 1:+.0%}")  # fmt: skip
    ours.send("stop")
    server.join(5)


if __name__ == "__main__":
    main()
