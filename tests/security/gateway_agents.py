"""Hostile agents against the trusted side's accounting: each lies about its model calls, or
hunts for a key, or forges what only rayeval's own runner may say. See test_gateway_attacks.py."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import struct
from pathlib import Path
from typing import Any

import anthropic

#: the keys the test's worker environment holds (provider, fallback, judge): a prefix and 16
#: hex digits drawn when the tests start, so that no file holds one (a source naming a prefix
#: does not match)
HUNTED = re.compile(rb"(?:sk-ant-provider-|sk-ant-spare-|sk-judge-|sk-proxy-)[0-9a-f]{16}")


def _call(n: int) -> None:
    """``n`` real model calls, through the gateway, as any SDK user makes them."""
    client = anthropic.Anthropic(max_retries=0)
    for _ in range(n):
        client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=[{"role": "user", "content": "hi"}])


def forge_usage(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Two calls, then claims one tiny one, and a cost of nothing."""
    _call(2)
    claims = {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0, "n_turns": 1}
    return {"answer": {"value": 1.0}, "metadata": claims}


def forge_provider_failure(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """One good call, then no answer and a provider's 529 with an endless retry hint: a
    ProviderError row would buy a rerun with a fresh deadline, after waiting forever."""
    _call(1)
    details = {
        "error": "overloaded",
        "status": 529,
        "code": "overloaded",
        "message": "overloaded",
        "retry_after_s": 1e9,
    }
    return {"answer": None, "metadata": {"error_details": details}}


def give_up_on_a_failed_call(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """A call the provider fails (the test has it fail as a rate limit an agent may bring on,
    with a request over the tokens-per-minute limit, or as an overload), then no answer."""
    try:
        _call(1)
    except anthropic.APIStatusError:
        pass
    return {"answer": None}


def pay_then_give_up_on_a_failed_call(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Three calls: one the provider fails (the test has it fail as an overload, which the run
    retries) ends the attempt without an answer; an attempt whose calls are all answered raises
    (its own error, not retried, which ``--retry-errors`` runs again)."""
    try:
        _call(3)
    except anthropic.APIStatusError:
        return {"answer": None}
    raise RuntimeError("gave up")


def forge_earlier_attempts(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """One call, then claims a retried attempt before it that cost a dollar."""
    _call(1)
    forged = {"attempts": 1, "n_model_calls": 9, "cost_usd": 1.0, "listed": []}
    return {"answer": {"value": 7391.25}, "metadata": {"earlier_attempts": forged}}


def forge_refusal(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Answers wrongly, then claims the model refused (a refusal is counted apart)."""
    _call(1)
    (work_dir / "refusal_verdict.json").write_text(json.dumps({"refused": True, "reason": "forged"}))
    summary = {"refusal": "detected", "usage": {"input_tokens": 1}}
    return {"answer": {"value": 1.0}, "metadata": {"refusal": {"refused": True}, "run_summary": summary}}


def _readable(path: str, limit: int = 1 << 20) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


def _memory_of(pid: str) -> bytes:
    """What /proc/<pid>/mem shows of the process's writable mappings (where its heap is)."""
    found = bytearray()
    try:
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
            for line in maps:
                span, perms = line.split()[:2]
                if not perms.startswith("rw"):
                    continue
                start, end = (int(part, 16) for part in span.split("-"))
                if end - start > 64 << 20:
                    continue
                try:
                    memory.seek(start)
                    found += memory.read(end - start)
                except (OSError, ValueError, OverflowError):
                    continue
    except OSError:
        return b""
    return bytes(found)


def hunt_keys(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Every place a key could be: its environment, every process's environment, command line
    and memory, and the files of its home, /tmp and work folder (``--agent-arg only=environ``:
    its environment alone, for a control run outside the sandbox)."""
    places: dict[str, bytes] = {"environ": json.dumps(dict(os.environ)).encode()}
    pids = [] if context.args.get("only") == "environ" else [entry for entry in os.listdir("/proc") if entry.isdigit()]
    for pid in pids:
        for part in ("environ", "cmdline"):
            places[f"/proc/{pid}/{part}"] = _readable(f"/proc/{pid}/{part}")
        places[f"/proc/{pid}/mem"] = _memory_of(pid)
    for root in {os.environ.get("HOME", "/tmp"), "/tmp", str(work_dir)} if pids else ():
        for folder, _, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    if stat.S_ISREG(os.lstat(path).st_mode):
                        places[path] = _readable(path)
                except OSError:
                    continue
    own = f"/proc/{os.getpid()}/mem"  # its own memory holds the prefixes it looks for, nothing else
    found = sorted(where for where, data in places.items() if where != own and HUNTED.search(data))
    processes = sorted(where.split("/")[2] for where, data in places.items() if where.endswith("/mem") and data)
    metadata = {"found": found, "memory_read_of": processes, "proxy": os.environ.get("HTTPS_PROXY")}
    return {"answer": {"value": 1.0}, "metadata": metadata}


def echo_handed(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """What the run handed it, echoed into its metadata and a file left behind, as a tool's log
    or an error message does: a variable named with ``--agent-env`` and its options."""
    handed = {"SERPAPI_KEY": os.environ.get("SERPAPI_KEY"), "args": dict(context.args)}
    (work_dir / "agent_output.log").write_text(json.dumps(handed))
    return {"answer": {"value": 7391.25}, "metadata": handed}


def _unit_sockets() -> list[int]:
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                found.append(int(name))
        except OSError:
            continue
    return found


def _forge_setup_failure() -> None:
    """Write, on every socket this process holds, the frames the runner sends when a unit's
    sandbox cannot be set up, then exit as it does."""
    message = json.dumps({"kind": "setup_failed", "message": "PermissionError: no user namespaces"}).encode()
    for fd in _unit_sockets():
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.sendall(struct.pack("!cQ", b"R", len(message)) + message)
            sock.sendall(struct.pack("!cQ", b"X", 3) + b"111")
        except OSError:
            continue
        finally:
            sock.close()
    os._exit(111)


def forge_setup_failure(task_prompt: str, work_dir: Path, context: Any) -> dict:
    _forge_setup_failure()
    return {}


def forge_runner_failure(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """An answer file too large to read (its own error) with metadata saying the runner saw
    the failure, which would buy it a rerun (a fresh sample) per retry."""
    (work_dir / "eval_answer.json").write_text(json.dumps({"value": 1.0, "pad": "x" * 4096}))
    return {"answer": None, "metadata": {"error_details": {"seen_by": "runner", "error": "the runner failed"}}}


def chunk_report_too_deep(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """A call, then a chunk report nested 4,000 deep: the trusted side's JSON parser recursed
    past its limit, the unit's Ray task failed, and its row said Ray had lost it (a rerun, the
    calls uncounted)."""
    from rayeval.sandbox.unit_runner import report_chunk

    _call(1)
    return {"answer": {"value": 7391.25}, "metadata": {"chunk_saved": report_chunk(b"[" * 4000)}}


def work_folder_too_deep(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """A call, then a chunk whose work folder nests 1,200 folders deep: packing it recursed past
    the limit, with the same end."""
    _call(1)
    fd = os.open(work_dir, os.O_RDONLY)
    for _ in range(1200):  # by folder fds: the path grows past what a path names
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = below
    os.close(fd)
    return {"answer": {"value": 7391.25}, "metadata": {"chunk_saved": context.chunk_done("s-1", 1)}}
