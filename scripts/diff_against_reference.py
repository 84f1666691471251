"""Differential check of our graders against the reference implementation, as a black box.

Mutates the conformance vectors (one subtree of the answer or config replaced by another JSON
value), grades every case with both implementations and prints the disagreements on
(passed, score, score_max, configuration_error). The reference runs in a separate interpreter
that has ``latch_eval_tools`` installed; it is never imported into rayeval.

Usage: python scripts/diff_against_reference.py --reference-python /path/to/python [--cases N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VECTORS = REPO.parent / "shared" / "conformance" / "graders.jsonl"

REFERENCE_RUNNER = r"""
import json, math, sys
from latch_eval_tools.graders import GRADER_REGISTRY
for line in open(sys.argv[1]):
    case = json.loads(line)
    try:
        r = GRADER_REGISTRY[case["type"]]().evaluate_answer(case["answer"], case["config"])
        m = r.metrics if isinstance(r.metrics, dict) else {}
        out = {"passed": bool(r.passed), "score": float(r.score), "score_max": float(r.score_max),
               "configuration_error": "configuration_error" in m}
    except BaseException as exc:
        out = {"raised": type(exc).__name__}
    print(json.dumps(out, allow_nan=True))
"""

REPLACEMENTS: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    0.5,
    1.5,
    2,
    1e20,
    10**30,
    "",
    " ",
    "x",
    "1",
    "1_000",
    "nan",
    "inf",
    "$",
    "$.a",
    "$.a[*]",
    [],
    [1],
    ["a", "b"],
    [[1]],
    {},
    {"a": 1},
    "gate",
    "hard_fail",
    "additive",
    "absolute",
    "relative",
    "min",
    "max",
    "sort",
    "min_passing",
    "score_threshold",
    "all",
    3.0,
    100,
    -0.0,
]


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += paths(child, prefix + (index,))
    return found


def replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replace(value[path[0]], path[1:], new)
    return copy


def mutate(rng: random.Random, vector: dict) -> dict:
    case = {"type": vector["type"], "answer": vector["answer"], "config": vector["config"]}
    for _ in range(rng.choice([1, 1, 2])):
        side = rng.choice(["answer", "config", "config"])
        target = case[side]
        path = rng.choice(paths(target))
        if path and isinstance(path[-1], str) and rng.random() < 0.15:
            parent = target
            for part in path[:-1]:
                parent = parent[part]
            case[side] = replace(target, path[:-1], {k: v for k, v in parent.items() if k != path[-1]})
        else:
            case[side] = replace(target, path, rng.choice(REPLACEMENTS))
    return case


def ours(case: dict) -> dict:
    from rayeval.graders import get_grader

    r = get_grader(case["type"]).evaluate_answer(case["answer"], case["config"])
    return {
        "passed": r.passed,
        "score": r.score,
        "score_max": r.score_max,
        "configuration_error": "configuration_error" in r.metrics,
    }


def same(a: dict, b: dict) -> bool:
    if "raised" in b:  # the reference crashed: ours must have returned a failed result
        return a["passed"] is False
    return (
        a["passed"] == b["passed"]
        and a["configuration_error"] == b["configuration_error"]
        and all(
            math.isclose(a[k], b[k], abs_tol=1e-9) or (math.isnan(a[k]) and math.isnan(b[k]))
            for k in ("score", "score_max")
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference-python", required=True)
    parser.add_argument("--cases", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--show", type=int, default=15)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    vectors = [json.loads(line) for line in VECTORS.read_text().splitlines() if line.strip()]
    cases = [mutate(rng, rng.choice(vectors)) for _ in range(args.cases)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as handle:
        for case in cases:
            handle.write(json.dumps(case) + "\n")
    done = subprocess.run(
        [args.reference_python, "-c", REFERENCE_RUNNER, handle.name], capture_output=True, text=True, check=True
    )
    theirs = [json.loads(line) for line in done.stdout.splitlines()]
    disagreements = [(c, ours(c), t) for c, t in zip(cases, theirs) if not same(ours(c), t)]
    crashed = sum("raised" in t for t in theirs)
    by_type: dict[str, int] = {}
    for case, _, _ in disagreements:
        by_type[case["type"]] = by_type.get(case["type"], 0) + 1
    print(f"{len(cases)} cases, reference crashed on {crashed}, disagreements: {len(disagreements)} {by_type}")
    for case, mine, ref in disagreements[: args.show]:
        print(json.dumps({"case": case, "ours": mine, "reference": ref})[:1500])
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
