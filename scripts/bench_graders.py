"""Grading speed per grader type over the conformance vectors.

Prints microseconds per grading and gradings per second for each type and in total, and the
ratio against a baseline measured in the same run:
  * the reference implementation, when ``--reference-python`` names an interpreter that has
    ``latch_eval_tools`` installed (run in a subprocess, never imported here);
  * otherwise the published reference figure of about 14 µs per grading on this machine class.

Usage: python scripts/bench_graders.py [--repeat N] [--reference-python /path/to/python]
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

# The timing loop, shared verbatim by our run and the reference run (only the import differs).
TIMING_LOOP = r"""
import json, sys, time
from collections import defaultdict
vectors = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
repeat = int(sys.argv[2])
totals = defaultdict(float); counts = defaultdict(int)
for v in vectors:
    grader = get_grader(v["type"])
    answer, config = v["answer"], v["config"]
    grader.evaluate_answer(answer, config)  # warm-up
    start = time.perf_counter()
    for _ in range(repeat):
        grader.evaluate_answer(answer, config)
    totals[v["type"]] += time.perf_counter() - start
    counts[v["type"]] += repeat
print(json.dumps({t: [totals[t], counts[t]] for t in totals}))
"""

OURS_IMPORT = "from rayeval.graders import get_grader\n"
REFERENCE_IMPORT = (
    "from latch_eval_tools.graders import GRADER_REGISTRY\ndef get_grader(name):\n    return GRADER_REGISTRY[name]()\n"
)


def measure(python: str, import_line: str, repeat: int) -> dict[str, tuple[float, int]]:
    done = subprocess.run(
        [python, "-c", import_line + TIMING_LOOP, str(VECTORS), str(repeat)],
        capture_output=True,
        text=True,
        check=True,
    )
    return {t: (s, n) for t, (s, n) in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def best_of(best: dict[str, tuple[float, int]], new: dict[str, tuple[float, int]]) -> dict[str, tuple[float, int]]:
    return {t: min(best.get(t, new[t]), new[t]) for t in new}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best time per type counts")
    parser.add_argument("--reference-python", help="interpreter with latch_eval_tools installed")
    args = parser.parse_args()

    ours: dict[str, tuple[float, int]] = {}
    reference: dict[str, tuple[float, int]] | None = {} if args.reference_python else None
    for _ in range(args.rounds):  # alternate, so machine noise hits both alike
        ours = best_of(ours, measure(sys.executable, OURS_IMPORT, args.repeat))
        if reference is not None:
            reference = best_of(reference, measure(args.reference_python, REFERENCE_IMPORT, args.repeat))

    print(f"{'grader type':32} {'µs/grading':>11} {'gradings/s':>11} {'ref µs':>8} {'speed-up':>9}")
    for name in sorted(ours):
        seconds, count = ours[name]
        us = seconds / count * 1e6
        ref = (
            f"{reference[name][0] / reference[name][1] * 1e6:8.2f}" if reference and name in reference else f"{'-':>8}"
        )
        ratio = f"{float(ref) / us:8.2f}x" if ref.strip() != "-" else f"{'-':>9}"
        print(f"{name:32} {us:11.2f} {1e6 / us:11.0f} {ref} {ratio}")

    total_s = sum(s for s, _ in ours.values())
    total_n = sum(n for _, n in ours.values())
    ours_us = total_s / total_n * 1e6
    if reference:
        ref_us = sum(s for s, _ in reference.values()) / sum(n for _, n in reference.values()) * 1e6
        source = "reference measured in this run"
    else:
        ref_us, source = PUBLISHED_REFERENCE_US, "published reference figure"
    print(f"\nTOTAL over {total_n} gradings: {ours_us:.2f} µs/grading, {1e6 / ours_us:,.0f} gradings/s")
    print(f"baseline ({source}): {ref_us:.2f} µs/grading -> ours is {ref_us / ours_us:.2f}x the baseline speed")


if __name__ == "__main__":
    main()
