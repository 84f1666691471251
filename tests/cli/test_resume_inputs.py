"""``rayeval run --resume`` with other inputs than the run started with: refused with what
changed (exit 2), unless ``--force``, which goes on with the new inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rayeval.cli import main
from tests.batch.conftest import write_mc_evals

pytestmark = pytest.mark.usefixtures("shared_ray")  # a Ray start per run would be most of their time


def _run(evals: Path, out: Path, *options: str) -> list[str]:
    return [
        "run",
        str(evals),
        "--agent",
        "tests.batch.agents:instant",
        "--isolation",
        "inline",
        "--output",
        str(out),
        "--run-id",
        "r",
        "--no-progress",
        "--models",
        "m1",
        *options,
    ]


def test_resume_with_changed_inputs_is_refused_with_a_diff_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    evals, out = write_mc_evals(tmp_path / "evals", ["e1", "e2"]), tmp_path / "out"
    assert (
        main(
            _run(
                evals,
                out,
                "--seeds",
                "2",
                "--agent-arg",
                "temperature=0.2",
                "--agent-arg",
                "api_key=sk-first",
            )
        )
        == 0
    )
    first = pd.read_parquet(out / "run_id=r")
    assert len(first) == 4
    capsys.readouterr()
    (evals / "e2.json").write_text((evals / "e2.json").read_text().replace("A or B?", "A or B, really?"))
    changed = _run(
        evals,
        out,
        "--seeds",
        "3",
        "--agent-arg",
        "temperature=0.7",
        "--agent-arg",
        "api_key=sk-second",
        "--resume",
    )

    assert main(changed) == 2
    err = capsys.readouterr().err
    assert "was planned with other inputs (before → after):\n" in err
    for line in (
        "  agent_args.api_key: changed (a secret: its values are not shown)",
        '  agent_args.temperature: "0.2" → "0.7"',
        "  seeds: 1, 2 → 1..3",
        "  evals changed since: e2",
    ):
        assert line + "\n" in err
    assert "--force" in err and "sk-" not in err and "Traceback" not in err
    assert len(pd.read_parquet(out / "run_id=r")) == 4  # nothing ran

    assert main([*changed, "--force"]) == 0
    assert "--resume --force: run r goes on with new inputs" in caplog.text and "sk-" not in caplog.text
    rows = pd.read_parquet(out / "run_id=r")
    # the rows stored stay; units with new ids ran: e1's seed 3 and all of the edited e2
    assert len(rows) == 4 + 1 + 3 and set(first["unit_id"]) <= set(rows["unit_id"])
    manifest = json.loads((out / "run_id=r" / "_manifest.json").read_text())
    assert manifest["seeds"] == [[1, 3]] and manifest["agent_args"] == {
        "temperature": "0.7",
        "api_key": "***",
    }
    assert manifest["total_units"] == 6 and manifest["status"] == "completed"
    assert "sk-" not in json.dumps(manifest)

    assert main(changed) == 0  # the new inputs are the run's now
    assert "0 run now, 6 already done" in capsys.readouterr().out


def test_resume_with_another_answer_convention_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What agents are told is part of how units run: the manifest records the convention and a
    resume that would tell them other names is refused."""
    evals, out = write_mc_evals(tmp_path / "evals", ["e1"]), tmp_path / "out"
    assert main(_run(evals, out, "--answer-convention", "benchmark")) == 0
    manifest = json.loads((out / "run_id=r" / "_manifest.json").read_text())
    assert manifest["answer_convention"] == "benchmark"
    capsys.readouterr()
    assert main(_run(evals, out, "--resume")) == 2
    assert "  answer_convention: benchmark → legacy\n" in capsys.readouterr().err


def test_resume_with_other_unit_limits_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A unit's limits decide outcomes (an answer file over its cap is the unit's error): the
    manifest records them, and a resume under other limits is refused with each change."""
    evals, out = write_mc_evals(tmp_path / "evals", ["e1"]), tmp_path / "out"
    assert main(_run(evals, out, "--limit-answer-file-mb", "2")) == 0
    manifest = json.loads((out / "run_id=r" / "_manifest.json").read_text())
    assert manifest["limits"]["answer_file_mb"] == 2 and manifest["limits"]["memory_mb"] == 4096
    capsys.readouterr()
    assert main(_run(evals, out, "--resume", "--limit-artifact-mb", "3")) == 2
    err = capsys.readouterr().err
    assert "  limits.answer_file_mb: 2.0 → 10.0\n" in err and "  limits.artifact_mb: 2.0 → 3.0\n" in err
    assert main(_run(evals, out, "--resume", "--limit-answer-file-mb", "2")) == 0


def test_a_new_run_under_a_finished_runs_id_is_refused_without_offering_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing is left to resume of a finished run: the message says it is finished and what
    to do, and offers --resume only for a run that stopped before its end."""
    evals, out = write_mc_evals(tmp_path / "evals", ["e1"]), tmp_path / "out"
    assert main(_run(evals, out)) == 0
    capsys.readouterr()
    assert main(_run(evals, out)) == 2
    err = capsys.readouterr().err
    assert "run 'r' already exists under" in err and "is finished: choose another --run-id" in err
    assert "--resume" not in err and "--retry-errors --run-id r" in err
    manifest = out / "run_id=r" / "_manifest.json"
    manifest.write_text(manifest.read_text().replace('"completed"', '"cancelled"'))  # as a Ctrl-C leaves it
    assert main(_run(evals, out)) == 2
    assert "run 'r' already exists under" in (err := capsys.readouterr().err) and "(cancelled): pass --resume" in err
