"""The command line a program's rows record shows a system prompt's length, never its text."""

from __future__ import annotations

import pytest

from rayeval.agents.resolve import program_class


@pytest.mark.parametrize("harness", ["claude-code", "pi"])
def test_a_system_prompt_is_recorded_as_its_length(harness: str) -> None:
    argv = ["prog", "--system-prompt", "be terse", "--append-system-prompt", "and kind", "--model", "m"]
    shown = program_class(harness)().display_argv(argv)
    assert shown == ["prog", "--system-prompt", "<8 chars>", "--append-system-prompt", "<8 chars>", "--model", "m"]
    assert argv[2] == "be terse"  # the command itself is left as it is


def test_a_flag_without_a_value_stays_as_it_is() -> None:
    assert program_class("claude-code")().display_argv(["prog", "--system-prompt"]) == ["prog", "--system-prompt"]
