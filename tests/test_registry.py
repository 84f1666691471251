"""The one plug-in registry: built-ins, registrations and installed packages' entry points."""

from __future__ import annotations

import sys

import pytest

from rayeval.registry import Registry, UnknownName


def _number(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError(f"not a number: {value!r}")
    return value


def test_registered_names_replace_only_when_asked_and_unknown_names_list_the_known() -> None:
    numbers = Registry("numbers", _number, {"one": 1})
    numbers.register("two", 2)
    with pytest.raises(ValueError, match="'two' is already registered"):
        numbers.register("two", 22)
    numbers.register("two", 22, replace=True)
    assert (numbers.get("two"), numbers.names(), "one" in numbers) == (22, ["one", "two"], True)
    assert numbers.unregister("two") == 22 and numbers.unregister("two") is None
    with pytest.raises(UnknownName, match="'three' is not one of the known numbers: one"):
        numbers.get("three")


def test_entry_points_are_loaded_when_named_and_never_replace_a_known_name(install_plugin) -> None:
    numbers = Registry("numbers", _number, {"one": 1})
    install_plugin(numbers, "three", "my_plugin_three", "plugin = 3\n")
    install_plugin(numbers, "one", "my_plugin_one", "plugin = 100\n")
    assert numbers.knows("three") and "my_plugin_three" not in sys.modules
    assert numbers.names() == ["one", "three"]
    assert (numbers.get("three"), numbers.get("one")) == (3, 1)
    assert "my_plugin_one" not in sys.modules


def test_an_object_of_the_wrong_kind_is_skipped_with_a_warning(install_plugin, caplog) -> None:
    numbers = Registry("numbers", _number)
    install_plugin(numbers, "text", "my_plugin_text", "plugin = 'three'\n")
    with caplog.at_level("WARNING", logger="rayeval.registry"):
        assert numbers.find("text") is None
    assert "numbers plug-in 'text'" in caplog.text and "TypeError: not a number: 'three'" in caplog.text
