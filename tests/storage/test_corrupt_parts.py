"""Damaged and foreign files under a results root: readers leave them out with a warning naming
them, their units count as not stored, other runs are unaffected, the write path moves damaged
parts to ``_quarantine/``, and a storage outage is never taken for damage."""

from __future__ import annotations

import io
import logging
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rayeval.storage import ResultStore
from rayeval.storage.store import QUARANTINE_FOLDER, _file_error

from .helpers import make_rows

MODELS = ["a", "b/c"]
RUN, OTHER = "r", "other run"
KINDS = ["truncated", "garbage", "empty", "incompatible", "not-ours", "foreign", "undecodable-folder"]
FOREIGN = ("foreign", "undecodable-folder")  # no part of rayeval's: left alone, never moved
PROBLEMS = {
    "truncated": "magic bytes not found",
    "garbage": "magic bytes not found",
    "empty": "empty file",
    "incompatible": "column attempt is string, not int64",
    "not-ours": "incompatible schema: no unit_id, eval_id, attempt, status columns",
    "foreign": "not a Parquet part file",
    "undecodable-folder": "folder 'model=%E0%A4' does not decode to text (UTF-8)",
}


def _ids(rows) -> set[str]:
    return {row.unit_id for row in rows}


def _store_runs(store: ResultStore) -> tuple[set[str], set[str]]:
    """Run RUN: two writers, each one part per model (10 rows each); run OTHER: 10 rows."""
    rows = make_rows(RUN, MODELS, 20) + make_rows(RUN, MODELS, 20, start=20)
    store.write_rows(RUN, rows[:20], writer_id="w1")
    store.write_rows(RUN, rows[20:], writer_id="w2")
    store.write_rows(OTHER, make_rows(OTHER, MODELS, 10), writer_id="w1")
    return _ids(rows), _ids(make_rows(OTHER, MODELS, 10))


def _read(store: ResultStore, path: str) -> bytes:
    with store.fs.open_input_stream(path) as stream:
        return stream.read()


