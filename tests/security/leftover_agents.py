"""A hostile agent that leaves marks for later units, and the same agent looking for them.

``leftovers``, with ``--agent-arg leave=<seeds>``: a unit whose seed is listed leaves every
kind of mark it can wherever it may write; any other unit reports every mark it sees. Marks
are recognised by what they carry, never by where they are: names starting with
``rayeval-mark``, extended attributes named so, POSIX ACLs (a folder made for a unit has none),
timestamps set to ``MARK_NS``, keys named so in the kernel's keyrings, and System V and POSIX
IPC objects under ``IPC_KEY``/``MQUEUE``.

Where it leaves them: its work folder (attributes only, then left empty: an empty folder is
the one a runner could be tempted to hand to the next unit), its HOME and TMPDIR, ``/tmp``,
``/dev/shm``, ``/dev``, every folder named by ``--agent-arg places=`` (``:``-separated) and,
with ``--agent-arg walk=1``, every folder of the file system it may write in (found by
walking it; only where nothing it writes can reach the host, that is in a sandbox), its
inputs (read-only: the attempt is reported), its keyrings and IPC namespace.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import select
import shutil
import socket
import stat
import time
from pathlib import Path
from typing import Any

MARK = "rayeval-mark"
MARK_NS = 1_000_000_000_123_456_789  # 2001-09-09 01:46:40.123456789, as atime and mtime
IPC_KEY = 0x52415945  # "RAYE"
MQUEUE = b"/rayeval-mark"
_ACL_XATTRS = ("system.posix_acl_access", "system.posix_acl_default")
_SKIPPED = ("/proc", "/sys")  # the unit's own processes, and the kernel's objects
_MOST_FOLDERS = 500

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_SYS_ADD_KEY, _SYS_KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
_KEYCTL_SETPERM, _KEYCTL_LINK, _KEYCTL_SEARCH, _KEYCTL_INVALIDATE = 5, 8, 10, 21
_KEYRINGS = {"thread": -1, "process": -2, "session": -3, "user": -4, "user_session": -5}


def leftovers(task_prompt: str, work_dir: Path, context: Any) -> dict:
    leaving = str(context.seed) in context.args.get("leave", "").split(",")
    folders = _folders(work_dir, context.args)
    if leaving:
        report = {"left": _leave(work_dir, folders, context.args)}
    else:
        report = {"seen": _look(work_dir, folders), "folders": len(folders)}
    return _report(**report)


def terminals(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Run beside each other: seed 1 opens a terminal and waits for what reaches it; seed 2
    writes into every terminal but its own it can open, until one takes it. Each for at most
    ``--agent-arg wait_s=`` seconds (8)."""
    wait = float(context.args.get("wait_s", "8"))
    master, own = os.openpty()
    if context.seed == 1:
        ready = select.select([master], [], [], wait)[0]
        received = os.read(master, 1000).decode(errors="replace") if ready else ""
        return _report(terminal=os.ttyname(own), received=received)
    mine = {"ptmx", os.path.basename(os.ttyname(own))}
    written: list[str] = []
    deadline = time.monotonic() + wait
    while not written and time.monotonic() < deadline:
        for name in sorted(set(os.listdir("/dev/pts")) - mine):
            if _try(_write_to, f"/dev/pts/{name}", b"typed by another unit\n") == "ok":
                written.append(name)
        time.sleep(0.05)
    return _report(terminal=os.ttyname(own), written=written)


