"""Installing a plug-in package for a test: a module and a real ``.dist-info`` on ``sys.path``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rayeval.registry import Registry

InstallPlugin = Callable[[Registry[Any], str, str, str], Path]


@pytest.fixture
def install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InstallPlugin]:
    """``install(registry, name, module, source)``: a package whose module ``module`` (of
    ``source``) offers its ``plugin`` as ``name`` in ``registry``'s entry-point group, in a
    folder put on ``sys.path`` and returned; gone from the registry and ``sys.modules`` after
    the test."""
    installed: list[tuple[Registry[Any], str, str]] = []

    def install(registry: Registry[Any], name: str, module: str, source: str) -> Path:
        folder = tmp_path / f"site-{len(installed)}"
        dist = folder / f"{module}-1.0.dist-info"
        dist.mkdir(parents=True)
        (folder / f"{module}.py").write_text(source)
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
        (dist / "entry_points.txt").write_text(f"[{registry.group}]\n{name} = {module}:plugin\n")
        monkeypatch.syspath_prepend(str(folder))
        installed.append((registry, name, module))
        return folder

    yield install
    for registry, name, module in installed:
        registry.unregister(name)
        sys.modules.pop(module, None)
