"""Processes of this machine as /proc shows them, for tests that check what is left running."""

from __future__ import annotations

import os
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may contain spaces
    return text[text.rindex(")") + 2 :].split()


def session_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[3]) if fields else None  # state ppid pgrp session ...


def is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is None or fields[0] == "Z"


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
