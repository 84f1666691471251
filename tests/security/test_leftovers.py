"""Units share nothing: whatever a unit leaves behind (files and their names, folders, FIFOs,
sockets, links, extended attributes, ACLs, timestamps, keys, IPC objects) no later unit sees,
of the same eval, of another eval, or of a later run. One hostile agent leaves every kind of
mark wherever it can write, as seed 1; every later unit reports every mark it sees (see
tests/security/leftover_agents.py). Without the sandbox, a folder the units share carries
every kind of mark: the control that shows the later units would see them."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security import test_attacks
from tests.security.leftover_agents import MARK, MARK_NS, invalidate_marked_keys
from tests.security.test_attacks import attack, rayeval_run

site = test_attacks.site  # the embedded Ray and the evals under attack, for this module too
AGENT = "tests.security.leftover_agents:leftovers"


@pytest.fixture(autouse=True)
def no_key_outlives_the_test() -> Iterator[None]:
    """A key a unit linked into this user's keyrings would outlive the test (later units see
    it, which fails the test): it is removed."""
    yield
    invalidate_marked_keys()


def _evals(site: dict[str, Any], folder: Path) -> Path:
    """``attack_alpha`` without inputs (the work folders of its units are left empty) and
    ``attack_beta`` with one."""
    body = json.loads(site["eval_file"].read_text())
    (folder / "data").mkdir(parents=True)
    shutil.copy(site["evals"] / "data" / "input.txt", folder / "data" / "input.txt")
    (folder / "alpha.json").write_text(json.dumps({key: value for key, value in body.items() if key != "data_node"}))
    (folder / "beta.json").write_text(json.dumps({**body, "id": "attack_beta"}))
    return folder


@pytest.mark.slow
def test_nothing_a_unit_leaves_reaches_a_later_unit(site: dict[str, Any], tmp_path: Path) -> None:
    evals = _evals(site, tmp_path / "evals")
    options = ["--seeds", "2", "--max-concurrency", "1", "--agent-arg", "leave=1", "--agent-arg", "walk=1"]
    first = {
        (row["eval_id"], row["seed"]): row
        for row in rayeval_run(site, tmp_path / "first", AGENT, *options, evals=str(evals))
    }
    (later,) = rayeval_run(site, tmp_path / "later", AGENT, "--agent-arg", "walk=1", evals=str(evals / "beta.json"))

    for eval_id in ("attack_alpha", "attack_beta"):  # it left what it could, where it could
        left = attack(first[eval_id, 1])["left"]
        assert left["work folder"] == {"xattr": "ok", "default_acl": "ok", "times": "ok"}, left
        for place in ("/tmp", "/tmp/home", "/dev/shm"):
            assert {kind for kind, outcome in left[place].items() if outcome != "ok"} == {"char_device", "block_device"}
        devices = [outcome for marks in left.values() for kind, outcome in marks.items() if "device" in kind]
        assert "ok" not in devices
        keys = {kind: outcome for kind, outcome in left["kernel"].items() if kind.startswith("key")}
        assert set(keys.values()) == {"Operation not permitted"}, keys  # the kernel's keyrings are out of reach
    assert attack(first["attack_beta", 1])["left"]["input input.txt"]["xattr"] != "ok"  # its input is read-only

    leaver = first["attack_alpha", 1]
    assert all(row["started_at"] >= leaver["finished_at"] for row in first.values() if row is not leaver)  # in turn
    for looker in (first["attack_alpha", 2], first["attack_beta", 2], later):
        report = attack(looker)
        seen = {where: marks[:3] + [f"... {len(marks)} marks"] for where, marks in report["seen"].items()}
        assert report["folders"] >= 4 and not seen, f"{looker['eval_id']} seed {looker['seed']} saw {json.dumps(seen)}"


def test_without_the_sandbox_a_shared_folder_carries_every_mark(site: dict[str, Any], tmp_path: Path) -> None:
    """``--isolation process``: units share the worker's folders (a folder standing in for /tmp
    here: marks are left only where the test names), and every kind of mark is seen."""
    evals, shared = _evals(site, tmp_path / "evals"), tmp_path / "shared"
    shared.mkdir()
    options = ["--isolation", "process", "--seeds", "2", "--max-concurrency", "1", "--agent-arg", "leave=1"]
    stored = rayeval_run(
        site, tmp_path / "p", AGENT, *options, "--agent-arg", f"places={shared}", evals=str(evals / "alpha.json")
    )
    looker = next(row for row in stored if row["seed"] == 2)
    seen = set(attack(looker)["seen"][os.path.realpath(shared)])
    names = {f"name {MARK}{suffix}" for suffix in (".txt", ".d", ".fifo", ".sock", ".hard", ".link")}
    on_folder = {f"xattr user.{MARK}", "xattr system.posix_acl_default", f"mtime {MARK_NS}"}
    on_file = {f"{MARK}.txt: xattr user.{MARK}", f"{MARK}.txt: mtime {MARK_NS}", f"{MARK}.txt: atime {MARK_NS}"}
    assert names | on_folder | on_file <= seen, seen


@pytest.mark.slow
def test_a_unit_cannot_reach_the_terminal_of_a_unit_beside_it(site: dict[str, Any], tmp_path: Path) -> None:
    """Two units at once: the second writes into every terminal it can open but its own, the
    first waits for input on its own. Without the sandbox the second types into the first's."""
    evals = _evals(site, tmp_path / "evals")
    agent = "tests.security.leftover_agents:terminals"
    for isolation in ("sandbox", "process"):
        options = ["--isolation", isolation, "--seeds", "2", "--max-concurrency", "2"]
        waiting, typing = sorted(
            rayeval_run(site, tmp_path / isolation, agent, *options, evals=str(evals / "alpha.json")),
            key=lambda row: row["seed"],
        )
        assert typing["started_at"] < waiting["finished_at"] and waiting["started_at"] < typing["finished_at"]
        received, written = attack(waiting)["received"], attack(typing)["written"]
        if isolation == "sandbox":
            assert received == "" and written == [], (attack(waiting), attack(typing))
        else:  # the control
            assert "typed by another unit" in received, (attack(waiting), attack(typing))
