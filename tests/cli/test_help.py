"""The command line explains itself: every flag has help, ``--version``, ``rayeval agents``."""

from __future__ import annotations

import argparse
import subprocess
import sys

from rayeval import __version__
from rayeval.agents.resolve import BUILT_IN_AGENTS
from rayeval.cli import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_option_and_argument_of_every_command_has_help() -> None:
    missing = []
    for name, command in _subcommands(build_parser()).items():
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if not action.help:
                missing.append(f"rayeval {name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, missing


def test_version_and_the_list_of_built_in_agents() -> None:
    version = subprocess.run(
        [sys.executable, "-m", "rayeval.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.strip() == f"rayeval {__version__}"
    listed = subprocess.run(
        [sys.executable, "-m", "rayeval.cli", "agents"], capture_output=True, text=True, check=True
    ).stdout
    for name in BUILT_IN_AGENTS:
        assert any(line.startswith(f"{name} ") for line in listed.splitlines()), name
    assert "options: trials" in listed and "module:function" in listed
    # a program's options with the defaults they have, and what each does
    assert "provider_wait_s=1800" in listed and "command_timeout=300" in listed and "wire_api=responses" in listed
    assert "the most model calls (0: no limit)" in listed
    from rayeval.agents.resolve import PROGRAM_AGENTS, built_in_agents

    for name, _, options in built_in_agents():
        if name in PROGRAM_AGENTS:
            assert all(meaning for _, meaning in options), (name, [o for o, m in options if not m])


def _help(parser: argparse.ArgumentParser) -> str:
    return parser.format_help()


def test_help_is_plain_text_and_every_command_says_what_it_does() -> None:
    """No Sphinx or reST markup reaches a terminal, and ``rayeval COMMAND --help`` explains the
    command, not only its options."""
    parser = build_parser()
    commands = _subcommands(parser)
    for name, text in [("rayeval", _help(parser)), *((n, _help(c)) for n, c in commands.items())]:
        for markup in ("``", ":class:", ":func:", ":meth:", ":mod:", ":attr:"):
            assert markup not in text, (name, markup)
    assert "Exit codes: 0" in _help(parser)
    undescribed = [name for name, command in commands.items() if not (command.description or "").strip()]
    assert not undescribed, undescribed


def test_every_option_with_a_default_shows_it() -> None:
    hidden = []
    for name, command in _subcommands(build_parser()).items():
        formatter = command._get_formatter()
        for action in command._actions:
            default = action.default
            if (
                action.help in (None, argparse.SUPPRESS)
                or action.choices
                or default in (None, False, [], "", argparse.SUPPRESS)
            ):
                continue
            shown = f"{default:g}" if isinstance(default, (int, float)) else str(default)
            if shown not in formatter._expand_help(action):
                hidden.append(f"rayeval {name} {'/'.join(action.option_strings)} (default {shown})")
    assert not hidden, hidden


def test_the_s3_endpoint_option_has_one_name_on_every_command(tmp_path) -> None:
    """``--s3-endpoint`` everywhere; the viewer's former ``--s3-endpoint-url`` still parses
    (same destination) but is not listed."""
    parser = build_parser()
    commands = _subcommands(parser)
    first = {"run": ["run", "evals", "--agent", "reference", "--output", str(tmp_path)],
             "report": ["report", str(tmp_path)], "compare": ["compare", str(tmp_path), "--a", "x", "--b", "y"],
             "view": ["view", str(tmp_path)]}  # fmt: skip
    for name, argv in first.items():
        text = _help(commands[name])
        assert "--s3-endpoint URL" in text and "--s3-endpoint-url" not in text, name
        for spelling in ("--s3-endpoint", "--s3-endpoint-url"):
            assert parser.parse_args([*argv, spelling, "http://127.0.0.1:9000"]).s3_endpoint == "http://127.0.0.1:9000"


def test_the_readme_synopsis_of_run_shows_its_real_defaults() -> None:
    """``[--option N]`` in the README's ``rayeval run`` synopsis, for an option with a default,
    is that default (the synopsis said --max-concurrency 64 while the default was 32)."""
    import re

    from tests.conftest import REPO

    readme = (REPO / "README.md").read_text()
    synopsis = readme[readme.index("rayeval run EVALS...") : readme.index("rayeval agents        #")]
    run = _subcommands(build_parser())["run"]
    defaults = {option: action.default for action in run._actions for option in action.option_strings}
    shown = re.findall(r"\[(--[a-z0-9-]+) ([0-9.]+)\]", synopsis)
    assert len(shown) >= 8, shown
    for option, value in shown:
        if defaults[option] is not None:
            assert float(value) == float(defaults[option]), (option, value, defaults[option])


def test_run_help_says_the_defaults_and_puts_grading_apart_from_the_agents_isolation() -> None:
    """``--seeds`` says its default; ``--grade-timeout`` (trusted grading) is not listed with
    the agent's isolation options."""
    run = _subcommands(build_parser())["run"]
    text = " ".join(_help(run).split())
    assert "(default 1: one trial)" in text
    isolation = next(g for g in run._action_groups if g.title and g.title.startswith("isolation of the agent"))
    assert "--grade-timeout" not in {s for a in isolation._group_actions for s in a.option_strings}
    assert "--network" in {s for a in isolation._group_actions for s in a.option_strings}
