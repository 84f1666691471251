"""One exception hierarchy: every error rayeval raises on purpose is a RayevalError."""

from __future__ import annotations

import importlib
import pickle
import pkgutil

import pytest

import rayeval
from rayeval import ConfigError, RayevalError, cli
from rayeval.batch.stopping import RunCancelled
from rayeval.data.cache import LockTimeout
from rayeval.storage.lease import LeaseError, LeaseHeld, LeaseLostInterrupt

# KeyboardInterrupts on purpose, so that no ``except Exception`` on their way swallows them.
INTERRUPTS = {RunCancelled, LeaseLostInterrupt}


def _rayeval_exception_classes() -> set[type[BaseException]]:
    """Every exception class defined in a module of rayeval, each module imported first."""
    for module in pkgutil.walk_packages(rayeval.__path__, "rayeval."):
        importlib.import_module(module.name)
    found: set[type[BaseException]] = set()
    todo: list[type[BaseException]] = [BaseException]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.split(".")[0] == "rayeval":
            found.add(cls)
    return found


def test_every_exception_class_of_rayeval_is_a_rayeval_error() -> None:
    classes = _rayeval_exception_classes()
    assert len(classes) > 30  # the walk found rayeval's modules
    outside = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in sorted(classes, key=lambda cls: (cls.__module__, cls.__qualname__))
        if not issubclass(cls, RayevalError) and cls not in INTERRUPTS
    ]
    assert not outside, f"derive these from rayeval.errors.RayevalError: {outside}"


def test_the_interrupts_stay_out_of_reach_of_except_exception() -> None:
    for interrupt in INTERRUPTS:
        assert issubclass(interrupt, KeyboardInterrupt) and not issubclass(interrupt, Exception)


def test_configuration_errors_share_a_base_and_stay_value_errors() -> None:
    from rayeval.agents.resolve import AgentArgsError, AgentNotFound
    from rayeval.evals import EvalFileError, EvalSelectionError
    from rayeval.evaluations.config import EvaluationConfigError
    from rayeval.graders.leaf import InvalidConfig

    for cls in (AgentArgsError, AgentNotFound, EvalFileError, EvalSelectionError, EvaluationConfigError, InvalidConfig):
        assert issubclass(cls, ConfigError) and issubclass(cls, ValueError), cls


def test_lease_errors_carry_the_holder_and_survive_pickling() -> None:
    held = pickle.loads(pickle.dumps(LeaseHeld("run r: held by another driver")))
    assert isinstance(held, OSError) and str(held) == "run r: held by another driver" and held.holder is None
    assert LeaseError("cannot write the lease").holder is None


def test_the_cli_prints_a_rayeval_error_as_one_line(monkeypatch, capsys) -> None:
    def locked(_args: object) -> int:
        raise LockTimeout("cache entry abc stayed locked for 600 s")

    monkeypatch.setattr(cli, "_cmd_agents", locked)
    assert cli.main(["agents"]) == cli.EXIT_BAD_INPUT
    assert capsys.readouterr().err == "rayeval: cache entry abc stayed locked for 600 s\n"


def test_the_cli_lets_other_exceptions_through(monkeypatch) -> None:
    def broken(_args: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "_cmd_agents", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["agents"])
