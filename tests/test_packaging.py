"""What pyproject.toml asks for and what CI tests: ranges for the packages users' environments and
cluster images also pin (ray, boto3, duckdb), the exact versions CI installs in .ci/constraints.txt
(inside those ranges, and the ones installed here), and one test command for the README and CI."""

from __future__ import annotations

import re
from importlib.metadata import version

import tomllib
from packaging.requirements import Requirement

from tests.conftest import REPO

CONSTRAINTS = REPO / ".ci" / "constraints.txt"


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {Requirement(text).name: Requirement(text) for text in project["dependencies"]}


def _pins() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, pinned = line.partition("==")
            pins[name.strip()] = pinned.strip()
    return pins


def test_shared_packages_take_a_range_and_ci_pins_a_version_inside_it() -> None:
    requirements, pins = _requirements(), _pins()
    for name in ("ray", "boto3", "duckdb"):
        specifiers = requirements[name].specifier
        assert len(specifiers) >= 2 and not any(s.operator == "==" for s in specifiers), (name, str(specifiers))
        assert name in pins, f"{name}: no exact version for CI in {CONSTRAINTS.name}"
    for name, pinned in pins.items():
        if name in requirements:
            assert requirements[name].specifier.contains(pinned), (name, pinned, str(requirements[name].specifier))
        assert version(name) == pinned, f"{name} {version(name)} is installed, CI tests {pinned}"


def test_ci_runs_the_readmes_test_command_with_the_constraints() -> None:
    readme = (REPO / "README.md").read_text()
    quickstart = re.findall(r"```bash\n(.*?)```", readme, re.DOTALL)[0]
    command = [line for line in quickstart.splitlines() if line.startswith('python -m pip install -e ".[dev]"')]
    assert len(command) == 1 and f"-c .ci/{CONSTRAINTS.name}" in command[0]
    assert command[0] in (REPO / ".ci" / "run").read_text().splitlines()
