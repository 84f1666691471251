"""Choosing what a run does before it spends: --sample-id, --filter, --limit, --dry-run, and
--retry-errors for the errored units of a finished run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from rayeval._messages import options_as_flags
from rayeval.cli import main
from rayeval.evals import Eval, EvalSelectionError, select_evals
from rayeval.record import UnitRecord
from rayeval.storage import ResultStore
from tests.batch.conftest import write_mc_evals
from tests.report.helpers import base_row


def _evals(*specs: tuple[str, dict]) -> list[Eval]:
    grader = {"type": "multiple_choice", "config": {"correct_answer": "B"}}
    return [
        Eval.model_validate({"id": eval_id, "task": "t", "metadata": meta, "grader": grader}) for eval_id, meta in specs
    ]


def ids(chosen: list[Eval]) -> list[str]:
    return [e.id for e in chosen]


def test_selection_by_id_glob_metadata_and_limit() -> None:
    evals = _evals(
        ("pbmc_a", {"task": "qc"}),
        ("pbmc_b", {"task": "de"}),
        ("spatial_c", {"task": "qc"}),
        ("pbmc_d", {"task": "qc"}),
    )
    assert ids(select_evals(evals, filters=["pbmc_*"])) == ["pbmc_a", "pbmc_b", "pbmc_d"]
    assert ids(select_evals(evals, filters=["pbmc_*", "task=qc"])) == ["pbmc_a", "pbmc_d"]  # all must match
    assert ids(select_evals(evals, sample_ids=["spatial_c", "pbmc_b"])) == ["pbmc_b", "spatial_c"]  # loading order
    assert ids(select_evals(evals, filters=["task=qc"], limit=2)) == ["pbmc_a", "spatial_c"]
    with pytest.raises(EvalSelectionError, match="no eval with id 'nope' among the 4 loaded"):
        select_evals(evals, sample_ids=["nope"])
    with pytest.raises(EvalSelectionError, match=re.escape("filters=['task=qa']: no eval of the 4 loaded is selected")):
        select_evals(evals, filters=["task=qa"])  # a Python caller's keywords; the command line's flags:
    with options_as_flags(), pytest.raises(EvalSelectionError, match="--sample-id pbmc_a, --filter task=qa: no eval"):
        select_evals(evals, sample_ids=["pbmc_a"], filters=["task=qa"])


def test_dry_run_prints_the_plan_and_its_cost_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_mc_evals(tmp_path / "evals", ["e1", "e2", "e3"])
    out = tmp_path / "out"
    code = main(
        [
            "run",
            str(folder),
            "--agent",
            "reference",
            "--output",
            str(out),
            "--seeds",
            "4",
            "--filter",
            "e[12]",
            "--dry-run",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0
    assert "evals: 2 (selected from 3); models: default; seeds: 1..4" in text
    assert "selected evals: e1, e2\n" in text  # which ones, not only how many
    assert "units: 8 planned, 0 already done, 8 to run" in text and "estimated cost: unknown" in text
    assert not out.exists()  # nothing written, no lease taken

    assert main(["run", str(folder), "--agent", "reference", "--output", str(out), "--limit", "1", "--dry-run"]) == 0
    assert "evals: 1 (selected from 3)" in (text := capsys.readouterr().out) and "selected evals: e1\n" in text
    assert main(["run", str(folder), "--agent", "reference", "--output", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "selected evals" not in text  # no selection: every eval, not listed again
    # no eval sets a time limit: the default bounds each unit, and the dry run says it
    assert "time limit per unit: 6000 s (the default: no eval sets one; --timeout S changes it)" in text
    options = ["--agent", "reference", "--output", str(out), "--dry-run", "--timeout", "30"]
    assert (
        main(["run", str(folder), *options]) == 0 and "time limit per unit: 30 s (--timeout)" in capsys.readouterr().out
    )
    body = json.loads((folder / "e1.json").read_text())
    (folder / "e1.json").write_text(json.dumps({**body, "agent_timeout": 120}))
    assert main(["run", str(folder), "--agent", "reference", "--output", str(out), "--dry-run"]) == 0
    assert (
        "time limit per unit: 120 s for 1 eval, 6000 s for 2 evals (1 of 3 evals set their own, "
        "the others 6000 s, the default)" in capsys.readouterr().out
    )
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "else 6000, the reference runner's" in " ".join(capsys.readouterr().out.split())


def test_the_run_says_on_what_its_anthropic_fallback_keys_are_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """latch-eval-tools takes the next key on a refusal, rayeval by default on a rejected key:
    a run whose machine lists fallback keys says which is in effect, never a key."""
    folder = write_mc_evals(tmp_path / "evals", ["e1"])
    dry_run = ["run", str(folder), "--agent", "reference", "--output", str(tmp_path / "out"), "--dry-run"]
    assert main(dry_run) == 0 and "fallback keys" not in capsys.readouterr().out
    monkeypatch.setenv("ANTHROPIC_API_KEY_FALLBACKS", '["sk-ant-spare-1", "sk-ant-spare-2"]')
    assert main(dry_run) == 0
    text = capsys.readouterr().out
    assert (
        "Anthropic fallback keys: 2, each taken on a rejected key (401/403, billing) (ANTHROPIC_KEY_FALLBACK_ON="
        "rejected_key; ANTHROPIC_KEY_FALLBACK_ON=refusal takes them on a refusal, as latch-eval-tools does)" in text
    )
    monkeypatch.setenv("ANTHROPIC_KEY_FALLBACK_ON", "refusal")
    assert main(dry_run) == 0
    text = capsys.readouterr().out
    assert (
        "Anthropic fallback keys: 2, each taken on a refusal, as latch-eval-tools does (ANTHROPIC_KEY_FALLBACK_ON=refusal)"
        in text
    )
    assert "spare" not in text


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ("a;b", "--models: 'a;b' is not one model name (no spaces or ';' in a name): separated by commas, as in --models a,b"),
        ("claude opus", "--models: 'claude opus' is not one model name"),
        ("gpt-4o, claude-sonnet-4-5 ;x", "--models: 'claude-sonnet-4-5 ;x' is not one model name"),
    ],
)  # fmt: skip
def test_a_model_list_with_another_separator_is_refused(
    models: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Commas separate models; a name with a space or a ``;`` is a list typed another way, not
    one model whose units would all be errors (or worse, answers labelled with a wrong name)."""
    folder = write_mc_evals(tmp_path / "evals", ["e1"])
    code = main(["run", str(folder), "--agent", "reference", "--output", str(tmp_path / "out"), "--models", models,
                 "--dry-run"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_models_are_split_on_commas_and_trimmed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_mc_evals(tmp_path / "evals", ["e1"])
    out = str(tmp_path / "out")
    assert main(["run", str(folder), "--agent", "reference", "--output", out, "--models", " a , b,", "--dry-run"]) == 0
    assert "models: a, b;" in capsys.readouterr().out


def test_dry_run_estimates_each_models_cost_from_its_own_earlier_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Earlier rows under the root: model ``a`` at $2 a unit, many of ``b`` at $0.01, none of
    ``c``. Each model is priced from its own rows; ``c``'s units are said to be unknown."""
    folder = write_mc_evals(tmp_path / "evals", ["e1", "e2"])
    out = tmp_path / "out"
    earlier = [("a", 2.0)] * 2 + [("b", 0.01)] * 20 + [("c", None)]
    rows = [
        UnitRecord(**base_row(run_id="earlier", model=m, unit_id=f"u{i}", cost_usd=c))
        for i, (m, c) in enumerate(earlier)
    ]
    ResultStore(out).write_rows("earlier", rows)
    code = main(["run", str(folder), "--agent", "reference", "--output", str(out), "--models", "a,b,c", "--dry-run"])
    text = capsys.readouterr().out
    assert code == 0 and "units: 6 planned, 0 already done, 6 to run" in text
    assert "estimated cost: $4.02 for 4 of the 6 units, the others unknown" in text  # 2 x $2 + 2 x $0.01
    assert "a: $2.0000 per unit, the mean of 2 earlier units" in text and "c: no earlier unit recorded a cost" in text


@pytest.mark.usefixtures("shared_ray")
def test_retry_errors_reruns_only_the_errored_units_as_new_attempts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    folder = write_mc_evals(tmp_path / "evals", ["e1", "e2"])
    flag = tmp_path / "switch" / "endpoint-down"  # the agent is shown the folder it looks in
    flag.parent.mkdir()
    flag.write_text("")
    out = tmp_path / "out"
    base = ["run", str(folder), "--agent", "tests.batch.agents:flaky", "--agent-arg", f"flag={flag}", "--output", str(out),
            "--run-id", "r1", "--seeds", "2", "--retries", "0", "--no-progress", "--sandbox-bind", str(flag.parent)]  # fmt: skip
    assert main(base) == 1  # every unit errored
    flag.unlink()  # the endpoint is back
    capsys.readouterr()
    assert main([*base, "--retry-errors", "--dry-run"]) == 0
    assert (
        "units: 4 planned, 0 already done, 4 to run, 4 of them again: errored, or cut short by the budget"
        in capsys.readouterr().out
    )
    assert main([*base, "--retry-errors"]) == 0
    assert "run r1: 4 units to run (0 already done, 4 of them again: errored" in capsys.readouterr().err
    rows = pd.read_parquet(out / "run_id=r1")
    assert sorted(rows["attempt"]) == [1, 1, 1, 1, 2, 2, 2, 2]  # the errors stay, as earlier attempts
    latest = rows[rows["attempt"] == 2]
    assert latest["passed"].all() and latest["unit_id"].is_unique
    capsys.readouterr()
    from rayeval.batch import engine

    monkeypatch.setattr(engine, "connect", lambda *args: pytest.fail("Ray started to run no unit"))
    assert main([*base, "--retry-errors"]) == 0  # nothing errored any more: nothing runs, no Ray starts
    assert "(0 run now, 4 already done)" in capsys.readouterr().out
    manifest = json.loads((out / "run_id=r1" / "_manifest.json").read_text())
    assert manifest["status"] == "completed"
