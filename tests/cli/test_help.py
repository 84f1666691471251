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
