"""Importing this module registers every built-in grader type."""

from . import (  # noqa: F401
    composite,
    distribution,
    finished_file,
    labels,
    leaf,
    markers,
    matching,
    multiple_choice,
    numeric,
    refusal,
    rubric,
    sequence,
    spatial,
)
