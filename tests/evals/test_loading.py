"""Eval files: valid ones load unchanged, broken ones give every problem with file and field."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from rayeval import Eval, EvalFileError, load_eval, load_evals
from rayeval.evals import check_evals

GOOD_GRADER = {"type": "multiple_choice", "config": {"correct_answer": "B"}}


def write(path: Path, content: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content))
    return path


def good_eval(**overrides: object) -> dict:
    data = {"id": "e1", "task": 'Pick one. <EVAL_ANSWER>{"answer": "A|B"}</EVAL_ANSWER>', "grader": GOOD_GRADER}
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not ...}


def problems_for(path: Path) -> list[tuple[str, str, str]]:
    _, problems = check_evals(path)
    return [(p.path, p.field, p.message) for p in problems]


def test_valid_eval_keeps_unknown_keys_and_exposes_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "e1.json", good_eval(canary="GUID-123", data_node=["a.h5ad", "b.h5ad"], timeout="30"))
    for name in ("a.h5ad", "b.h5ad"):
        write(tmp_path / name, b"data")
    (eval_,) = load_evals(path)
    assert isinstance(eval_, Eval)
    assert eval_.model_extra == {"canary": "GUID-123"}
    assert eval_.data_nodes == ["a.h5ad", "b.h5ad"]
    assert eval_.timeout == 30
    assert eval_.source_path == path
    assert eval_.grader_specs[0].config == {"correct_answer": "B"}


def test_folder_loading_is_recursive_sorted_and_skips_manifest(tmp_path: Path) -> None:
    write(tmp_path / "b" / "two.json", good_eval(id="two"))
    write(tmp_path / "a" / "one.json", good_eval(id="one"))
    write(tmp_path / "manifest.json", {"not": "an eval"})
    write(tmp_path / "notes.txt", "ignored")
    assert [e.id for e in load_evals(tmp_path)] == ["one", "two"]


def test_graders_list_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path / "e.json", good_eval(grader=..., graders=[GOOD_GRADER, {"type": "finished_file"}]))
    (eval_,) = load_evals(path)
    assert [s.type for s in eval_.grader_specs] == ["multiple_choice", "finished_file"]
    assert eval_.grader_specs[1].config == {}


@pytest.mark.parametrize(
    "overrides, field, fragment",
    [
        ({"grader": ..., "graders": ...}, "grader", "one of 'grader' or 'graders' is required"),
        ({"graders": [GOOD_GRADER]}, "grader", "mutually exclusive"),
        ({"grader": ..., "graders": []}, "graders", "non-empty"),
        ({"grader": {"type": "no_such_grader", "config": {}}}, "grader.type", "unknown grader type 'no_such_grader'"),
        ({"grader": {"type": "", "config": {}}}, "grader.type", "non-empty"),
        ({"grader": {"config": {}}}, "grader.type", "missing"),
        ({"grader": {"type": "multiple_choice", "config": None}}, "grader.config", "dict"),
        ({"grader": {"type": "multiple_choice", "config": [1]}}, "grader.config", "dict"),
        ({"grader": ..., "graders": [GOOD_GRADER, {"type": "nope"}]}, "graders[1].type", "unknown grader type"),
        ({"grader": ..., "graders": ["x"]}, "graders[0]", ""),
        ({"grader": {"type": "multiple_choice", "config": {}}}, "grader.config", "configuration error"),
        (
            {"grader": {"type": "rubric", "config": {"answer_field": "a", "criteria": [{"description": "x"}]}}},
            "grader.config",
            "rubric configuration error: criteria[0].score_delta: Field required",
        ),
        ({"timeout": 0}, "timeout", "positive"),
        ({"agent_timeout": -5}, "agent_timeout", "positive"),
        ({"download_timeout": "soon"}, "download_timeout", "positive"),
        ({"timeout": True}, "timeout", "positive"),
        ({"timeout": 1e300}, "timeout", "at most 2,592,000 seconds"),  # overflowed the waits of every unit
        ({"agent_timeout": 2_592_001}, "agent_timeout", "at most 2,592,000 seconds"),
        ({"id": "../escape"}, "id", "'/'"),
        ({"id": "a\\b"}, "id", "'/'"),
        ({"id": ".."}, "id", "'..'"),
        ({"id": "bad\nid"}, "id", "control"),
        ({"id": ""}, "id", "non-empty"),
        ({"id": 7}, "id", "string"),
        ({"id": ...}, "id", "missing"),
        ({"task": ...}, "task", "missing"),
        ({"data_node": [1, "x"]}, "data_node", ""),
        ({"metadata": "qc"}, "metadata", "dict"),
    ],
)
def test_each_bad_field_is_named(tmp_path: Path, overrides: dict, field: str, fragment: str) -> None:
    path = write(tmp_path / "bad.json", good_eval(**overrides))
    found = problems_for(path)
    assert found, "expected a problem"
    assert all(p == str(path) for p, _, _ in found)
    assert any(f.startswith(field) and fragment in m for _, f, m in found), found
    with pytest.raises(EvalFileError) as info:
        load_evals(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b"\xff\xfe\x00{", "UTF-8"),
        (b'{"id": "x", "task": ', "invalid JSON at line 1"),
        (b"[1, 2]", "must be a JSON object, got list"),
        (b'"just a string"', "got str"),
        (b"[" * 100000 + b"]" * 100000, "JSON"),
    ],
)
def test_broken_files_are_clean_errors(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = write(tmp_path / "broken.json", content)
    found = problems_for(path)
    assert len(found) == 1 and found[0][0] == str(path) and fragment in found[0][2], found


def test_unreadable_file(tmp_path: Path) -> None:
    """Reading /proc/self/mem fails with an I/O error even for root, unlike a chmod 0 file."""
    path = tmp_path / "unreadable.json"
    path.symlink_to("/proc/self/mem")
    (problem,) = problems_for(tmp_path)
    assert problem[0] == str(path) and problem[2].startswith("cannot read file:"), problem


def test_unreadable_path_and_missing_path(tmp_path: Path) -> None:
    fake = tmp_path / "dir.json"
    fake.mkdir()
    (fake / "inner.json").write_text(json.dumps(good_eval()))
    # a *.json directory passed explicitly is searched, not read as a file
    assert [e.id for e in load_evals(fake)] == ["e1"]
    missing = tmp_path / "nope.json"
    assert problems_for(missing) == [(str(missing), "", "no such file or folder")]
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    assert "no *.json" in problems_for(empty_dir)[0][2]


def test_every_problem_across_files_is_reported_together(tmp_path: Path) -> None:
    write(tmp_path / "a.json", good_eval(id="../x", timeout=-1))
    write(tmp_path / "b.json", b"{")
    write(tmp_path / "c.json", good_eval(id="ok"))
    write(tmp_path / "d.json", good_eval(id="ok"))
    with pytest.raises(EvalFileError) as info:
        load_evals(tmp_path)
    problems = info.value.problems
    by_file = {Path(p.path).name: p for p in problems}
    assert set(by_file) == {"a.json", "b.json", "d.json"}
    assert {p.field for p in problems if p.path.endswith("a.json")} == {"id", "timeout"}
    assert "duplicate eval id 'ok'" in by_file["d.json"].message


def test_grader_config_dry_check_can_be_turned_off(tmp_path: Path) -> None:
    path = write(tmp_path / "e.json", good_eval(grader={"type": "numeric_tolerance", "config": {}}))
    assert "configuration error" in problems_for(path)[0][2]
    assert [e.id for e in load_evals(path, check_grader_configs=False)] == ["e1"]


# --------------------------------------------------------------------------- data roots


def evals_folder(root: Path, data_node: object) -> Path:
    """``root/evals/sub/e.json`` naming ``data_node``; ``root/evals/data/ok.csv`` exists."""
    write(root / "evals" / "data" / "ok.csv", "a,b\n")
    write(root / "evals" / "sub" / "e.json", good_eval(data_node=data_node))
    return root / "evals"


@pytest.mark.parametrize(
    "node, fragment",
    [
        ("/etc/shadow", "resolves to /etc/shadow, outside the allowed data roots"),
        ("/proc/self/environ", "under /proc"),
        ("file:///etc/passwd", "resolves to /etc/passwd, outside the allowed data roots"),
        ("../../../../../../../../..", "resolves to /, outside the allowed data roots"),
        ("/dev/zero", "under /dev"),
        ("/sys/kernel", "under /sys"),
        ("file://fileserver/share/x.csv", "must name a local path"),
    ],
)
def test_local_data_node_outside_the_evals_root_is_a_problem(tmp_path: Path, node: str, fragment: str) -> None:
    evals = evals_folder(tmp_path, node)
    path = str(evals / "sub" / "e.json")
    ((file, field, message),) = problems_for(evals)
    assert (file, field) == (path, "data_node") and repr(node) in message and fragment in message, message
    if "outside" in fragment:  # names the allowed roots and how to allow more
        assert f"({evals})" in message and "--data-root DIR" in message
    with pytest.raises(EvalFileError, match="data_node"):
        load_evals(evals)


def test_symlink_in_the_evals_folder_pointing_out_is_a_problem(tmp_path: Path) -> None:
    evals = evals_folder(tmp_path, ["../data/ok.csv", "../data/link.csv"])
    write(tmp_path / "secret.txt", "host secret")
    (evals / "data" / "link.csv").symlink_to(tmp_path / "secret.txt")
    ((_, field, message),) = problems_for(evals)
    assert field == "data_node[1]" and f"resolves to {tmp_path / 'secret.txt'}" in message


def test_a_folder_node_is_checked_entry_by_entry(tmp_path: Path) -> None:
    """Staging copies a folder following its links: each entry must be as allowed as the
    folder. A link back up inside it is no problem (and no endless walk)."""
    evals = evals_folder(tmp_path, "../data")
    (evals / "data" / "loop").mkdir()
    (evals / "data" / "loop" / "up").symlink_to("..")
    (evals / "data" / "gone").symlink_to(tmp_path / "nothing-there")  # dangling: never copied
    assert problems_for(evals) == []
    (evals / "data" / "host").symlink_to("/etc")
    ((_, field, message),) = problems_for(evals)
    assert field == "data_node" and "holds host, which resolves to /etc, outside the allowed data roots" in message
    (evals / "data" / "host").unlink()
    (evals / "data" / "deep").mkdir()
    (evals / "data" / "deep" / "environ").symlink_to("/proc/self/environ")
    ((_, field, message),) = problems_for(evals)
    assert "holds deep/environ, which resolves to /proc/" in message and "never staged" in message


@pytest.mark.parametrize("node", [".", "..", "../other/e2.json", "../data"])
def test_a_node_that_is_or_holds_an_eval_file_is_a_problem(tmp_path: Path, node: str) -> None:
    """An eval file's grader config is an answer key: no data node may hand one to an agent,
    its own eval's, or another's given in the same check (even through a link)."""
    evals = evals_folder(tmp_path, node)
    write(evals / "other" / "e2.json", good_eval(id="e2"))
    (evals / "data" / "key.txt").symlink_to(evals / "other" / "e2.json")
    problems = [p for p in problems_for(evals) if p[0].endswith("sub/e.json")]
    ((_, field, message),) = problems
    assert field == "data_node" and "an eval file: its answer key would reach the agent" in message, message


def test_the_evals_root_is_the_folder_given_or_the_files_own_folder(tmp_path: Path) -> None:
    evals = evals_folder(tmp_path, "../data/ok.csv")
    (eval_,) = load_evals(evals)
    assert eval_.data_roots == (evals,)
    ((_, field, message),) = problems_for(evals / "sub" / "e.json")  # root: evals/sub
    assert field == "data_node" and f"outside the allowed data roots ({evals / 'sub'})" in message
    with pytest.raises(EvalFileError, match="--data-root"):
        load_eval(evals / "sub" / "e.json")
    assert load_eval(evals / "sub" / "e.json", data_roots=[evals]).data_roots == (evals / "sub", evals)


def test_an_explicit_data_root_allows_a_folder_outside_the_evals(tmp_path: Path) -> None:
    evals = evals_folder(tmp_path, str(tmp_path / "shared" / "ref.csv"))
    write(tmp_path / "shared" / "ref.csv", "ref")
    assert problems_for(evals)
    (eval_,) = load_evals(evals, data_roots=[tmp_path / "shared"])
    assert eval_.data_roots == (evals, tmp_path / "shared")


def test_system_folders_stay_refused_inside_a_data_root(tmp_path: Path) -> None:
    evals = evals_folder(tmp_path, ["/etc/hostname", "/proc/self/environ"])
    _, problems = check_evals(evals, data_roots=["/"])
    assert [(p.field, "under /proc" in p.message) for p in problems] == [("data_node[1]", True)]


def test_a_missing_local_node_is_a_problem_of_its_file_and_field(tmp_path: Path) -> None:
    """A misspelled data file stops loading (validate, --dry-run, run) with the path looked
    for and the fix, instead of every unit's staging; remote nodes are not fetched here."""
    nodes = ["../data/ok.csv", "../data/not_yet_there.h5ad", "s3://bucket/key.csv", "https://example.org/x.csv"]
    evals = evals_folder(tmp_path, [*nodes, "latch://123.node"])
    ((file, field, message),) = problems_for(evals)
    assert (file, field) == (str(evals / "sub" / "e.json"), "data_node[1]")
    assert message == (
        f"local data node '../data/not_yet_there.h5ad' ({evals / 'data' / 'not_yet_there.h5ad'}) does not exist: "
        f"correct the path; a relative path is relative to the eval file's folder, {evals / 'sub'}"
    )
    (evals / "data" / "not_yet_there.h5ad").write_bytes(b"now there")
    (eval_,) = load_evals(evals)
    assert eval_.data_nodes == [*nodes, "latch://123.node"]


