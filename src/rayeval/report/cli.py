"""``rayeval report`` and ``rayeval compare``: argparse pieces for the main CLI.

Wire them with ``add_report_commands(subparsers)``; each subcommand sets ``handler`` (a
function ``args -> exit code``). Exit codes: 0 ok, 1 a gate failed, 2 bad input (one clean
``rayeval: ...`` line on stderr, never a traceback). ``python -m rayeval.report.cli`` runs them
standalone.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RayevalError

if TYPE_CHECKING:
    from .reader import ResultsReader

EXIT_OK, EXIT_GATE_FAILED, EXIT_BAD_INPUT = 0, 1, 2

GROUP_COLUMNS = {
    "model": "model",
    "harness": "harness",
    "run": "run_id",
    "run_id": "run_id",
    "agent": "agent",
    "task": "task",
    "kit": "kit",
    "platform": "kit",
    "eval_type": "eval_type",
    "time_horizon": "time_horizon",
}


def _split(values: Sequence[str] | None) -> list[str] | None:
    """Repeatable, comma-separated option values → a flat list (None when not given)."""
    if not values:
        return None
    items = [item.strip() for value in values for item in value.split(",") if item.strip()]
    return items or None


def parse_by(text: str) -> list[str]:
    """``model,harness`` | ``model`` | ``task`` | ``kit`` | any comma list of group columns.

    A breakdown column given alone (``task``, ``kit``…) is reported per model × harness, as
    the published by-task/by-platform tables are.
    """
    from .benchmark import MODEL_KEYS
    from .reader import ReportError

    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise ReportError("--by needs at least one column")
    columns = []
    for name in names:
        if name not in GROUP_COLUMNS:
            raise ReportError(f"--by: unknown column {name!r} (use {', '.join(sorted(GROUP_COLUMNS))})")
        if GROUP_COLUMNS[name] not in columns:
            columns.append(GROUP_COLUMNS[name])
    if not any(c in MODEL_KEYS for c in columns):
        columns += ["model", "harness"]
    return columns


def _ks(text: str) -> list[int]:
    from .reader import ReportError

    try:
        ks = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ReportError(f"--pass-k must be comma-separated positive integers, got {text!r}") from None
    if not ks or any(k < 1 for k in ks):
        raise ReportError(f"--pass-k must be comma-separated positive integers, got {text!r}")
    return ks


def _check_out(out: str | None, root: str) -> None:
    """``--out`` may not lie inside the results root: a file there would make the root no
    longer a Parquet dataset (``pandas.read_parquet(root)`` fails on it)."""
    from ..filesystem import inside_root
    from .reader import ReportError

    if out is not None and inside_root(out, root):
        raise ReportError(f"--out {out} is inside the results root {root}: write reports elsewhere (e.g. --out report.html), "
                          "the root must stay a Parquet dataset")  # fmt: skip


def _emit(text: str, out: str | None) -> None:
    from .reader import ReportError

    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write {out}: {exc}") from None
    print(f"wrote {out}", file=sys.stderr)


def _guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``handler`` with its errors as one ``rayeval: ...`` line (exit 2) and its warnings shown."""

    @functools.wraps(handler)  # its docstring is the command's help (add_command)
    def run(args: argparse.Namespace) -> int:
        # Warnings (a part left out because it cannot be read, naming it) are one
        # "rayeval: warning: ..." line each on stderr; the report goes on with the other parts.
        warnings = logging.StreamHandler(sys.stderr)
        warnings.setLevel(logging.WARNING)
        warnings.setFormatter(logging.Formatter("rayeval: warning: %(message)s"))
        logger = logging.getLogger("rayeval")
        logger.addHandler(warnings)
        try:
            return handler(args)
        except RayevalError as exc:  # a ReportError, or a results root that cannot be read
            print(f"rayeval: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        finally:
            logger.removeHandler(warnings)

    return run


def _no_results(reader: ResultsReader, runs: list[str] | None) -> Exception:
    from .reader import ReportError

    where = f" for run(s) {', '.join(runs)}" if runs else ""
    known = reader.run_ids()
    hint = f" (runs here: {', '.join(known[:20])}{' …' if len(known) > 20 else ''})" if known else ""
    return ReportError(f"no results under {reader.root}{where}{hint}")


def _who_saw_errors(args: argparse.Namespace) -> list[str]:
    """The column ``--errors exclude`` reads beside the report's: who saw each error."""
    return ["metadata_json"] if args.errors == "exclude" else []


def _run_plan(
    reader: ResultsReader, runs: list[str] | None, selected: list[str], args: argparse.Namespace
) -> tuple[dict[str, dict] | None, int | dict[str, int] | None]:
    """The batch engine's run manifests: each selected run's status, and the planned units
    (``--planned-units``, else the manifests' totals unless filtered to a subset)."""
    manifests = reader.manifests(runs)
    run_status = {run: manifests[run] for run in selected if run in manifests} or None
    planned: int | dict[str, int] | None = args.planned_units
    unfiltered = not (args.model or args.eval)
    if planned is None and unfiltered and selected and all("total_units" in manifests.get(r, {}) for r in selected):
        planned = {run: int(manifests[run]["total_units"]) for run in selected}
    return run_status, planned


def _gates(args: argparse.Namespace, gate_rows: Any) -> int:
    from .gates import accuracy_gate, error_rate_gate, gate_summary, gates_passed

    results = []
    if args.fail_under is not None:
        results += accuracy_gate(gate_rows, args.fail_under)
    if args.max_error_rate is not None:
        results += error_rate_gate(gate_rows, args.max_error_rate)
    if results:
        print(gate_summary(results), file=sys.stderr)
        if not gates_passed(results):
            return EXIT_GATE_FAILED
    return EXIT_OK


def _table_output(args: argparse.Namespace, table: Any, unsandboxed: str | None, status_line: Callable[[], str]) -> str:
    """The table as csv, json or text (with the status line and the sandbox warning, which
    goes to stderr with csv and json)."""
    from .benchmark import to_csv, to_json, to_text

    if unsandboxed and args.format in ("csv", "json"):
        print(f"rayeval: {unsandboxed}", file=sys.stderr)
    if args.format == "csv":
        return to_csv(table)
    if args.format == "json":
        return to_json(table)
    return f"{status_line()}\n" + (f"{unsandboxed}\n" if unsandboxed else "") + f"\n{to_text(table)}\n"


@_guarded
def cmd_report(args: argparse.Namespace) -> int:
    """benchmark table, stats and HTML report over stored results

    Accuracy (mean over evals of per-eval pass rates) with t-distribution 95% CIs, mean cost and
    duration per run, per model × harness (or by task/kit). Exit 1 when a gate fails."""
    from .reader import ResultsReader

    by = parse_by(args.by)
    ks = _ks(args.pass_k)
    _check_out(args.out, args.root)
    reader = ResultsReader(args.root, args.s3_endpoint)
    runs = reader.resolve_runs(_split(args.run))
    if args.format == "html" or args.pass_k_table:  # these need the units themselves
        return _report_units(args, reader, runs, by, ks)
    return _report_summary(args, reader, runs, by)


def _report_summary(args: argparse.Namespace, reader: ResultsReader, runs: list[str] | None, by: list[str]) -> int:
    """Table, csv or json from counts duckdb aggregates over the part files (:mod:`.summary`)."""
    from .benchmark import MODEL_KEYS, isolation_counts_note, table_from_pairs
    from .stats import run_progress
    from .summary import read_summary

    models, evals = _split(args.model), _split(args.eval)
    summary = read_summary(reader, runs, models, evals, by, args.errors)
    if summary is None:
        raise _no_results(reader, runs)
    run_status, planned = _run_plan(reader, runs, sorted(summary.run_totals), args)
    table = table_from_pairs(summary.pairs, by, errors=args.errors)

    def status_line() -> str:
        state = run_progress(
            summary.run_totals,
            summary.num_errors,
            planned_units=planned,
            run_status=run_status,
            span=summary.span,
        )
        return f"status: {state.status}; {state.text}"

    _emit(_table_output(args, table, isolation_counts_note(summary.isolation), status_line), args.out)
    if all(c in MODEL_KEYS for c in by) or (args.fail_under is None and args.max_error_rate is None):
        return _gates(args, table)
    overall = read_summary(reader, runs, models, evals, errors=args.errors)  # the gates are per model × harness
    return _gates(args, table_from_pairs(overall.pairs, ["model", "harness"], errors=args.errors) if overall else table)


def _report_units(
    args: argparse.Namespace, reader: ResultsReader, runs: list[str] | None, by: list[str], ks: list[int]
) -> int:
    """HTML, or text with the pass@k table: from the units read as a frame."""
    from .benchmark import MODEL_KEYS, benchmark_table, format_text, isolation_note
    from .reader import REPORT_COLUMNS, ReportError
    from .stats import evaluation_stats

    columns = list(REPORT_COLUMNS) + (["answer_json"] if args.format == "html" else []) + _who_saw_errors(args)
    units = reader.units(runs=runs, models=_split(args.model), evals=_split(args.eval), columns=columns)
    if units.empty:
        raise _no_results(reader, runs)
    missing = [c for c in by if c not in units.columns]
    if missing:
        raise ReportError(f"--by: the results have no {', '.join(missing)} column")
    run_status, planned = _run_plan(reader, runs, sorted({str(r) for r in units["run_id"].unique()}), args)
    table = benchmark_table(units, by=by, errors=args.errors)
    if args.format == "html":
        from .html_report import render_html

        title = "rayeval report" + (f": {', '.join(runs)}" if runs else "")
        html_text = render_html(
            units,
            title=title,
            source=str(args.root),
            errors=args.errors,
            ks=ks,
            planned_units=planned,
            run_status=run_status,
        )
        _emit(html_text, args.out)
    else:
        from .metrics import pass_at_k

        def status_line() -> str:
            stats = evaluation_stats(
                units, planned_units=planned, run_status=run_status, errors=args.errors, report=False
            )
            return f"status: {stats.status}; {stats.progress}"

        keys = [c for c in by if c in MODEL_KEYS] or ["model", "harness"]
        text = _table_output(args, table, isolation_note(units), status_line)
        _emit(f"{text}\n{format_text(pass_at_k(units, k=ks, by=keys, errors=args.errors))}\n", args.out)
    gate_rows = table if all(c in MODEL_KEYS for c in by) else benchmark_table(units, errors=args.errors)
    return _gates(args, gate_rows)


@_guarded
def cmd_compare(args: argparse.Namespace) -> int:
    """paired comparison of two runs or models on their common evals

    Mean difference of per-eval pass rates (A − B) with a paired-bootstrap CI, exact sign test and
    exact McNemar test. A/B: a run id, a model, model/harness, or key=value[,key=value] (run,
    model, harness, task, kit)."""
    from .compare import paired_comparison
    from .reader import REPORT_COLUMNS, ReportError, ResultsReader

    if args.n_boot < 100:
        raise ReportError(f"--n-boot must be at least 100, got {args.n_boot}")
    _check_out(args.out, args.root)
    reader = ResultsReader(args.root, args.s3_endpoint)
    units = reader.units(
        runs=reader.resolve_runs(_split(args.run)),
        models=_split(args.model),
        evals=_split(args.eval),
        columns=[*REPORT_COLUMNS, *_who_saw_errors(args)],
    )
    if units.empty:
        raise ReportError(f"no results under {args.root}")
    result = paired_comparison(units, args.a, args.b, errors=args.errors, n_boot=args.n_boot, seed=args.seed)
    if args.format == "json":
        _emit(json.dumps(result.model_dump(mode="json"), indent=2), args.out)
    else:
        _emit(result.to_text(), args.out)
    return EXIT_OK


def add_command(
    subparsers: argparse._SubParsersAction, name: str, handler: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """Subcommand ``name`` of the main CLI, run by ``handler``, whose docstring says what it does:
    its first line in ``rayeval --help``, the rest in ``rayeval NAME --help``."""
    summary, _, description = inspect.cleandoc(handler.__doc__ or "").partition("\n\n")
    command: argparse.ArgumentParser = subparsers.add_parser(name, help=summary, description=description)
    command.set_defaults(handler=handler)
    return command


def add_results_options(parser: argparse.ArgumentParser) -> None:
    """The results a command reads, said the same by ``report``, ``compare`` and ``view``: the
    results root, the runs (``args.run``: as given; ``_split`` makes it a list) and its S3 endpoint."""
    parser.add_argument("root", help="results root: a folder or s3://bucket/prefix")
    parser.add_argument(
        "--run",
        action="append",
        metavar="ID",
        help="only these run ids (repeatable, comma-separated; 'latest' = the newest run)",
    )
    add_s3_endpoint_option(parser)


def _add_selection_options(parser: argparse.ArgumentParser) -> None:
    """The results ``report`` and ``compare`` read, the units among them, and where they write."""
    add_results_options(parser)
    parser.add_argument(
        "--model", action="append", metavar="MODEL", help="only these models (repeatable, comma-separated)"
    )
    parser.add_argument(
        "--eval", action="append", metavar="EVAL_ID", help="only these evals (repeatable, comma-separated)"
    )
    parser.add_argument(
        "--errors",
        choices=("fail", "exclude"),
        default="fail",
        help="errored runs (error/timeout/config_error) count as failures (default, as the references), or "
        "those rayeval saw fail outside the agent (a provider, a lost worker, a judge, the eval's configuration) "
        "are left out",
    )
    parser.add_argument("--out", metavar="FILE", help="write the output here instead of standard output")


def add_s3_endpoint_option(parser: argparse.ArgumentParser) -> None:
    """``--s3-endpoint URL``, spelled the same by every command (``args.s3_endpoint``);
    ``--s3-endpoint-url``, the viewer's former spelling, still works, unlisted."""
    parser.add_argument(
        "--s3-endpoint",
        metavar="URL",
        help="S3-compatible endpoint (MinIO, moto) of s3:// roots and data; default: AWS_ENDPOINT_URL",
    )
    parser.add_argument("--s3-endpoint-url", dest="s3_endpoint", help=argparse.SUPPRESS)


def add_report_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``report`` and ``compare`` on the main CLI's subparsers."""
    report = add_command(subparsers, "report", cmd_report)
    _add_selection_options(report)
    report.add_argument(
        "--by", default="model,harness", help="model,harness (default) | model | task | kit | a comma list of columns"
    )
    report.add_argument(
        "--format",
        choices=("table", "csv", "json", "html"),
        default="table",
        help="table (default), csv, json or a self-contained html file",
    )
    report.add_argument(
        "--fail-under", type=float, metavar="PCT", help="exit 1 when any model × harness accuracy is below PCT percent"
    )
    report.add_argument(
        "--max-error-rate",
        type=float,
        metavar="PCT",
        help="exit 1 when any model × harness has more than PCT%% errored runs",
    )
    report.add_argument(
        "--planned-units", type=int, metavar="N", help="planned unit count, for progress/ETA and status"
    )
    report.add_argument(
        "--pass-k",
        default="1,3",
        metavar="K[,K]",
        help="k values for pass@k / pass^k (html, --pass-k-table; default %(default)s)",
    )
    report.add_argument(
        "--pass-k-table", action="store_true", help="also print the pass@k / pass^k table (table format)"
    )

    compare = add_command(subparsers, "compare", cmd_compare)
    _add_selection_options(compare)
    compare.add_argument("--a", required=True, metavar="RUN_OR_MODEL", help="the first side: a run id or a model name")
    compare.add_argument("--b", required=True, metavar="RUN_OR_MODEL", help="the second side: a run id or a model name")
    compare.add_argument("--n-boot", type=int, default=10000, help="bootstrap resamples (default 10000)")
    compare.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    compare.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rayeval", description="rayeval reports")
    add_report_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
