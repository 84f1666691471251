from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

# Every Ray the tests start stays on 127.0.0.1 (Ray would otherwise register the machine's
# routable address), and reports no usage statistics.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# The tests start thousands of Python processes (test workers, Ray workers, sandboxed units,
# the CLI): where bytecode caching is off (PYTHONDONTWRITEBYTECODE, as this machine's environment sets it),
# each would compile rayeval and the test modules anew. This run and the processes it starts
# write their caches (in __pycache__, ignored by git).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A file under ../shared (present beside every clone, read-only in CI)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"missing shared input {path}: the tests need ../shared beside the repo")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# While a Ray that ``shared_ray`` started runs: the working folder and environment it started
# with (what its workers have)
_SHARED_RAY: list[tuple[str, dict[str, str]]] = []


def _what_workers_take() -> tuple[str, dict[str, str]]:
    """What a Ray started now gives its workers: this working folder (on their sys.path) and
    this environment (less pytest's name of the running test)."""
    return os.getcwd(), {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}


def _stop_shared_ray() -> None:
    if _SHARED_RAY:
        from rayeval.batch.cluster import shut_down_embedded_ray

        _SHARED_RAY.clear()
        shut_down_embedded_ray()


@pytest.fixture
def shared_ray() -> None:
    """One embedded Ray, started as the engine starts it (loopback only), for consecutive tests
    that ask for it, of one module or of the next ones in this worker: runs in this process
    (``evaluations.run``, ``batch.run``, the CLI's ``main``) join it instead of each starting and
    stopping their own. It stops after a test when the next one does not ask for it, and starts
    afresh where the working folder or environment differs from its start (its workers have
    those of its start). Not for tests that change the environment after it started (ask for
    it after the fixtures that set variables), nor for tests of the embedded Ray itself."""
    if _SHARED_RAY and _SHARED_RAY[0] != _what_workers_take():
        _stop_shared_ray()
    if not _SHARED_RAY:
        from rayeval.batch.cluster import connect
        from rayeval.batch.config import RayConfig

        if connect(RayConfig()):
            _SHARED_RAY.append(_what_workers_take())  # after the start: Ray sets a few variables here


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The shared Ray stops once a test and its fixtures are done, unless the next test asks for it."""
    try:
        yield
    finally:
        if nextitem is None or "shared_ray" not in nextitem.fixturenames:
            _stop_shared_ray()


def pytest_sessionfinish() -> None:
    _stop_shared_ray()  # a run stopped early (-x) ends before the test that was next


# Test modules (or folders) whose tests take longest on a loaded machine: with several
# workers (pytest-xdist) they start first, so that none of them is what the run waits for last.
LONGEST_FIRST = (
    "tests/view/",
    "tests/security/test_attacks.py",
    "tests/cluster/test_cluster_runs.py",
    "tests/batch/test_engine.py",
    "tests/agents/test_provider_recovery.py",
    "tests/batch/test_judges.py",
    "tests/agents/test_real_agents.py",
    "tests/test_readme_commands.py",
)
# Folders whose modules share session fixtures (a results root built by real runs, a browser):
# their tests run in one worker, which builds each fixture once.
ONE_WORKER_FOLDERS = ("tests/view/", "tests/report/")


def _group_of(nodeid: str) -> str:
    """The tests that run in one worker, one after the other: a module's (its fixtures, its
    ``shared_ray``), or a folder's that share session fixtures."""
    module = nodeid.split("::")[0]
    return next((folder for folder in ONE_WORKER_FOLDERS if module.startswith(folder)), module)


def _rank(group: str) -> int:
    return next((index for index, first in enumerate(LONGEST_FIRST) if group.startswith(first)), len(LONGEST_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In each module, the tests that ask for ``shared_ray`` run first (each part in its
    written order), so that they share one Ray instead of one per stretch of them; the
    longest groups first."""
    first_of: dict[str, int] = {}
    for index, item in enumerate(items):
        first_of.setdefault(item.nodeid.split("::")[0], index)
    items.sort(
        key=lambda item: (
            _rank(_group_of(item.nodeid)),
            first_of[item.nodeid.split("::")[0]],
            "shared_ray" not in item.fixturenames,
        )
    )


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Workers take the groups of :func:`_group_of` whole, in the order collected (the
    longest first, see ``pytest_collection_modifyitems``)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(nodeid)

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: three workers a core this process may use, at least 2. Many tests wait (on
    Ray, subprocesses, sandboxes, deadlines): on 2 cores, 4 workers left the cores idle 13 % of
    the default run, 6 workers 2.5 %, and the run took 671 s instead of 700-748 s."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, 3 * cores)


# Shared fixtures (the local S3 server, small file systems) live in their own modules.
pytest_plugins = ["tests.fixtures_s3", "tests.small_disk", "tests.plugins"]


def _interrupt_state() -> tuple[object, bool]:
    return signal.getsignal(signal.SIGINT), signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ())


@pytest.fixture(autouse=True)
def _ctrl_c_as_it_was() -> Iterator[None]:
    """A test leaves Ctrl-C as it found it (handled, not ignored or blocked): processes that
    later tests start inherit what it leaves, and one that ignores Ctrl-C cannot be stopped."""
    before = _interrupt_state()
    yield
    after = _interrupt_state()
    if after != before:
        signal.signal(signal.SIGINT, before[0])  # type: ignore[arg-type]
        signal.pthread_sigmask(signal.SIG_BLOCK if before[1] else signal.SIG_UNBLOCK, {signal.SIGINT})
        pytest.fail(f"the test left SIGINT changed: handler and blocked {before} before, {after} after")
