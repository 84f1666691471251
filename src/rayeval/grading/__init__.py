"""Grading an eval's answer: in this process (``local``), in a bounded grading subprocess
(``pool``, ``server``), with the judge calls of LLM-judged graders made apart (``judges``).

Grading sits above the graders, evals and models, and below the harness: it knows nothing of
how an answer was produced.
"""

from .local import grade, grade_spec, grade_specs

__all__ = ["grade", "grade_spec", "grade_specs"]
