"""The ``replay`` agent: answers from a recorded trials file, as the recorded run did.

A unit (eval_id, model, seed) maps to the row with that ``eval_id``, that ``model`` (or
``model@harness`` to pick one harness) and ``trial == seed``. The row's harness, cost, duration,
tokens and turns become the unit's, so reports show the recorded run.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import RayevalError
from ..unit.answers import answer_envelope
from ..unit.context import MIB, AgentContext, UnitResources
from ..unit.run_summary import refusal_status, run_summary

RowKey = tuple[str, str, int]


class ReplayError(RayevalError, LookupError):
    """No recorded row for the unit, or an unreadable trials file."""


@lru_cache(maxsize=8)
def load_trials(path: str) -> dict[RowKey, list[dict[str, Any]]]:
    """Rows by (eval_id, model, trial), read once per process per file."""
    index: dict[RowKey, list[dict[str, Any]]] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplayError(f"cannot read trials file {path}: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key = (str(row["eval_id"]), str(row["model"]), int(row["trial"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ReplayError(f"{path}: line {number}: not a trial row ({exc})") from None
        index.setdefault(key, []).append(row)
    return index


def find_trial(path: str, eval_id: str, model: str | None, seed: int | None) -> dict[str, Any]:
    if not model or seed is None:
        raise ReplayError("the replay agent needs a model and a seed for every unit")
    name, _, harness = model.partition("@")
    rows = load_trials(str(Path(path).resolve())).get((eval_id, name, seed), [])
    if harness:
        rows = [r for r in rows if r.get("harness") == harness]
    if not rows:
        raise ReplayError(f"no recorded trial for eval {eval_id!r}, model {model!r}, trial {seed} in {path}")
    if len(rows) > 1:
        harnesses = sorted({str(r.get("harness")) for r in rows})
        raise ReplayError(
            f"several recorded trials for eval {eval_id!r}, model {model!r}, trial {seed}: name one harness as model@harness ({', '.join(harnesses)})"
        )
    return rows[0]


@lru_cache(maxsize=256)  # asked for every unit's row: the trials are scanned once per model
def recorded_harness(path: str | None, model: str) -> str | None:
    """The one harness recorded for ``model`` in the trials file (None: several, none, or no
    readable file): a unit named ``model`` without ``@harness`` replays that harness."""
    if not path:
        return None
    try:
        trials = load_trials(str(Path(path).resolve()))
    except ReplayError:
        return None
    harnesses = {str(row.get("harness")) for (_, name, _), rows in trials.items() if name == model for row in rows}
    return harnesses.pop() if len(harnesses) == 1 else None


def replay_agent(task_prompt: str, work_dir: Path, context: AgentContext) -> dict:
    """``--agent-arg trials=PATH`` (a JSONL file of recorded trials)."""
    path = context.args.get("trials")
    if not path:
        raise ReplayError("the replay agent needs --agent-arg trials=PATH")
    row = find_trial(path, context.eval_id, context.model, context.seed)
    metadata = {
        "replayed": True,
        "harness": row.get("harness"),
        "provider": row.get("provider"),
        "model": row.get("model"),
        "cost_usd": row.get("cost_usd"),
        "duration_s": row.get("duration_s"),
        "input_tokens": row.get("input_tokens"),
        "output_tokens": row.get("output_tokens"),
        "n_turns": row.get("n_turns"),
        "timed_out": row.get("timed_out"),
        "recorded_passed": row.get("recorded_passed"),
    }
    refusal = row.get("refusal")
    metadata["run_summary"] = run_summary(
        duration_s=row.get("duration_s"),
        n_turns=row.get("n_turns"),
        usage={"input_tokens": row.get("input_tokens"), "output_tokens": row.get("output_tokens")},
        cost_usd=row.get("cost_usd"),
        cost_source="recorded",
        refusal=refusal_status(isinstance(refusal, bool), refusal is True),
    )
    return answer_envelope(row.get("answer"), metadata, work_dir)


def check_args(args: dict[str, str]) -> None:
    """Run where the units run, before any: the trials file is readable there (a sandbox has a
    private /tmp and hides the results root and the evals folders), by an absolute path (each
    unit runs in a work folder of its own)."""
    path = args.get("trials")
    if path and not Path(path).is_absolute():
        raise ReplayError(f"--agent-arg trials={path}: give an absolute path (each unit runs in its own work folder)")
    if path:
        load_trials(path)


replay_agent.check_args = check_args  # type: ignore[attr-defined]
replay_agent.needs_data = False  # type: ignore[attr-defined]
# it reads a recorded answer: a hundredth of a CPU, and a sandboxed Python's memory
replay_agent.resources = UnitResources(cpus=0.01, memory=64 * MIB)  # type: ignore[attr-defined]
replay_agent.replays_recorded_runs = True  # type: ignore[attr-defined]
