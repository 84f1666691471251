"""The ``sleep`` agent: waits, then answers nothing. For benchmarks of the engine itself."""

from __future__ import annotations

import time
from pathlib import Path

from ..unit.context import MIB, AgentContext, UnitResources


def sleep_agent(task_prompt: str, work_dir: Path, context: AgentContext) -> dict:
    """``--agent-arg seconds=S`` (default 1)."""
    seconds = float(context.args.get("seconds", "1"))
    if seconds < 0:
        raise ValueError(f"sleep agent: seconds must be >= 0, got {seconds}")
    if seconds:  # even sleep(0) waits for the system's timer (about 50 µs on Linux)
        time.sleep(seconds)
    return {"answer": None, "metadata": {"harness": "sleep", "slept_s": seconds}}


sleep_agent.needs_data = False  # type: ignore[attr-defined]
# it waits: a hundredth of a CPU, and a sandboxed Python's memory
sleep_agent.resources = UnitResources(cpus=0.01, memory=64 * MIB)  # type: ignore[attr-defined]
