"""Grading speed per grader type over the conformance vectors.

Prints microseconds per grading and gradings per second for each type and in total, and the
ratio against a baseline measured in the same run:
  * the reference implementation, when ``--reference-python`` names an interpreter that has
    ``latch_eval_tools`` installed (run in a subprocess, never imported here);
  * otherwise the published reference figure of about 14 µs per grading on this machine class.

Each implementation runs in a long-lived worker process that times one grader type when asked.
The driver asks ours and the reference in turn, type by type, for several rounds (the order
swapped every round) and keeps each side's best round per vector: a shared machine's speed
drifts within seconds, and timing the two sides moments apart lets the drift hit both alike.

With ``--bounded``, also the cost of grading as a batch run grades (``grade_bounded``: the
answer sent to a grading process of its own, its verdict read back; once per vector and round)
against ``grade`` in this process, over the vectors that can be an eval's grader: the
per-grading overhead of the time limit.

Usage: python scripts/bench_graders.py [--repeat N] [--rounds N] [--reference-python /path/to/python] [--bounded]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VECTORS = REPO.parent / "shared" / "conformance" / "graders.jsonl"
PUBLISHED_REFERENCE_US = 14.0

# The worker, shared verbatim by our side and the reference side (only the import differs):
# reads a grader type per line, answers with the seconds each of its vectors took for ``repeat``
# gradings.
WORKER = r"""
import json, sys, time
vectors = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
repeat = int(sys.argv[2])
for line in sys.stdin:
    seconds = []
    for v in vectors:
        if v["type"] != line.strip():
            continue
        grader = get_grader(v["type"])
        answer, config = v["answer"], v["config"]
        grader.evaluate_answer(answer, config)  # warm-up
        start = time.perf_counter()
        for _ in range(repeat):
            grader.evaluate_answer(answer, config)
        seconds.append(time.perf_counter() - start)
    print(json.dumps(seconds), flush=True)
"""

OURS_IMPORT = "from rayeval.graders import get_grader\n"
REFERENCE_IMPORT = (
    "from latch_eval_tools.graders import GRADER_REGISTRY\ndef get_grader(name):\n    return GRADER_REGISTRY[name]()\n"
)


class Worker:
    """One implementation's timing process."""

    def __init__(self, python: str, import_line: str, repeat: int) -> None:
        self.process = subprocess.Popen(
            [python, "-c", import_line + WORKER, str(VECTORS), str(repeat)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def time(self, grader_type: str) -> list[float]:
        """Seconds per vector of ``grader_type``, for ``repeat`` gradings each."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(grader_type + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise SystemExit(f"the timing worker {self.process.args[0]} exited (see its error above)")
        return json.loads(reply)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def measure(
    types: list[str], ours: Worker, reference: Worker | None, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Best round per vector for each side, the two sides timed in turn type by type."""
    best_ours: dict[str, list[float]] = {}
    best_reference: dict[str, list[float]] = {}
    for round_number in range(rounds):
        for grader_type in types:
            sides = [(ours, best_ours), (reference, best_reference)] if reference else [(ours, best_ours)]
            for worker, best in sides if round_number % 2 == 0 else reversed(sides):
                timing = worker.time(grader_type)
                best[grader_type] = list(map(min, best.get(grader_type, timing), timing))
    return best_ours, best_reference


def per_grading_us(seconds: list[float], repeat: int) -> float:
    return sum(seconds) / (len(seconds) * repeat) * 1e6


def bounded_overhead(repeat: int, rounds: int) -> None:
    """µs per grading in a grading process (once per vector) and in this process (``repeat``
    times per vector), best round of each."""
    import time

    from pydantic import ValidationError

    from rayeval.evals import Eval
    from rayeval.unit import grade
    from rayeval.unit.grading_process import grade_bounded

    cases = []
    for line in VECTORS.read_text().splitlines():
        if line.strip():
            vector = json.loads(line)
            try:
                body = {"id": "v", "task": "t", "grader": {"type": vector["type"], "config": vector["config"]}}
                cases.append((Eval.model_validate(body), vector["answer"]))
            except ValidationError:  # a config that is not an object: no eval holds it
                continue
    best = {"bounded": float("inf"), "in process": float("inf")}
    for _ in range(rounds):
        for name, function, times in (("bounded", grade_bounded, 1), ("in process", grade, repeat)):
            start = time.perf_counter()
            for _ in range(times):
                for eval_, answer in cases:
                    function(eval_, answer)
            best[name] = min(best[name], (time.perf_counter() - start) / (times * len(cases)) * 1e6)
    print(
        f"\nbounded grading over {len(cases)} vectors: {best['bounded']:.1f} µs/grading in a grading "
        f"process, {best['in process']:.1f} µs in process: {best['bounded'] - best['in process']:.1f} µs overhead"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=100, help="gradings per vector in a round")
    parser.add_argument("--rounds", type=int, default=10, help="rounds; the best round per vector and side counts")
    parser.add_argument("--reference-python", help="interpreter with latch_eval_tools installed")
    parser.add_argument("--bounded", action="store_true", help="also a grading process's overhead per grading")
    args = parser.parse_args()

    types = sorted({json.loads(line)["type"] for line in VECTORS.read_text().splitlines() if line.strip()})
    workers = [Worker(sys.executable, OURS_IMPORT, args.repeat)]
    if args.reference_python:
        workers.append(Worker(args.reference_python, REFERENCE_IMPORT, args.repeat))
    try:
        ours, reference = measure(types, workers[0], workers[1] if len(workers) > 1 else None, args.rounds)
    finally:
        for worker in workers:
            worker.close()

    print(f"{'grader type':32} {'µs/grading':>11} {'gradings/s':>11} {'ref µs':>8} {'speed-up':>9}")
    for name in types:
        us = per_grading_us(ours[name], args.repeat)
        if name in reference:
            ref_us = per_grading_us(reference[name], args.repeat)
            print(f"{name:32} {us:11.2f} {1e6 / us:11.0f} {ref_us:8.2f} {ref_us / us:8.2f}x")
        else:
            print(f"{name:32} {us:11.2f} {1e6 / us:11.0f} {'-':>8} {'-':>9}")

    ours_us = per_grading_us([s for times in ours.values() for s in times], args.repeat)
    total_n = sum(len(times) for times in ours.values()) * args.repeat
    if reference:
        ref_us = per_grading_us([s for times in reference.values() for s in times], args.repeat)
        source = "reference measured in this run"
    else:
        ref_us, source = PUBLISHED_REFERENCE_US, "published reference figure"
    print(f"\nTOTAL over {total_n} gradings: {ours_us:.2f} µs/grading, {1e6 / ours_us:,.0f} gradings/s")
    print(f"baseline ({source}): {ref_us:.2f} µs/grading -> ours is {ref_us / ours_us:.2f}x the baseline speed")
    if args.bounded:
        bounded_overhead(max(1, args.repeat // 20), args.rounds)


if __name__ == "__main__":
    main()