def _write_to(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _report(**seen: Any) -> dict:
    return {"answer": {"value": -1.0}, "metadata": {"attack": seen}}


# ------------------------------------------------------------------------------ where
def _folders(work_dir: Path, args: dict[str, str]) -> list[str]:
    """The folders to mark or search: the named ones that exist, then those a walk finds."""
    named = [str(work_dir), os.environ.get("HOME", ""), os.environ.get("TMPDIR", "")]
    if args.get("walk") == "1":
        named += ["/tmp", "/dev/shm", "/dev"]
    named += [place for place in args.get("places", "").split(":") if place]
    found = [folder for folder in named if folder and os.path.isdir(folder)]
    if args.get("walk") == "1":
        found += _writable_folders()
    return list(dict.fromkeys(os.path.realpath(folder) for folder in found))[:_MOST_FOLDERS]


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.append(point.encode().decode("unicode_escape"))  # \040 for a space, ...
    return points


def _writable_folders() -> list[str]:
    """Every folder this process may write in, by a walk of the whole file system that skips
    the trees of read-only mounts holding no other mount."""
    points = _mount_points()

    def worth_entering(folder: str) -> bool:
        try:
            if not os.statvfs(folder).f_flag & os.ST_RDONLY:
                return True
        except OSError:
            return False
        inside = folder.rstrip("/") + "/"
        return any(point.startswith(inside) for point in points)

    found = []
    for folder, dirs, _ in os.walk("/"):
        if os.access(folder, os.W_OK):
            found.append(folder)
            if len(found) >= _MOST_FOLDERS:
                break
        dirs[:] = [name for name in dirs if _entered(os.path.join(folder, name), worth_entering)]
    return found


def _entered(path: str, worth_entering: Any) -> bool:
    return not any(path == skipped or path.startswith(skipped + "/") for skipped in _SKIPPED) and worth_entering(path)


# ------------------------------------------------------------------------------ leaving
def _leave(work_dir: Path, folders: list[str], args: dict[str, str]) -> dict[str, dict[str, str]]:
    """Every mark in every folder: what came of each attempt ("ok" or the error's name)."""
    left: dict[str, dict[str, str]] = {}
    inside_work = str(work_dir) + "/"
    for folder in folders:
        if folder == str(work_dir) or folder.startswith(inside_work):
            continue  # marked below, and emptied
        left[folder] = _leave_in(folder)
    for staged in _inputs(work_dir):
        left[f"input {staged.name}"] = {
            "xattr": _try(os.setxattr, staged, f"user.{MARK}", b"1"),
            "times": _stamp(staged),
        }
    _empty(work_dir)
    left["work folder"] = _mark_folder(str(work_dir))
    if args.get("walk") == "1":  # the kernel's objects: never where they would outlive a test
        left["kernel"] = {**_leave_keys(), **_leave_ipc()}
    return left


def _leave_in(folder: str) -> dict[str, str]:
    base = os.path.join(folder, MARK)
    outcomes = {"file": _try(Path(base + ".txt").write_text, "left by an earlier unit")}
    outcomes["file_xattr"] = _try(os.setxattr, base + ".txt", f"user.{MARK}", b"1")
    outcomes["folder"] = _try(os.mkdir, base + ".d")
    outcomes["fifo"] = _try(os.mkfifo, base + ".fifo")
    outcomes["socket"] = _try(_bind_socket, folder, MARK + ".sock")
    outcomes["char_device"] = _try(os.mknod, base + ".chr", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    outcomes["block_device"] = _try(os.mknod, base + ".blk", 0o666 | stat.S_IFBLK, os.makedev(7, 0))
    outcomes["hard_link"] = _try(os.link, base + ".txt", base + ".hard")
    outcomes["symlink"] = _try(os.symlink, MARK + ".txt", base + ".link")
    outcomes["file_times"] = _stamp(base + ".txt")
    return {**outcomes, **_mark_folder(folder)}


def _mark_folder(folder: str) -> dict[str, str]:
    """What stays on a folder when its content is gone: attributes, an ACL, its times."""
    return {
        "xattr": _try(os.setxattr, folder, f"user.{MARK}", b"1"),
        "default_acl": _try(os.setxattr, folder, "system.posix_acl_default", _acl(os.getuid())),
        "times": _stamp(folder),  # last: what is made in it changes them
    }


def _acl(uid: int) -> bytes:
    """A POSIX ACL as the kernel stores it: the owner, one named user (this one), the group,
    a mask and the others (version 2, then tag, permissions, id per entry)."""
    entries = [
        (0x01, 7, 0xFFFFFFFF),
        (0x02, 7, uid),
        (0x04, 5, 0xFFFFFFFF),
        (0x10, 7, 0xFFFFFFFF),
        (0x20, 5, 0xFFFFFFFF),
    ]
    return (2).to_bytes(4, "little") + b"".join(
        tag.to_bytes(2, "little") + perm.to_bytes(2, "little") + uid_.to_bytes(4, "little")
        for tag, perm, uid_ in entries
    )


def _bind_socket(folder: str, name: str) -> None:
    """A socket file (bound by a relative name: a long path does not fit in an address)."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).bind(name)
    finally:
        os.chdir(here)


def _stamp(path: str | Path) -> str:
    return _try(os.utime, path, ns=(MARK_NS, MARK_NS), follow_symlinks=False)


def _empty(work_dir: Path) -> None:
    """Nothing left in the work folder (its log included), so that only its attributes remain."""
    for entry in work_dir.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            _try(entry.unlink)


def _leave_keys() -> dict[str, str]:
    """A key in each of its keyrings, and linked into every other keyring it can see (those of
    the worker's user, which outlive the unit), readable by its user."""
    outcomes, added = {}, {}
    for name, ring in _KEYRINGS.items():
        description = f"{MARK}-{name}".encode()
        added[name] = _libc.syscall(_SYS_ADD_KEY, b"user", description, b"left", 4, ctypes.c_int(ring))
        outcomes[f"key_{name}"] = _errno_of(added[name])
    key = added["process"]  # its own: it may change its permissions and link it
    if key >= 0:
        _libc.syscall(_SYS_KEYCTL, _KEYCTL_SETPERM, ctypes.c_int(key), ctypes.c_uint(0x3F3F3F3F))
        for serial, description in _keys("keyring"):
            linked = _libc.syscall(_SYS_KEYCTL, _KEYCTL_LINK, ctypes.c_int(key), ctypes.c_int(serial))
            outcomes[f"link into {description}"] = _errno_of(linked)
    return outcomes


def _keys(kind: str | None = None) -> list[tuple[int, str]]:
    """(id, description) of the keys /proc/keys shows (of ``kind``: "user", "keyring")."""
    try:
        lines = Path("/proc/keys").read_text().splitlines()
    except OSError:
        return []
    fields = [line.split(None, 9) for line in lines]
    return [(int(f[0], 16), f[8].rstrip(":")) for f in fields if len(f) > 8 and kind in (None, f[7])]


def _leave_ipc() -> dict[str, str]:
    ipc_create = 0o1000 | 0o600
    outcomes = {
        "sysv_shm": _errno_of(_libc.shmget(IPC_KEY, 4096, ipc_create)),
        "sysv_msg": _errno_of(_libc.msgget(IPC_KEY, ipc_create)),
        "sysv_sem": _errno_of(_libc.semget(IPC_KEY, 1, ipc_create)),
    }
    outcomes["posix_mqueue"] = _errno_of(_mq_open(os.O_CREAT | os.O_RDWR))
    return outcomes


def invalidate_marked_keys() -> None:
    """For the test, afterwards: the marked keys this process can see (linked into its user's
    keyrings by a unit the sandbox failed to stop) invalidated."""
    for serial, description in _keys():
        if MARK in description:
            _libc.syscall(_SYS_KEYCTL, _KEYCTL_INVALIDATE, ctypes.c_int(serial))


# ------------------------------------------------------------------------------ looking
def _look(work_dir: Path, folders: list[str]) -> dict[str, list[str]]:
    """Every mark in sight: by folder (what its listing and its entries carry), and in the kernel."""
    seen: dict[str, list[str]] = {}
    for folder in folders:
        marks = _marks_on(folder)
        try:
            names = os.listdir(folder)
        except OSError:
            names = []
        for name in names:
            path = os.path.join(folder, name)
            marks += [f"name {name}"] if name.startswith(MARK) else []
            marks += [f"{name}: {mark}" for mark in _marks_on(path)]
        if marks:
            seen[folder] = marks
    for staged in _inputs(work_dir):
        marks = _marks_on(str(staged))
        if marks:
            seen[f"input {staged.name}"] = marks
    kernel = _kernel_marks()
    if kernel:
        seen["kernel"] = kernel
    return seen


def _marks_on(path: str) -> list[str]:
    marks = []
    try:
        info = os.lstat(path)
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return []
    marks += [f"xattr {name}" for name in names if MARK in name or name in _ACL_XATTRS]
    marks += [
        f"{kind} {value}"
        for kind, value in (("atime", info.st_atime_ns), ("mtime", info.st_mtime_ns))
        if value == MARK_NS
    ]
    return marks


def _kernel_marks() -> list[str]:
    marks = [f"key {description}" for _, description in _keys() if MARK in description]
    for name, ring in _KEYRINGS.items():
        if _libc.syscall(_SYS_KEYCTL, _KEYCTL_SEARCH, ctypes.c_int(ring), b"user", f"{MARK}-{name}".encode(), 0) >= 0:
            marks.append(f"key {MARK}-{name} found")
    for kind, found in (
        ("sysv_shm", _libc.shmget(IPC_KEY, 0, 0)),
        ("sysv_msg", _libc.msgget(IPC_KEY, 0)),
        ("sysv_sem", _libc.semget(IPC_KEY, 0, 0)),
        ("posix_mqueue", _mq_open(os.O_RDONLY)),
    ):
        if found >= 0:
            marks.append(kind)
    return marks


# ------------------------------------------------------------------------------ helpers
def _inputs(work_dir: Path) -> list[Path]:
    data = work_dir / "data"
    return sorted(data.iterdir()) if data.is_dir() else []


def _mq_open(flags: int) -> int:
    rt = ctypes.CDLL(ctypes.util.find_library("rt") or None, use_errno=True)
    return rt.mq_open(MQUEUE, flags, 0o600, None) if flags & os.O_CREAT else rt.mq_open(MQUEUE, flags)


def _errno_of(result: int) -> str:
    return "ok" if result >= 0 else os.strerror(ctypes.get_errno())


def _try(call: Any, *args: Any, **kwargs: Any) -> str:
    try:
        call(*args, **kwargs)
    except OSError as exc:
        return type(exc).__name__ + (f" ({exc.strerror})" if exc.strerror else "")
    return "ok"
