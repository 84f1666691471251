"""forbid_keyrings: every way into the kernel's keyrings fails, through each calling convention
the machine runs (x86_64: its own, x32's numbers, and i386's ``int 0x80`` with numbers of its
own), while other calls go on. Run in a fresh process: a filter stays for a process's life."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

EPERM = 1
_CALLS = r"""
import ctypes, json, mmap, sys
from rayeval.sandbox import namespaces as ns

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
# i386's keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0) through int 0x80: no pointer
# (i386 takes 32 bits), the key's id back in eax
code = bytes.fromhex("53" "b820010000" "31db" "b9fcffffff" "31d2" "cd80" "5b" "c3")
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
i386_keyctl = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))


def call(number, *args):
    result = libc.syscall(number, *args)
    return result if result >= 0 else -ctypes.get_errno()


if sys.argv[1] == "filtered":
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, which a filter needs (the sandbox sets it)
    ns.forbid_keyrings()
user_keyring = ctypes.c_int(-4)
print(json.dumps({
    "keyctl": call(250, 0, user_keyring, 0),
    "add_key": call(248, b"user", b"rayeval-test", b"x", 1, ctypes.c_int(-2)),  # this process's own keyring
    "request_key": call(249, b"user", b"rayeval-absent", None, 0),
    "x32_keyctl": call(0x40000000 | 250, 0, user_keyring, 0),
    "i386_keyctl": i386_keyctl(),
    "getpid": call(39) == ctypes.CDLL(None).getpid(),
}))
"""


def _calls(how: str) -> dict[str, int]:
    path = os.pathsep.join(sys.path)
    env = {**os.environ, "PYTHONPATH": path}
    run = subprocess.run(
        [sys.executable, "-c", _CALLS, how], check=False, capture_output=True, text=True, env=env, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the calling conventions tried are x86_64's")
def test_every_keyring_call_fails_and_other_calls_go_on() -> None:
    plain, filtered = _calls("plain"), _calls("filtered")
    assert plain["keyctl"] > 0 and plain["i386_keyctl"] > 0 and plain["add_key"] > 0  # the control: reachable
    assert plain["request_key"] != -EPERM and plain["x32_keyctl"] != -EPERM
    assert {name: value for name, value in filtered.items() if name != "getpid"} == {
        "keyctl": -EPERM,
        "add_key": -EPERM,
        "request_key": -EPERM,
        "x32_keyctl": -EPERM,
        "i386_keyctl": -EPERM,
    }
    assert filtered["getpid"] is True
