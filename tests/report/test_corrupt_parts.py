"""One damaged or foreign file never breaks a report: the reader leaves it out with a warning
naming it (a ``rayeval: warning:`` line on stderr for the CLI), reports the readable rows, and
never modifies the root; another run's report does not even see it."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rayeval.report import ResultsReader, read_units
from rayeval.report.cli import main

from .helpers import base_row, write_root


def _root(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """Run A: 4 units, clean. Run B: 3 units in a readable part, plus one of each kind of bad
    file (units of the damaged parts are lost)."""
    rows = [base_row(run_id="A", eval_id=f"e{i}", seed=i) for i in range(4)]
    rows += [base_row(run_id="B", eval_id=f"e{i}", seed=i) for i in range(3)]
    root = write_root(tmp_path / "results", rows)
    folder = root / "run_id=B" / "model=m"
    good = (folder / "part-test-0.parquet").read_bytes()
    lost = [
        {k: v for k, v in base_row(run_id="B", eval_id=f"x{i}", seed=i).items() if k not in ("run_id", "model")}
        for i in range(2)
    ]
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(lost), sink)
    whole = sink.getvalue().to_pybytes()
    bad = {
        "truncated": folder / "part-cut.parquet",
        "garbage": folder / "part-garbage.parquet",
        "empty": folder / "part.parquet",
        "incompatible": folder / "part-schema.parquet",
        "foreign": root / "run_id=B" / "notes.txt",
        "csv": folder / "part-x.csv",
    }
    bad["truncated"].write_bytes(whole[: len(whole) // 2])
    bad["garbage"].write_bytes(bytes(reversed(good)))
    bad["empty"].write_bytes(b"")
    pq.write_table(pa.Table.from_pylist(lost).set_column(0, "unit_id", pa.array([1, 2])), bad["incompatible"])
    bad["foreign"].write_text("my notes")
    bad["csv"].write_text("unit_id\nx\n")
    return root, bad


PROBLEMS = {
    "truncated": "magic bytes not found",
    "garbage": "magic bytes not found",
    "empty": "empty file",
    "incompatible": "column unit_id is int64, not string",
    "foreign": "not a Parquet part file",
    "csv": "not a Parquet part file",
}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_the_reader_skips_bad_files_with_warnings_and_reads_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root, bad = _root(tmp_path)
    before = _tree(root)
    reader = ResultsReader(root)
    with caplog.at_level(logging.WARNING):
        units = reader.units()
    assert sorted(units.groupby("run_id", observed=True).size().items()) == [("A", 4), ("B", 3)]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == len(bad), warned
    for kind, path in bad.items():
        (message,) = [m for m in warned if str(path) in m]
        assert PROBLEMS[kind] in message, message
    assert {item.path: item.problem for item in reader.skipped}.keys() == {str(path) for path in bad.values()}
    assert _tree(root) == before, "the report modified the root"


def test_another_runs_report_is_not_affected(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, _ = _root(tmp_path)
    with caplog.at_level(logging.WARNING):
        units = read_units(root, runs="A")
    assert len(units) == 4 and set(units["run_id"]) == {"A"}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_run_with_no_readable_part_reports_nothing_found(tmp_path: Path) -> None:
    root, bad = _root(tmp_path)
    (root / "run_id=B" / "model=m" / "part-test-0.parquet").unlink()
    reader = ResultsReader(root)
    assert reader.units(runs="B").empty
    assert len(reader.skipped) == len(bad)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_report_of_all_runs_warns_and_reports_the_readable_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, bad = _root(tmp_path)
    before = _tree(root)
    code, out, err = _cli(capsys, "report", str(root), "--by", "run", "--format", "csv")
    assert code == 0, err
    assert "run_id" in out and "\nA," in out and "\nB," in out
    lines = [line for line in err.splitlines() if line.startswith("rayeval: warning: skipping ")]
    assert len(lines) == len(bad), err
    for kind, path in bad.items():
        (line,) = [line for line in lines if str(path) in line]
        assert PROBLEMS[kind] in line
    assert "Traceback" not in err
    assert _tree(root) == before

    code, out, err = _cli(capsys, "report", str(root), "--run", "A", "--format", "csv")
    assert code == 0 and "warning" not in err, err


def test_report_subprocess_of_a_root_with_a_corrupt_part(tmp_path: Path) -> None:
    """As a user runs it: exit 0, the table on stdout, one warning line per bad file on stderr."""
    root, bad = _root(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "rayeval.report.cli", "report", str(root)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Accuracy (%)" in done.stdout and "7 units done" in done.stdout
    assert done.stderr.count("rayeval: warning: skipping ") == len(bad), done.stderr
    assert str(bad["truncated"]) in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "rayeval.report.cli", "report", str(root), "--run", "A"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "4 units done" in done.stdout and not done.stderr.strip(), done.stderr


def test_report_on_s3_skips_a_corrupt_part(tmp_path: Path, s3_bucket, capsys: pytest.CaptureFixture[str]) -> None:
    root, bad = _root(tmp_path)
    for path in root.rglob("*"):
        if path.is_file():
            s3_bucket.put(f"results/{path.relative_to(root).as_posix()}", path.read_bytes())
    uri = s3_bucket.uri("results")
    code, out, err = _cli(
        capsys, "report", uri, "--s3-endpoint", s3_bucket.endpoint_url, "--by", "run", "--format", "csv"
    )
    assert code == 0, err
    assert "\nA," in out and "\nB," in out
    assert err.count("rayeval: warning: skipping ") == len(bad), err
    assert f"{uri}/run_id=B/model=m/part-cut.parquet: unreadable Parquet file" in err
    units = read_units(uri, s3_endpoint_url=s3_bucket.endpoint_url)
    assert sorted(units.groupby("run_id", observed=True).size().items()) == [("A", 4), ("B", 3)]


@pytest.mark.parametrize(
    "text",
    [
        "{broken",
        "\xff\xfe not UTF-8",
        '{"run_id": "B", "total_units": null}',  # JSON, but not the fields a report reads
        '{"run_id": "B", "total_units": "5"}',
        '{"run_id": "B", "status": {"state": "done"}}',
        '{"run_id": "B", "status": "exploded"}',
    ],
)
def test_a_damaged_manifest_of_one_run_never_breaks_the_report_of_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """Run B's manifest is damaged: a report of every run (and of the latest one) warns naming
    it, reports B's rows without its plan, and A's with its own status and planned units."""
    rows = [base_row(run_id="A", eval_id=f"e{i}", seed=i) for i in range(4)]
    rows += [base_row(run_id="B", eval_id=f"e{i}", seed=i) for i in range(3)]
    root = write_root(tmp_path / "results", rows)
    (root / "run_id=A" / "_manifest.json").write_text('{"run_id": "A", "status": "completed", "total_units": 5}')
    damaged = root / "run_id=B" / "_manifest.json"
    damaged.write_bytes(text.encode("latin-1"))
    before = _tree(root)

    code, out, err = _cli(capsys, "report", str(root), "--by", "run", "--format", "csv")
    assert code == 0, err
    assert "\nA," in out and "\nB," in out
    (line,) = [line for line in err.splitlines() if line.startswith("rayeval: warning: ")]
    assert f"skipping {damaged}: unusable _manifest.json" in line and "run 'B' is reported without" in line
    assert "Traceback" not in err

    code, out, err = _cli(capsys, "report", str(root), "--run", "A")
    assert code == 0 and "warning" not in err, err
    assert out.splitlines()[0] == "status: completed; 4/5 units done (80.0%), 0 errors"

    code, out, err = _cli(capsys, "report", str(root), "--run", "latest")  # every manifest is read
    assert code == 0 and "3 units done" in out and "unusable _manifest.json" in err, err
    assert _tree(root) == before


def test_parts_disagreeing_on_an_extra_columns_type_leave_out_the_later_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run B's part has a column beyond rayeval's (``batch_id``) of another type than run A's:
    the report of every run leaves B's part out, naming it, instead of failing for all."""
    rows = [base_row(run_id="A", eval_id=f"e{i}", seed=i) for i in range(4)]
    rows += [base_row(run_id="B", eval_id=f"e{i}", seed=i) for i in range(3)]
    root = write_root(tmp_path / "results", rows)
    for run, values in (("A", pa.array(["b1"] * 4)), ("B", pa.array([7] * 3))):
        part = root / f"run_id={run}" / "model=m" / "part-test-0.parquet"
        pq.write_table(pq.read_table(part).append_column("batch_id", values), part)
    code, out, err = _cli(capsys, "report", str(root), "--by", "run", "--format", "csv")
    assert code == 0, err
    assert "\nA," in out and "\nB," not in out
    (line,) = [line for line in err.splitlines() if line.startswith("rayeval: warning: ")]
    assert "run_id=B/model=m/part-test-0.parquet: incompatible schema: column batch_id is int64" in line
    assert "where other parts have string" in line
    code, out, err = _cli(capsys, "report", str(root), "--run", "B", "--format", "csv")  # alone, B reads
    assert code == 0 and "warning" not in err, err
