"""The ``rayeval`` command line; its exit codes are in ``DESCRIPTION`` (``rayeval --help``)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from ._messages import field_problems, options_as_flags
from ._s3 import s3_hint
from ._version import __version__
from .batch.config import (
    CONCERNS,
    BatchConfig,
    ExecutionConfig,
    RayConfig,
    SchedulingConfig,
    StorageConfig,
    field_extra,
    option_field,
)
from .errors import RayevalError
from .evals import EvalFileError, check_evals, load_eval
from .evals.model import MAX_TIMEOUT_S
from .report.cli import add_command, add_report_commands, add_s3_endpoint_option
from .sandbox.config import SandboxConfig, UnitLimits
from .view.cli import add_view_command

if TYPE_CHECKING:  # imported when a run starts: `rayeval validate` needs no Ray
    from .batch.summary import RunSummary

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
#: a run stopped by its --max-cost: resumable with a higher one
EXIT_BUDGET_SPENT = 3

DESCRIPTION = (
    "Run AI-agent evaluations at scale on Ray: eval files, graders, sandboxed agents, results in Parquet. "
    "Exit codes: 0 done (or passed); 1 graded but failed (run: every unit errored, or more than "
    "--max-error-rate did); 2 bad input, or another error rayeval explains in one message (run: also "
    "another driver holding the run, or a results root that cannot be written)."
)


class BadInput(RayevalError):
    """A user error found by the command line itself: printed as one clean message, exit code 2."""


def _cmd_validate(args: argparse.Namespace) -> int:
    """check eval files, their data nodes and their grader configs

    Load eval files (or every *.json under folders), check that their data nodes are there (local
    ones readable, s3:// and http(s):// ones answering) and dry-run every grader config. Prints
    each problem as file: field: message and exits 2, or a count and exits 0."""
    evals, problems = check_evals(*args.paths, data_roots=args.data_roots)
    if not args.no_check_data:
        from .data.remote_data import remote_data_problems

        missing = remote_data_problems(evals, s3_endpoint_url=args.s3_endpoint)
        problems += missing
        evals = [e for e in evals if str(e.source_path) not in {p.path for p in missing}]
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s) found; {len(evals)} eval(s) valid", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{len(evals)} eval(s) valid")
    return EXIT_OK


def _read_answer(path: str) -> object:
    """The answer at ``path`` (``-``: standard input), taken as a run takes an agent's answer
    file: at most its size, UTF-8 JSON, nested no deeper than a run grades."""
    from ._json import TooManyValues, loads_bounded
    from .sandbox.config import MAX_ANSWER_FILE_BYTES
    from .unit.answers import MAX_ANSWER_NESTING, nested_deeper_than

    try:
        with open(sys.stdin.fileno() if path == "-" else path, "rb", closefd=path != "-") as stream:
            data = stream.read(MAX_ANSWER_FILE_BYTES + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read answer file: {exc}") from None
    if len(data) > MAX_ANSWER_FILE_BYTES:
        raise BadInput(f"{path}: the answer is larger than {MAX_ANSWER_FILE_BYTES >> 20} MB, the most a run reads")
    try:
        answer = loads_bounded(text, MAX_ANSWER_FILE_BYTES)
    except TooManyValues as exc:
        raise BadInput(f"{path}: the answer is too large to read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: answer is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # an integer beyond the digit limit, nesting beyond the parser
        raise BadInput(f"{path}: answer is not valid JSON: {exc}") from None
    if nested_deeper_than(answer, MAX_ANSWER_NESTING):
        raise BadInput(f"{path}: the answer nests lists or objects more than {MAX_ANSWER_NESTING} levels deep")
    return answer


def _cmd_grade(args: argparse.Namespace) -> int:
    """grade one answer file against one eval file

    Grade an answer (JSON) with an eval's graders, in a grading process of its own without
    credentials, and print the verdict as JSON. Exit 0 passed, 1 failed or no verdict, 2 bad input."""
    from .unit.grading_process import GradingError, grade_bounded

    _check_seconds(args, "grade_timeout")
    eval_ = load_eval(args.eval_file, check_data_nodes=False)  # grading stages no data
    try:  # the answer may be hostile: graded in a subprocess, within --grade-timeout
        result = grade_bounded(eval_, _read_answer(args.answer_file), args.grade_timeout)
    except GradingError as exc:
        print(f"rayeval: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(result.to_json(indent=2))
    return EXIT_OK if result.passed else EXIT_FAILED


def _cmd_agents(args: argparse.Namespace) -> int:
    """list the built-in agents and their options

    The built-in agents --agent takes by name, with the --agent-arg options each accepts;
    --agent module:function names your own agent function instead."""
    from .agents.resolve import built_in_agents

    for name, description, options in built_in_agents():
        print(f"{name:16} {description}")
        if any(meaning for _, meaning in options):  # a program's: one a line, with what it does
            print(f"{'':16} options:")
            for option, meaning in options:
                print(f"{'':18}{option:26} {meaning}")
        else:
            print(f"{'':16} options: {', '.join(option for option, _ in options) if options else 'none'}")
    print("\nor module:function: your own agent function, with your own options (context.args)")
    return EXIT_OK


def _cmd_run_one(args: argparse.Namespace) -> int:
    """run one agent on one eval locally and grade it

    Run an agent once on one eval on this machine, in its sandbox (see --isolation), without Ray,
    and print the graded result as JSON. Exit 0 passed, 1 failed, 2 bad input."""
    _check_seconds(args, "timeout", "grade_timeout")
    from .agents.resolve import agent_ref, check_agent_args, parse_agent_args
    from .unit import EvalRunner
    from .unit.context import AgentFunction, AgentRef
    from .unit.runner import check_agent_loads

    eval_ = load_eval(args.eval_file, data_roots=args.data_roots)
    sandbox = _sandbox_config(args)
    runner = EvalRunner(eval_, work_root=args.work_root, keep_workspace=args.keep_workspace)
    try:
        agent_args = parse_agent_args(args.agent_args, args.agent)
        check_agent_args(args.agent, agent_args, [args.model])
        # loaded here only to run inline; otherwise only in the unit's own process
        agent: AgentFunction | AgentRef = agent_ref(args.agent, load=args.isolation == "inline")
        if args.isolation != "inline":  # the check also starts the sandbox once
            sandbox.check_binds()
            config = sandbox.model_copy(update={"hide": (*sandbox.hide, *map(str, runner.data_roots))})
            agent = check_agent_loads(
                agent, agent_args, isolation=args.isolation, sandbox=config, runner_root=runner.work_root, keep=False
            )
    except ValueError as exc:  # a RayevalError (an unknown agent, no sandbox here) goes on to main()
        raise BadInput(str(exc)) from None
    result = runner.run(
        agent,
        model=args.model,
        seed=args.seed,
        timeout=args.timeout,
        agent_args=agent_args,
        isolation=args.isolation,
        sandbox=sandbox,
        grade_timeout=args.grade_timeout,
        convention=args.answer_convention,
        allow_models=tuple(args.allow_models),
    )
    print(result.model_dump_json(indent=2))
    return EXIT_OK if result.passed else EXIT_FAILED


#: a limit's metavar, by its field's last word
_LIMIT_UNITS = {"s": "S", "mb": "MB", "usd": "USD"}


def _field_type(annotation: Any) -> tuple[Any, bool]:
    """A configuration field's type, None and its constraints left out, and whether it may be None."""
    members = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    kinds = [get_args(m)[0] if get_origin(m) is Annotated else m for m in members if m is not type(None)]
    return kinds[0], len(kinds) < len(members)


#: the configuration models whose fields are options, by the flag's prefix when the field names none
_FLAG_PREFIXES: dict[type[BaseModel], str] = {
    UnitLimits: "--limit-",
    BatchConfig: "--",
    **dict.fromkeys(CONCERNS.values(), "--"),
}


def _flag(model: type[BaseModel], name: str) -> str:
    """The command-line option of ``model``'s field ``name``: the ``option`` its field's
    ``json_schema_extra`` names, else ``--field-name`` (``--limit-field-name`` for UnitLimits)."""
    option = field_extra(model, name).get("option")
    return str(option) if option else _FLAG_PREFIXES[model] + name.replace("_", "-")


def _config_option(parser: argparse._ActionsContainer, model: type[BaseModel], name: str, **given: Any) -> None:
    """Add the option of ``model``'s field ``name``, made from the field: its flag (:func:`_flag`),
    its destination (the field's name), its type (a flag for a bool, choices for a Literal,
    repeatable for a list or dict: parsed by the run's configuration), its default, and its help:
    the field's description, with the default unless it has none. ``given`` adds argparse's other
    arguments (a metavar, a parsing type) or replaces these."""
    field = model.model_fields[name]
    kind, _ = _field_type(field.annotation)
    options: dict[str, Any] = {"dest": name}
    if field.is_required():
        options["required"] = True
    else:
        options["default"] = field.get_default(call_default_factory=True)
    if kind is bool:
        options["action"] = "store_true"
    elif get_origin(kind) is Literal:
        options["choices"] = get_args(kind)
    elif get_origin(kind) in (list, dict):
        options.update(action="append", default=[])
    else:
        options["type"] = kind
    options.update(given)
    default = options.get("default")
    shown = f"{default:g}" if isinstance(default, float) else default
    said = "" if default is None or default is False or default == [] else f" (default {shown}"
    note = f"{said}{field_extra(model, name).get('default_note', '')})" if said else ""
    parser.add_argument(_flag(model, name), help=(field.description or "").replace("%", "%%") + note, **options)


def _limit_value(args: argparse.Namespace, name: str) -> Any:
    value = getattr(args, f"limit__{name}")
    _, optional = _field_type(UnitLimits.model_fields[name].annotation)
    return None if optional and not value else value


def _sandbox_config(args: argparse.Namespace) -> SandboxConfig:
    try:
        limits = UnitLimits(**{name: _limit_value(args, name) for name in UnitLimits.model_fields})
    except ValidationError as exc:
        raise BadInput(_option_problems(exc)) from None
    return SandboxConfig(
        network=args.network,
        limits=limits,
        hide=tuple(args.sandbox_hide),
        bind=tuple(os.path.abspath(path) for path in args.sandbox_bind),
        env_names=tuple(args.agent_env),
    )


def _cmd_check_sandbox(args: argparse.Namespace) -> int:
    """start one sandboxed unit on this machine, as a run would (exit 2: it cannot)

    Start one sandboxed unit here, with the given isolation options, as a run's workers would:
    for node set-up scripts and images. Exit 0 with what the sandbox has, or 2 saying why it
    cannot start."""
    from .agents.resolve import agent_ref
    from .sandbox.cgroups import UnitGroups
    from .sandbox.units import bwrap_path
    from .unit.runner import check_agent_loads
    from .unit.workspace import default_work_root

    # A SandboxError or AgentUnavailable says why it cannot: main() prints it, exit code 2.
    check_agent_loads(
        agent_ref("sleep"), {}, isolation="sandbox", sandbox=_sandbox_config(args), runner_root=default_work_root(),
        keep=False,
    )  # fmt: skip
    groups = sorted(UnitGroups().controllers)
    limits = f"control groups for {', '.join(groups)}" if groups else "no writable control group: per-process limits"
    print(f"sandbox works here: bubblewrap {bwrap_path()}, network {args.network}, {limits}")
    return EXIT_OK


def _check_seconds(args: argparse.Namespace, *names: str) -> None:
    """Time limit options outside a run's configuration (which checks its own): more than 0
    and at most 30 days (longer ones overflow the waits)."""
    for name in names:
        value = getattr(args, name)
        if value is not None and not 0 < value <= MAX_TIMEOUT_S:
            option = "--" + name.replace("_", "-")
            raise BadInput(
                f"{option}: must be more than 0 and at most {MAX_TIMEOUT_S:,} seconds (30 days), got {value!r}"
            )


def _model_limits(pairs: list[str]) -> dict[str, int]:
    limits = {}
    for pair in pairs:
        model, sep, value = pair.rpartition("=")
        if not sep or not model or not value.isdigit() or int(value) < 1:
            raise BadInput(f"--model-concurrency expects MODEL=N with N >= 1, got {pair!r}")
        limits[model] = int(value)
    return limits


def _unit_resources(pairs: list[str]) -> dict[str, float]:
    resources = {}
    for pair in pairs:
        name, sep, value = pair.rpartition("=")
        try:
            amount = float(value)
        except ValueError:
            amount = math.nan
        if not sep or not name or not amount > 0 or math.isinf(amount):
            raise BadInput(
                f"--unit-resource expects NAME=AMOUNT with AMOUNT > 0 (GPU, or a custom resource of the cluster), got {pair!r}"
            )
        resources[name] = amount
    return resources


_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def _memory_size(text: str) -> int:
    """``--unit-memory``: bytes, or a number with K, M, G or T (powers of 1024; ``2G``, ``512Mi``)."""
    number = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = number[-1:] if number[-1:] in _SIZE_UNITS else ""
    try:
        value = float(number.removesuffix(unit)) * _SIZE_UNITS[unit]
    except ValueError:
        value = math.nan
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M, 2G or a number of bytes, got {text!r}")
    return int(value)


# pydantic's bounds, said as the options' help says them
_BOUND_WORDS = {
    "greater_than_equal": ("ge", "must be at least {}"),
    "greater_than": ("gt", "must be more than {}"),
    "less_than_equal": ("le", "must be at most {}"),
    "less_than": ("lt", "must be less than {}"),
}


def _option_problems(exc: ValidationError) -> str:
    """``--max-concurrency: must be at least 1 (got 0)``, per problem: the option as typed,
    not the configuration field behind it, and the bound in words."""
    problems = []
    for _, message, error in field_problems(exc, {"finite_number": "must be a finite number"}):
        field = option_field(error["loc"])
        model = next((model for model in _FLAG_PREFIXES if field in model.model_fields), None)
        option = _flag(model, field) if model else f"--{field.replace('_', '-')}"
        if error["type"] in _BOUND_WORDS:
            key, words = _BOUND_WORDS[error["type"]]
            bound = error.get("ctx", {}).get(key)
            message = words.format(f"{bound:g}" if isinstance(bound, float) else bound)
        problems.append(f"{option}: {message} (got {error['input']!r})")
    return "; ".join(problems)


def _unfinished_runs_hint(config: BatchConfig) -> str:
    """``; unfinished runs under ROOT, newest first: ID (status, started ...), ...``, or "":
    the run a user wants to resume after a crash is usually the newest of these."""
    from datetime import datetime

    from .storage import ResultStore

    try:
        store = ResultStore(config.storage.output, s3_endpoint_url=config.storage.s3_endpoint_url)
        runs = store.list_runs()
    except (OSError, ValueError):  # only a hint: the error stays "--resume needs --run-id"
        return ""
    unfinished = []
    for run in runs:
        try:  # as stored, not validated: a big plan need not be checked for a hint
            data = store.read_manifest_data(run) or {}
            started = datetime.fromisoformat(data["created_at"].replace("Z", "+00:00"))  # 3.10 reads no "Z"
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if data.get("status") != "completed":
            unfinished.append((started, run, data.get("status", "unknown")))
    if not unfinished:
        return f" (no unfinished run under {config.storage.output})"
    unfinished.sort(reverse=True)
    listed = ", ".join(
        f"{run} ({status}, started {started:%Y-%m-%d %H:%M} UTC)" for started, run, status in unfinished[:5]
    )
    more = f" and {len(unfinished) - 5} more" if len(unfinished) > 5 else ""
    return f"; unfinished runs under {config.storage.output}, newest first: {listed}{more}"


def _batch_config(args: argparse.Namespace) -> BatchConfig:
    """The run's configuration: each ``rayeval run`` option into the field of its name (the
    options made from the fields are named so), which BatchConfig places in its concern (every
    problem of the options is then said at once); the options given as text parsed here."""
    from .agents.resolve import parse_agent_args
    from .batch.plan import parse_models, parse_seeds

    fields = BatchConfig.option_names()
    return BatchConfig.model_validate(
        {
            **{name: value for name, value in vars(args).items() if name in fields},
            "agent_args": parse_agent_args(args.agent_args, args.agent),
            "models": parse_models(args.models),
            "seeds": parse_seeds(args.seeds),
            "sample_ids": [name.strip() for text in args.sample_ids for name in text.split(",") if name.strip()],
            "check_data": not args.no_check_data,
            "unit_resources": _unit_resources(args.unit_resources),
            "model_concurrency": _model_limits(args.model_concurrency),
            "sandbox": _sandbox_config(args),
            "resume": args.resume or args.retry_errors,
            "s3_endpoint_url": args.s3_endpoint,
            "show_progress": not args.no_progress,
        }
    )


def _cmd_run(args: argparse.Namespace) -> int:
    """run evals x models x seeds on Ray, streaming results to Parquet

    Run an agent on every eval x model x seed on Ray (embedded, or the cluster of --address or of
    ray job submit), each unit sandboxed, and store one row per unit under --output
    (ROOT/run_id=<id>/model=<m>/part-*.parquet). Everything is checked before any unit starts;
    --dry-run stops there. Prints a summary per model at the end."""
    from .batch import RunCancelled, run_batch
    from .batch.budget import BudgetSpent
    from .storage import ResultsRootUnwritable, StorageError
    from .storage.lease import LeaseError, LeaseHeld

    try:
        config = _batch_config(args)
    except ValidationError as exc:
        raise BadInput(_option_problems(exc)) from None
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if config.storage.resume and not args.run_id:
        option = "--retry-errors" if args.retry_errors else "--resume"
        raise BadInput(f"{option} needs --run-id" + _unfinished_runs_hint(config))
    if args.force and not config.storage.resume:
        raise BadInput("--force goes with --resume: it resumes a run whose inputs changed")
    try:
        if args.dry_run:
            from .batch.preview import preview_run

            print(preview_run(config).text())
            return EXIT_OK
        summary = run_batch(config)
    except ResultsRootUnwritable as exc:  # a full disk, an S3 outage: the run stopped mid-way
        raise BadInput(
            f"{exc}. Once it can be written again, the same command with --resume --run-id {exc.run_id} finishes the run."
        ) from None
    except StorageError as exc:  # an unusable results root, before or after the units
        raise BadInput(_root_problem(args, exc)) from None
    except BudgetSpent as exc:  # resumable with a higher --max-cost
        print(f"rayeval: {exc}", file=sys.stderr)
        return EXIT_BUDGET_SPENT
    except LeaseError as exc:  # the run's lease could not be taken: another driver (named), or the root
        if isinstance(exc, LeaseHeld) or not s3_hint(args.output, exc, args.s3_endpoint):
            raise
        raise BadInput(_with_s3_hint(args, str(exc), exc)) from None
    except RayevalError:  # says what is wrong: main() prints it
        raise
    except OSError as exc:  # the results root cannot be read or written
        raise BadInput(_root_problem(args, exc)) from None
    except RunCancelled as exc:
        print(
            f"rayeval: {exc}; the units finished by then are stored under {args.output}. "
            f"The same command with --resume --run-id {exc.run_id} runs the rest.",
            file=sys.stderr,
        )
        return 128 + exc.signal_number  # as the shell reports a process ended by that signal
    print(summary.text())
    return _error_gate(summary, args.max_error_rate)


def _root_problem(args: argparse.Namespace, exc: BaseException) -> str:
    return _with_s3_hint(args, f"results root {args.output}: {exc}", exc)


def _with_s3_hint(args: argparse.Namespace, said: str, exc: BaseException) -> str:
    """``said`` of the results root's failure, and for an S3 root what to check (endpoint,
    credentials, bucket), as the error points to it."""
    hint = s3_hint(args.output, exc, args.s3_endpoint)
    return said + (f". {hint[0].upper()}{hint[1:]}" if hint else "")


def _percent(text: str) -> float:
    """A number of percent in [0, 100] (``--max-error-rate``, as ``rayeval report``'s)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 100.0:
        raise argparse.ArgumentTypeError(f"expected a number of percent between 0 and 100, got {text!r}")
    return value


def _error_gate(summary: RunSummary, max_error_rate: float | None) -> int:
    """EXIT_FAILED when every stored unit errored (nothing was evaluated: a broken agent or
    setup, not a score), or when a model × harness has more than ``max_error_rate`` percent of
    errored units (the gate of ``rayeval report --max-error-rate``); else EXIT_OK."""
    if summary.stored_rows and summary.errors == summary.stored_rows:
        print(f"rayeval: every unit of run {summary.run_id} errored ({summary.errors} units): nothing was evaluated; "
              f"most common ({summary.common_error_units} units): {summary.common_error}", file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    over = [m for m in summary.models if max_error_rate is not None and 100.0 * m.errors / m.units > max_error_rate]
    for m in over:
        print(f"rayeval: {m.model} ({m.harness}): {m.errors} of {m.units} units errored "
              f"({100.0 * m.errors / m.units:.1f}%), more than --max-error-rate {max_error_rate:g}%", file=sys.stderr)  # fmt: skip
    return EXIT_FAILED if over else EXIT_OK


def _add_data_check_options(parser: argparse.ArgumentParser) -> None:
    add_s3_endpoint_option(parser)
    parser.add_argument(
        "--no-check-data",
        action="store_true",
        help="do not check, from this machine, that every s3:// and http(s):// data node is there (one request each)",
    )


def _add_sandbox_options(parser: argparse.ArgumentParser, *, isolation: bool = True) -> None:
    """How agents run: the isolation level, and what a sandboxed unit sees, gets and may use."""
    group = parser.add_argument_group("isolation of the agent (see the README's Security section)")
    if isolation:
        _config_option(group, ExecutionConfig, "isolation")
    group.add_argument(
        "--network",
        choices=get_args(SandboxConfig.model_fields["network"].annotation),
        default=SandboxConfig.model_fields["network"].default,
        help="what a sandboxed agent reaches: host (default) the machine's network; model its loopback and the "
        "model gateway only; none its loopback only",
    )
    group.add_argument(
        "--agent-env",
        action="append",
        default=[],
        metavar="NAME",
        help="environment variable the agent receives (repeatable)",
    )
    group.add_argument(
        "--sandbox-bind",
        action="append",
        default=[],
        metavar="PATH",
        help="a host file or folder sandboxed agents see, read-only, at its own path (repeatable): they see only "
        "the system folders, the Python environment, their own code and their inputs otherwise",
    )
    group.add_argument(
        "--sandbox-hide",
        action="append",
        default=[],
        metavar="PATH",
        help="a path agents must not see even inside what they are shown (repeatable)",
    )
    for name, field in UnitLimits.model_fields.items():  # given as 0: no limit, where it may be none
        kind, optional = _field_type(field.annotation)
        default = "none" if field.default is None else "%(default)g" + (", 0: none" if optional else "")
        group.add_argument(
            _flag(UnitLimits, name), dest=f"limit__{name}", type=kind, default=field.default,
            metavar=_LIMIT_UNITS.get(name.rpartition("_")[2], "N"), help=f"{field.description} (default {default})",
        )  # fmt: skip
    if isolation:  # grading runs on the trusted side: not the agent's isolation
        _config_option(group, ExecutionConfig, "allow_models", metavar="MODEL")
        _config_option(parser, ExecutionConfig, "grade_timeout")
        _config_option(parser, ExecutionConfig, "answer_convention")


def _add_agent_options(parser: argparse.ArgumentParser) -> None:
    """The agent a unit runs (``rayeval run``, ``run-one``), with its options and the time it has."""
    _config_option(parser, BatchConfig, "agent")
    _config_option(parser, BatchConfig, "agent_args", metavar="KEY=VALUE")
    _config_option(parser, ExecutionConfig, "timeout", metavar="S")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rayeval", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"rayeval {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    add_command(sub, "agents", _cmd_agents)

    validate = add_command(sub, "validate", _cmd_validate)
    validate.add_argument("paths", nargs="+", help="eval files or folders (searched recursively)")
    _config_option(validate, BatchConfig, "data_roots", metavar="DIR")
    _add_data_check_options(validate)

    grade_cmd = add_command(sub, "grade", _cmd_grade)
    grade_cmd.add_argument("eval_file", help="the eval file (JSON)")
    grade_cmd.add_argument("answer_file", help="JSON answer file, or - for standard input")
    _config_option(grade_cmd, ExecutionConfig, "grade_timeout")

    run_one = add_command(sub, "run-one", _cmd_run_one)
    run_one.add_argument("eval_file", help="the eval file (JSON)")
    _add_agent_options(run_one)
    run_one.add_argument("--model", help="model name handed to the agent (the replay agent: MODEL or MODEL@HARNESS)")
    run_one.add_argument("--seed", type=int, help="seed handed to the agent (the replay agent: the recorded trial)")
    _config_option(run_one, ExecutionConfig, "work_root")
    run_one.add_argument(
        "--keep-workspace", action="store_true", help="keep the unit's work folder (printed) instead of removing it"
    )
    _config_option(run_one, BatchConfig, "data_roots", metavar="DIR")
    _add_sandbox_options(run_one)

    _add_sandbox_options(add_command(sub, "check-sandbox", _cmd_check_sandbox), isolation=False)

    _add_run_command(sub)
    add_report_commands(sub)
    add_view_command(sub)
    return parser


def _add_run_command(sub: argparse._SubParsersAction) -> None:
    """``rayeval run``: its options are BatchConfig's fields (rayeval.batch.config), but for the
    models, seeds and switches given as text."""
    run = add_command(sub, "run", _cmd_run)
    run.add_argument("evals", nargs="+", help="eval files or folders")
    _add_agent_options(run)
    run.add_argument("--models", default="default", help="model names separated by commas: m1,m2 (default: 'default')")
    run.add_argument(
        "--seeds",
        default="1",
        help="N (meaning 1..N) or a comma-separated list of seeds (default %(default)s: one trial)",
    )
    for name in ("output", "run_id", "resume", "force", "retry_errors"):
        _config_option(run, StorageConfig, name)
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="check everything and print the plan (units, seeds, estimated cost), start nothing",
    )
    _config_option(run, BatchConfig, "sample_ids", metavar="ID[,ID]")
    _config_option(run, BatchConfig, "filters", metavar="GLOB|KEY=VALUE")
    _config_option(run, BatchConfig, "limit", metavar="N")
    for name in ("max_concurrency", "judge_concurrency"):
        _config_option(run, SchedulingConfig, name)
    _config_option(run, SchedulingConfig, "model_concurrency", metavar="MODEL=N")
    _config_option(run, RayConfig, "address")
    _config_option(run, SchedulingConfig, "retries")
    _config_option(run, SchedulingConfig, "max_cost_usd", metavar="USD")
    _config_option(run, RayConfig, "unit_cpus", metavar="N")
    _config_option(run, RayConfig, "unit_memory", type=_memory_size, metavar="SIZE")
    _config_option(run, RayConfig, "unit_resources", metavar="NAME=AMOUNT")
    _config_option(run, RayConfig, "workers")
    _add_data_check_options(run)
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    run.add_argument(
        "--max-error-rate",
        type=_percent,
        metavar="PCT",
        help="exit 1 when any model × harness has more than PCT%% errored units (a run whose every unit errored always exits 1)",
    )
    _config_option(run, BatchConfig, "data_roots", metavar="DIR")
    _add_sandbox_options(run)


def _import_from_working_folder() -> None:
    """``--agent my_agents:run`` names a module of the folder the command runs in, as with
    ``python -m``; the ``rayeval`` script's own sys.path starts at its bin folder instead."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _import_from_working_folder()
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        with options_as_flags():
            return handler(args)
    except EvalFileError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_BAD_INPUT
    except RayevalError as exc:  # BadInput, and every error a command lets through
        print(f"rayeval: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