def _damage(store: ResultStore, kind: str) -> tuple[list[str], set[str]]:
    """Damage run RUN as ``kind`` says; returns (paths of the bad files, unit_ids lost with them)."""
    if kind == "not-ours":  # a Parquet file of something else, named like a part
        sink = io.BytesIO()
        pq.write_table(pa.table({"x": [1, 2]}), sink)
        path = f"{store.model_path(RUN, 'a')}/part-x.parquet"
        store.put_atomic(path, sink.getvalue())
        return [path], set()
    if kind == "foreign":
        notes, csv = f"{store.run_path(RUN)}/notes.txt", f"{store.model_path(RUN, 'a')}/part-x.csv"
        store.put_atomic(notes, b"my notes")
        store.put_atomic(csv, b"unit_id\nx\n")
        return [notes, csv], set()
    victim = f"{store.model_path(RUN, 'a')}/part-w1-000000.parquet"
    data = _read(store, victim)
    if kind == "undecodable-folder":  # a readable part, in a folder whose name no reader can decode
        path = f"{store.run_path(RUN)}/model=%E0%A4/part-x.parquet"
        store.put_atomic(path, data)
        return [path], set()
    lost = set(pq.read_table(io.BytesIO(data)).column("unit_id").to_pylist())
    if kind == "truncated":
        store.put_atomic(victim, data[: len(data) // 2])
    elif kind == "garbage":
        store.put_atomic(victim, os.urandom(len(data)))
    elif kind == "empty":
        store.put_atomic(victim, b"")
    elif kind == "incompatible":  # the same rows, but attempt written as text
        table = pq.read_table(io.BytesIO(data))
        table = table.set_column(
            table.schema.get_field_index("attempt"), "attempt", table.column("attempt").cast(pa.string())
        )
        sink = io.BytesIO()
        pq.write_table(table, sink)
        store.put_atomic(victim, sink.getvalue())
    else:
        raise AssertionError(kind)
    return [victim], lost


def _shown(store: ResultStore, path: str) -> str:
    return f"s3://{path}" if store.is_s3 else path


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("rayeval")]


def _tree(store: ResultStore) -> dict[str, int]:
    from pyarrow.fs import FileSelector, FileType

    infos = store.fs.get_file_info(FileSelector(store.base, recursive=True, allow_not_found=True))
    return {info.path: info.size for info in infos if info.type == FileType.File}


def _assert_skipped(store: ResultStore, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    everything, other = _store_runs(store)
    bad, lost = _damage(store, kind)
    before = _tree(store)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        table = store.read_table(RUN)
        warned = _warnings(caplog)
    assert table.num_rows == len(everything) - len(lost)
    assert set(table.column("unit_id").to_pylist()) == everything - lost
    for path in bad:  # one warning per bad file, naming it and the problem
        (message,) = [m for m in warned if _shown(store, path) in m]
        assert PROBLEMS[kind] in message, message
    assert len(warned) == len(bad), warned

    # resume's question: the units of a damaged part are not stored, so they run again
    assert store.stored_unit_ids(RUN) == everything - lost
    assert store.stored_unit_id_array(RUN).tolist() == sorted(unit.encode() for unit in everything - lost)
    assert store.stored_keys(RUN) == {(unit, 1) for unit in everything - lost}
    parts = store.parts(RUN, warn=False)
    assert sorted(item.path for item in parts.skipped) == sorted(_shown(store, path) for path in bad)
    assert all(item.part == (kind not in FOREIGN) for item in parts.skipped)
    assert parts.dataset().count_rows() == len(everything) - len(lost)

    # another run is not affected (its folder alone is read), and all runs read what they can
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert set(store.read_table(OTHER).column("unit_id").to_pylist()) == other
        assert store.stored_unit_ids(OTHER) == other
        assert not _warnings(caplog)
    assert store.read_table().num_rows == len(everything) - len(lost) + len(other)
    assert _tree(store) == before, "a reader changed the root"


@pytest.mark.parametrize("kind", KINDS)
def test_readers_skip_a_bad_file_with_a_warning(
    local_store: ResultStore, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    _assert_skipped(local_store, kind, caplog)


@pytest.mark.parametrize("kind", ["truncated", "garbage", "incompatible", "foreign", "undecodable-folder"])
def test_readers_skip_a_bad_file_on_s3(s3_store: ResultStore, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    _assert_skipped(s3_store, kind, caplog)


def _assert_quarantined(store: ResultStore, caplog: pytest.LogCaptureFixture) -> None:
    everything, other = _store_runs(store)
    (victim,), lost = _damage(store, "truncated")
    (not_ours,), _ = _damage(store, "not-ours")
    foreign, _ = _damage(store, "foreign")
    damaged = _read(store, victim)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        store.open_writer(RUN, writer_id="resumed").close()  # the write path: --resume opens one
        warned = _warnings(caplog)
    run_folder = store.run_path(RUN)
    for path in (victim, not_ours):
        moved = f"{run_folder}/{QUARANTINE_FOLDER}/{path[len(run_folder) + 1 :]}"
        assert store.fs.get_file_info(path).type.name == "NotFound"
        assert any(_shown(store, path) in m and "_quarantine" in m for m in warned), warned
        if path == victim:
            assert _read(store, moved) == damaged  # kept, byte for byte, for inspection
    for path in foreign:  # not ours to move: left where it is
        assert store.fs.get_file_info(path).type.name == "File"
    assert store.stored_unit_ids(RUN) == everything - lost
    assert store.read_table(OTHER).num_rows == len(other)
    # the lost units stored again: each unit once among the readable parts
    store.write_rows(RUN, [r for r in make_rows(RUN, MODELS, 40) if r.unit_id in lost], writer_id="rerun")
    ids = store.read_table(RUN, columns=["unit_id"]).column("unit_id").to_pylist()
    assert sorted(ids) == sorted(everything)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        store.read_table(RUN)
        assert not any(_shown(store, path) in m for m in _warnings(caplog) for path in (victim, not_ours))


def test_the_write_path_moves_damaged_parts_to_quarantine(
    local_store: ResultStore, caplog: pytest.LogCaptureFixture
) -> None:
    _assert_quarantined(local_store, caplog)
    # pyarrow/pandas discovery skips _quarantine too (the foreign files aside, which it cannot read)
    for path in _damage(local_store, "foreign")[0]:
        os.unlink(path)
    frame = pd.read_parquet(local_store.run_uri(RUN))
    assert len(frame) == 40 and frame["unit_id"].is_unique


def test_the_write_path_moves_damaged_parts_to_quarantine_on_s3(
    s3_store: ResultStore, caplog: pytest.LogCaptureFixture
) -> None:
    _assert_quarantined(s3_store, caplog)


def test_a_part_whose_data_cannot_be_decoded_is_left_out_when_read(
    local_store: ResultStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Its footer is fine (the cheap check passes): the read finds it, and only then are the
    parts read one by one."""
    everything, _ = _store_runs(local_store)
    victim = f"{local_store.model_path(RUN, 'a')}/part-w1-000000.parquet"
    data = bytearray(_read(local_store, victim))
    lost = set(pq.read_table(io.BytesIO(bytes(data))).column("unit_id").to_pylist())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    data[4 : len(data) - footer] = b"\xff" * (len(data) - footer - 4)  # every page, not the footer
    local_store.put_atomic(victim, bytes(data))
    assert not local_store.parts(RUN, warn=False).skipped
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert local_store.stored_unit_ids(RUN) == everything - lost
        (message,) = _warnings(caplog)
    assert victim in message and "unreadable Parquet data" in message
    assert local_store.read_table(RUN, models=["a"]).num_rows == 10


def test_a_storage_outage_is_not_taken_for_damage(s3_bucket, s3_proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parts are listed, then the endpoint goes away while their footers are read: an error
    (as a failed listing is), not every part skipped (a resume would run every unit again)."""
    direct = ResultStore(s3_bucket.uri("res"), s3_endpoint_url=s3_bucket.endpoint_url)
    proxied = ResultStore(s3_bucket.uri("res"), s3_endpoint_url=s3_proxy.endpoint_url)
    everything, _ = _store_runs(direct)
    listed = proxied._list_files(proxied.run_path(RUN))
    assert len([info for info in listed if info.is_file]) == 4
    monkeypatch.setattr(proxied, "_list_files", lambda path: listed)
    s3_proxy.down()
    try:
        with pytest.raises(OSError):
            proxied.stored_unit_ids(RUN)
        with pytest.raises(OSError):
            proxied.quarantine(RUN)
    finally:
        s3_proxy.up()
    assert direct.stored_unit_ids(RUN) == everything
    assert not [p for p in _tree(direct) if QUARANTINE_FOLDER in p]


def test_errors_of_the_storage_are_told_from_errors_of_a_file() -> None:
    assert _file_error(pa.ArrowInvalid("Parquet magic bytes not found in footer"))
    assert _file_error(OSError("Couldn't deserialize thrift: Deserializing page header failed."))
    assert _file_error(FileNotFoundError(2, "gone"))
    assert not _file_error(PermissionError(13, "Permission denied"))
    assert not _file_error(OSError("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 7"))
    assert not _file_error(KeyError("unit_id"))
    assert not _file_error(MemoryError())
