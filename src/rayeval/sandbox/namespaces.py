"""The Linux calls a unit's sandbox is built from: namespaces, mounts, capabilities, limits.

Thin ``ctypes`` wrappers, standard library only: this module is imported by the unit runner,
a process that must stay small and hold nothing but its own unit.  Every wrapper raises
``OSError`` naming the call and its argument.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import resource
import signal
import socket
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

# open_tree(2) and move_mount(2): the same numbers on every architecture since Linux 5.2.
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_OPEN_TREE_CLONE = 0x1
_OPEN_TREE_CLOEXEC = 0o2000000
_AT_RECURSIVE = 0x8000
_AT_FDCWD = -100
_MOVE_MOUNT_F_EMPTY_PATH = 0x4

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_CAP_LAST = 63
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# seccomp(2) filters: classic BPF over the call's number (offset 0) and architecture (offset 4)
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_BPF_LOAD_WORD, _BPF_JUMP_IF_EQUAL, _BPF_RETURN = 0x20, 0x15, 0x06
_X32 = 0x40000000  # x86_64's x32 calls: its own numbers with this bit
#: The keyring calls (add_key, request_key, keyctl) by audit architecture: the machine's own
#: and the 32-bit one it also runs.
_KEYRING_CALLS_BY_MACHINE: dict[str, dict[int, tuple[int, ...]]] = {
    "x86_64": {0xC000003E: (248, 249, 250, _X32 | 248, _X32 | 249, _X32 | 250), 0x40000003: (286, 287, 288)},
    "aarch64": {0xC00000B7: (217, 218, 219), 0x40000028: (309, 310, 311)},
}
_KEYRING_CALLS = _KEYRING_CALLS_BY_MACHINE.get(platform.machine(), {})

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1

# the C library as this process has it loaded (finding it by name would run ``ldconfig -p``
# in every process that imports this module)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(result: int, call: str, target: str = "") -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{call}({target}): {os.strerror(code)}")
    return result


# clone(2) numbers (the calls Python does not offer); the arguments are in the same order on both
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(platform.machine())
_pylibc = ctypes.PyDLL(None, use_errno=True)  # keeps the GIL
_pylibc.syscall.restype = ctypes.c_long


def clone(flags: int) -> int:
    """``fork()`` into new namespaces (``flags``): 0 in the child, its pid in the parent.

    As ``os.fork`` does, around the system call: the interpreter's fork hooks, so the child
    is a consistent single-threaded copy (callers must be single-threaded)."""
    if not flags:
        return os.fork()
    if _SYS_CLONE is None:
        raise OSError(errno.ENOSYS, f"clone: unsupported architecture {platform.machine()}")
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = _pylibc.syscall(_SYS_CLONE, ctypes.c_ulong(flags | signal.SIGCHLD), None, None, None, None)
    code = ctypes.get_errno()
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(code, f"clone({hex(flags)}): {os.strerror(code)}")
    return pid


def map_user(inner_uid: int, inner_gid: int, outer_uid: int, outer_gid: int) -> None:
    """In a new user namespace: this process is ``inner_uid`` inside, ``outer_uid``
    outside (the only mapping an unprivileged process may write for itself)."""
    with open("/proc/self/setgroups", "w") as fh:
        fh.write("deny")
    with open("/proc/self/uid_map", "w") as fh:
        fh.write(f"{inner_uid} {outer_uid} 1")
    with open("/proc/self/gid_map", "w") as fh:
        fh.write(f"{inner_gid} {outer_gid} 1")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def raw(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    result = _libc.mount(raw(source), raw(target), raw(fstype), ctypes.c_ulong(flags), raw(data))
    _check(result, "mount", f"{fstype or source} on {target}")


def clone_tree(path: str) -> int:
    """A detached copy of the mount tree at ``path`` (a file descriptor), to attach elsewhere
    with :func:`attach_tree` once ``path`` itself is hidden."""
    flags = _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE
    return _check(_libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, os.fsencode(path), flags), "open_tree", path)


def attach_tree(tree_fd: int, target: str) -> None:
    result = _libc.syscall(_SYS_MOVE_MOUNT, tree_fd, b"", _AT_FDCWD, os.fsencode(target), _MOVE_MOUNT_F_EMPTY_PATH)
    _check(result, "move_mount", target)
    os.close(tree_fd)


def remount_read_only(target: str) -> None:
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def set_parent_death_signal(signum: int) -> None:
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0), "prctl", "PR_SET_PDEATHSIG")


def forbid_dumping() -> None:
    """No other process of the same user reads this one's memory, environment or open files
    (``/proc/<pid>/mem``, ``environ``, ``fd``), nor traces it: the programs it runs (their
    exec makes them dumpable again) and their tools cannot reach what it holds."""
    _check(_libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl", "PR_SET_DUMPABLE")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges() -> None:
    """No capability left in any set, none to be gained again (``no_new_privs``)."""
    for cap in range(_CAP_LAST + 1):
        result = _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
        if result < 0 and ctypes.get_errno() != errno.EINVAL:  # EINVAL: beyond this kernel's last
            _check(result, "prctl", f"PR_CAPBSET_DROP {cap}")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl", "PR_SET_NO_NEW_PRIVS")
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    _check(_libc.capset(ctypes.byref(header), (_CapData * 2)()), "capset", "none")


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def forbid_keyrings() -> None:
    """The kernel's keyrings, which no namespace separates, out of reach: ``add_key``,
    ``keyctl`` and ``request_key`` fail with EPERM (as under Docker's default profile), in this
    process and all it starts. A key is owned by a user id, and every unit runs as the
    worker's: a unit could otherwise read and write the worker user's keyrings, and link a key
    into one of them for every later unit to read. Needs ``no_new_privs`` (``drop_privileges``)."""
    program = [(_BPF_LOAD_WORD, 0, 0, 4)]
    for arch, numbers in _KEYRING_CALLS.items():
        denied = [(_BPF_LOAD_WORD, 0, 0, 0)]
        for number in numbers:  # equal: on to the next instruction, the refusal; else past it
            denied += [(_BPF_JUMP_IF_EQUAL, 0, 1, number), (_BPF_RETURN, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM)]
        denied.append((_BPF_RETURN, 0, 0, _SECCOMP_RET_ALLOW))
        program += [(_BPF_JUMP_IF_EQUAL, 0, len(denied), arch), *denied]  # another architecture: past it
    program.append((_BPF_RETURN, 0, 0, _SECCOMP_RET_ALLOW))
    instructions = (_SockFilter * len(program))(*(_SockFilter(*instruction) for instruction in program))
    fprog = _SockFprog(len(program), instructions)
    _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "prctl", "PR_SET_SECCOMP")


def bring_loopback_up() -> None:
    """A new network namespace starts with ``lo`` down: local servers of the agent need it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def set_limit(which: int, value: int | None) -> None:
    """Soft and hard limit ``value`` (None: leave it), never above the current hard limit."""
    if value is None:
        return
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))
