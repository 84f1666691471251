"""An agent module whose import forges the runner's frames for a sandbox that could not be set
up (see test_gateway_attacks.py)."""

from pathlib import Path
from typing import Any

from tests.security.gateway_agents import _forge_setup_failure

_forge_setup_failure()


def solve(task_prompt: str, work_dir: Path, context: Any) -> dict:
    return {"answer": {"value": 1.0}}
