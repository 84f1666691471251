"""``rayeval view ROOT --static OUT_DIR``: the viewer as one folder of files, for sharing.

The same page as the server's, reading its data from ``data/`` instead of the API: the run
list, each run's unit index in chunks of :data:`INDEX_CHUNK` units, the units' pages in chunks
of :data:`DETAIL_CHUNK` (fewer when they are large), the leaderboard and its SVG plots. Each
data file is one JSON value wrapped in a ``rayevalData(key, value)`` call, since a page opened
from ``file://`` may load scripts but not fetch files; the JSON is ASCII with ``<>&`` escaped
(:func:`json_text`), and a JSON string cannot end the call, so no agent text becomes code.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._files import write_atomic
from ..filesystem import inside_root
from ..report.reader import ReportError
from .assets import ASSETS, asset_bytes, index_html
from .data import (
    TABLE_COLUMNS,
    NotFound,
    RunIndex,
    ViewData,
    json_rows,
    json_text,
    newest_first,
    unit_detail,
)

INDEX_CHUNK = 5000
DETAIL_CHUNK = 100
DETAIL_CHUNK_CHARS = 8_000_000


def check_out_dir(out_dir: str | Path, results_root: str) -> Path:
    """The output folder, refused when it lies inside the results root (nothing is ever
    written there) or is a non-empty folder that is not an earlier static view."""
    out = Path(out_dir).resolve()
    if inside_root(out, results_root):
        raise ReportError(f"--static {out_dir}: inside the results root {results_root}; choose a folder outside it")
    if out.exists() and not out.is_dir():
        raise ReportError(f"--static {out_dir}: is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / "index.html").is_file():
        raise ReportError(
            f"--static {out_dir}: a non-empty folder that is not a static view; choose an empty or new one"
        )
    return out


def _write_data(folder: Path, key: str, value: Any = None, *, text: str | None = None) -> None:
    """``data/<key>.js``: ``value`` (or its JSON ``text``, made by :func:`json_text`) in a
    ``rayevalData`` call."""
    path = folder / "data" / f"{key}.js"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, f"rayevalData({json_text(key)},{json_text(value) if text is None else text});\n")


def _write_details(data: ViewData, index: RunIndex, folder: Path, run_dir: str) -> dict[str, str]:
    """The units' pages in chunks of at most :data:`DETAIL_CHUNK` units and about
    :data:`DETAIL_CHUNK_CHARS` characters (a unit larger than that alone), each chunk of one
    model (its partition is read once); each unit's chunk, by unit id."""
    chunk_of: dict[str, str] = {}
    written = 0
    units = index.units
    for model, group in units.groupby(units["model"].astype("object"), sort=True):
        heavy = data.heavy_rows(index.run_id, str(model), None)
        members: list[str] = []
        size = 0
        for position, (_, light) in enumerate(group.iterrows(), 1):
            unit_id = str(light["unit_id"])
            row = heavy.get(unit_id, {})
            detail = json_text(unit_detail(light.to_dict(), row, data.task(index, str(light["eval_id"]), row)))
            members.append(f"{json_text(unit_id)}:{detail}")
            chunk_of[unit_id] = str(written)
            size += len(detail)
            if len(members) >= DETAIL_CHUNK or size >= DETAIL_CHUNK_CHARS or position == len(group):
                _write_data(folder, f"{run_dir}/units-{written}", text="{" + ",".join(members) + "}")
                members, size, written = [], 0, written + 1
    return chunk_of


def _write_run(data: ViewData, index: RunIndex, folder: Path, run_dir: str) -> dict[str, Any]:
    chunk_of = _write_details(data, index, folder, run_dir)
    units = index.units.assign(detail_chunk=index.units["unit_id"].astype("object").map(chunk_of))
    columns = [*TABLE_COLUMNS, "detail_chunk"]
    chunks = 0
    for start in range(0, len(units), INDEX_CHUNK):
        part = units.iloc[start : start + INDEX_CHUNK][columns]
        _write_data(folder, f"{run_dir}/index-{chunks}", {"columns": columns, "rows": json_rows(part)})
        chunks += 1
    board = data.leaderboard(index.run_id)
    _write_data(folder, f"{run_dir}/leaderboard", board)
    for name in board["plots"]:
        try:
            (folder / "data" / run_dir / f"plot-{name}.svg").write_bytes(data.plot(index.run_id, name))
        except NotFound:
            continue
    return {
        **index.summary(),
        "dir": run_dir,
        "chunks": chunks,
        "facets": index.facets(),
    }


def write_static(data: ViewData, out_dir: str | Path, progress: Callable[[str], None] | None = None) -> Path:
    """Write the static viewer of ``data``'s runs into ``out_dir`` (see the module's doc): made
    in a folder beside it, which takes its place once whole. A build that fails leaves nothing
    (an earlier view stays as it was), so the same command can be run again."""
    out = check_out_dir(out_dir, data.reader.root)
    out.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        os.chmod(building, 0o755)  # shared as a folder of pages, not kept private as mkdtemp makes it
        _write_view(data, building, progress)
        _put_in_place(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return out


def _put_in_place(built: Path, out: Path) -> None:
    """``built`` becomes ``out``; an earlier view there is removed once it is replaced."""
    earlier = None
    if out.is_dir() and any(out.iterdir()):
        earlier = out.with_name(f".{out.name}.replaced-{secrets.token_hex(4)}")
        os.rename(out, earlier)
    elif out.is_dir():
        out.rmdir()
    os.rename(built, out)
    if earlier is not None:
        shutil.rmtree(earlier, ignore_errors=True)


def _write_view(data: ViewData, out: Path, progress: Callable[[str], None] | None) -> None:
    (out / "assets").mkdir(parents=True, exist_ok=True)
    for name in ASSETS:
        (out / "assets" / name).write_bytes(asset_bytes(name))
    runs = []
    for number, run_id in enumerate(data.run_ids()):
        if progress is not None:
            progress(f"run {run_id}")
        runs.append(_write_run(data, data.run(run_id), out, f"r{number}"))
    _write_data(out, "runs", {"root": data.reader.root, "runs": newest_first(runs)})
    (out / "index.html").write_bytes(index_html(static=True))


__all__ = ["DETAIL_CHUNK", "DETAIL_CHUNK_CHARS", "INDEX_CHUNK", "check_out_dir", "write_static"]
