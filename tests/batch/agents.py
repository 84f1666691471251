"""Agents used by the batch tests; importable by Ray workers as ``tests.batch.agents:NAME``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def _log_invocation(context) -> None:
    """A side channel to the test: only ``process`` or ``inline`` units that are passed the
    variable (``--agent-env``) can write it; a sandboxed unit sees neither."""
    log = os.environ.get("RAYEVAL_TEST_INVOCATION_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"eval_id": context.eval_id, "model": context.model, "seed": context.seed}) + "\n")


def misbehaving(task_prompt: str, work_dir: Path, context) -> object:
    """Behaviour chosen by the eval id: raise, hang, garbage, or a right answer."""
    _log_invocation(context)
    if "raise" in context.eval_id:
        raise RuntimeError("agent exploded")
    if "hang" in context.eval_id:
        time.sleep(600)
    if "garbage" in context.eval_id:
        return "no tags, no json, nothing useful"
    return {"answer": "B"}


def counting_sleep(task_prompt: str, work_dir: Path, context) -> dict:
    """Records every invocation, sleeps ``seconds``, answers B."""
    _log_invocation(context)
    time.sleep(float(context.args.get("seconds", "0.5")))
    return {"answer": "B"}


def instant(task_prompt: str, work_dir: Path) -> dict:
    return {"answer": "B"}


def flaky(task_prompt: str, work_dir: Path, context) -> dict:
    """Raises while the file its ``flag`` option names exists (the model endpoint is down), else answers B."""
    if Path(context.args["flag"]).exists():
        raise RuntimeError("the model endpoint is down")
    return {"answer": "B"}


def broken(task_prompt: str, work_dir: Path) -> dict:
    raise RuntimeError("no model behind this agent")


def _staged_data(work_dir: Path) -> dict:
    data = os.path.join(work_dir, "data")
    return {"answer": json.dumps(sorted(os.listdir(data)) if os.path.isdir(data) else None)}


def reads_data(task_prompt: str, work_dir: Path) -> dict:
    """Answers with the names of the data files its unit was given (None: no data folder)."""
    return _staged_data(work_dir)


def reads_nothing(task_prompt: str, work_dir: Path) -> dict:
    """As ``reads_data``, declaring that it reads no data."""
    return _staged_data(work_dir)


reads_nothing.needs_data = False  # type: ignore[attr-defined]


def timed_sleep(task_prompt: str, work_dir: Path, context) -> dict:
    """Sleeps ``seconds`` and records when it started and ended (one JSON line per unit) in the
    file its ``log`` option names (an option, not a variable: it reaches a Ray started earlier)."""
    start = time.time()
    time.sleep(float(context.args.get("seconds", "0.03")))
    log = context.args.get("log")
    if log:
        with open(log, "a") as handle:
            handle.write(
                json.dumps({"eval_id": context.eval_id, "seed": context.seed, "start": start, "end": time.time()})
                + "\n"
            )
    return {"answer": "B"}


def bulky(task_prompt: str, work_dir: Path, context) -> dict:
    """Answers B with ``kib`` KiB of random, incompressible padding (rows that fill a disk),
    after sleeping ``seconds``."""
    _log_invocation(context)
    time.sleep(float(context.args.get("seconds", "0")))
    return {"answer": "B", "padding": os.urandom(int(context.args.get("kib", "64")) * 512).hex()}


def rationale_writer(task_prompt: str, work_dir: Path, context) -> dict:
    """Answers with a ``rationale`` (for rubric graders), logging when it started (monotonic clock)
    in the file its ``log`` option names, as ``timed_sleep`` does; with ``--agent-arg cost=USD``
    it reports that cost."""
    log = context.args.get("log")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"seed": context.seed, "start": time.monotonic()}) + "\n")
    answer = {"rationale": f"hERG is required (unit {context.seed})"}
    if "cost" in context.args:  # what the agent reports its own model calls cost
        return {"answer": answer, "metadata": {"cost_usd": float(context.args["cost"])}}
    return answer


def unstorable(task_prompt: str, work_dir: Path, context) -> object:
    """By the eval id, a result no row can hold (meant to run inline, where nothing checks it on
    the way), or a right answer."""
    if "surrogate" in context.eval_id:
        return {"answer": "B", "metadata": {"note": "\ud800"}}
    if "huge" in context.eval_id:
        return {"answer": {"n": 10**5000}}
    if "deep" in context.eval_id:
        deep: object = "B"
        for _ in range(100_000):
            deep = [deep]
        return {"answer": deep}
    if "raise" in context.eval_id:
        raise RuntimeError("exploded \udcff")
    return {"answer": "B"}


def picky(task_prompt: str, work_dir: Path, context) -> dict:
    """Answers B; its ``mode`` option must be strict or lenient (checked by ``check_args``)."""
    return {"answer": "B"}


def _picky_args(args: dict) -> None:
    if args.get("mode") not in ("strict", "lenient"):
        raise ValueError(f"picky: --agent-arg mode must be strict or lenient, got {args.get('mode')!r}")


picky.check_args = _picky_args  # type: ignore[attr-defined]


def rationale_after_a_call(task_prompt: str, work_dir: Path, context) -> dict:
    """One model call (through its unit's gateway), then a ``rationale`` (for rubric graders)."""
    import anthropic

    anthropic.Anthropic(max_retries=0).messages.create(
        model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
    )
    return {"rationale": "hERG is required"}
