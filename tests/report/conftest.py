from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rayeval.report import read_units

from .helpers import corpus_rows, write_root


@pytest.fixture(scope="session")
def corpus_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The replayed scbench corpus as a results root (one run, 16 model/harness pairs)."""
    return write_root(tmp_path_factory.mktemp("results"), corpus_rows(), per_file=7)


@pytest.fixture(scope="session")
def corpus_units(corpus_root: Path) -> pd.DataFrame:
    return read_units(corpus_root)
