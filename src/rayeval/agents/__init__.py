"""Real-agent harnesses: ``claude_code``, ``codex``, ``mini_swe_agent`` and ``pi`` each return an agent
that runs the program as a subprocess in the unit's work folder (events streamed to
``agent_output.log`` and ``trajectory.json``), then reads ``eval_answer.json``. Keys reach the
program only through its environment; what it returns or leaves is redacted
(:mod:`rayeval.secrets`). ``python scripts/install_agent_clis.py`` installs the Node-based CLIs.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from ._base import AgentConfigError, Chunk, ChunkFailed, ProgramAgent
    from ._refusal import RefusalVerdict, detect_refusal
    from ._tools import AgentNotInstalledError
    from .claude_code import ClaudeCodeAgent, claude_code
    from .codex import CodexAgent, codex
    from .mini_swe import MiniSweAgent, mini_swe_agent
    from .pi import PiAgent, pi

__getattr__, __all__ = lazy_exports(__name__)