@pytest.mark.parametrize("kind", ["fifo", "dangling link", "dangling link in a folder", "fifo in a folder"])
def test_a_local_node_that_cannot_be_staged_is_found_when_loading(tmp_path: Path, kind: str) -> None:
    """Not a file or folder to copy (a FIFO), or a link to nothing: said at once. In a folder,
    what staging skips (a dangling link, a FIFO) does not count; the folder's files must read."""
    import os

    evals = evals_folder(tmp_path, "../data/node")
    node = evals / "data" / "node"
    if kind == "fifo":
        os.mkfifo(node)
    elif kind == "dangling link":
        node.symlink_to(evals / "data" / "gone")
    else:
        write(node / "kept.csv", "a\n")
        if kind == "fifo in a folder":
            os.mkfifo(node / "pipe")
        else:
            (node / "gone").symlink_to(node / "nothing")
    found = [(field, message.split(") ", 1)[1]) for _, field, message in problems_for(evals)]
    expected = {
        "fifo": [("data_node", ("is neither a regular file nor a folder: correct the path; a relative path is "
                  f"relative to the eval file's folder, {evals / 'sub'}"))],
        "dangling link": [("data_node", ("does not exist: correct the path; a relative path is relative to the "
                           f"eval file's folder, {evals / 'sub'}"))],
    }.get(kind, [])  # fmt: skip
    assert found == expected


def test_data_roots_survive_pickling_and_in_memory_evals_have_none(tmp_path: Path) -> None:
    import cloudpickle

    (eval_,) = load_evals(evals_folder(tmp_path, "../data/ok.csv"))
    assert (
        pickle.loads(pickle.dumps(eval_)).data_roots
        == cloudpickle.loads(cloudpickle.dumps(eval_)).data_roots
        == eval_.data_roots
    )
    assert Eval.model_validate(good_eval(data_node="/etc/passwd")).data_roots == ()


def test_the_data_node_check_can_be_turned_off_for_grading(tmp_path: Path) -> None:
    evals = evals_folder(tmp_path, "/etc/shadow")
    assert load_eval(evals / "sub" / "e.json", check_data_nodes=False).data_nodes == ["/etc/shadow"]
