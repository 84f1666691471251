"""Agents that play a program and its tool: the "program" (a Python process started from the
interpreter's path, or a shell started from ``$EXEC_ONLY_SHELL``, which its sandbox may show
execute-only) starts a "tool" that tries to read the program's environment and to open its
stdout, the event pipe its agent reads."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

#: the tool: what it could open of its parent (the program) and, as a control, of a process
#: it started itself
TOOL = """
import json, os, subprocess
def opens(path, flags):
    try:
        os.close(os.open(path, flags))
        return True
    except OSError:
        return False
program = os.getppid()
child = subprocess.Popen(["sleep", "5"])
found = {
    "environ": opens(f"/proc/{program}/environ", os.O_RDONLY),
    "pipe": opens(f"/proc/{program}/fd/1", os.O_WRONLY),
    "control": opens(f"/proc/{child.pid}/environ", os.O_RDONLY),
}
child.kill()
print(json.dumps(found))
"""
#: the program: runs the tool, its output captured, and prints what the tool found
PROGRAM = f"""
import subprocess, sys
print(subprocess.run([sys.executable, "-c", {TOOL!r}], capture_output=True, text=True).stdout, end="")
"""


def program_and_tool(task_prompt: str, work_dir: Path) -> dict:
    ran = subprocess.run([sys.executable, "-c", PROGRAM], check=False, capture_output=True, text=True, timeout=60)
    return {"answer": json.loads(ran.stdout), "metadata": {"stderr": ran.stderr[-2000:]}}


def shell_and_tool(task_prompt: str, work_dir: Path) -> dict:
    """The program is a shell (``$EXEC_ONLY_SHELL``) that runs the tool as its child."""
    script = f"{shlex.quote(sys.executable)} -c {shlex.quote(TOOL)}; true"  # not the last command: a child
    ran = subprocess.run(
        [os.environ["EXEC_ONLY_SHELL"], "-c", script], check=False, capture_output=True, text=True, timeout=60
    )
    return {"answer": json.loads(ran.stdout), "metadata": {"stderr": ran.stderr[-2000:]}}
