"""Real-agent harnesses: run an actual agent program on an eval.

Each factory returns an agent function ``agent(task_prompt, work_dir) -> {"answer", "metadata"}``
that runs the program as a subprocess in ``work_dir`` (prompt in, JSON events streamed to
``work_dir/agent_output.log`` and ``work_dir/trajectory.json``), then reads
``work_dir/eval_answer.json``.  The returned objects are small picklable dataclasses, so they can
be built on a driver and shipped to Ray workers.

>>> from rayeval.agents import claude_code, codex, mini_swe_agent
>>> agent = claude_code("claude-sonnet-4-5", timeout=1800)          # doctest: +SKIP
>>> agent = codex("gpt-5.1-codex", base_url="http://gateway:8000/v1")  # doctest: +SKIP
>>> agent = mini_swe_agent("openai/gpt-5-mini", step_limit=50)       # doctest: +SKIP

API keys are read from the environment and passed to the program only through its
environment; everything returned or left in the work folder is redacted
(:mod:`rayeval.secrets`).  Install the Node-based CLIs with
``python scripts/install_agent_clis.py``.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from ._base import AgentConfigError, ProgramAgent
    from ._tools import NPM_PINS, AgentNotInstalledError
    from .claude_code import ClaudeCodeAgent, claude_code
    from .codex import CodexAgent, codex
    from .mini_swe import MiniSweAgent, mini_swe_agent

__getattr__, __all__ = lazy_exports(__name__)
