"""Humanloop-style evaluations on the Ray batch engine::

    from rayeval import evaluations

    result = evaluations.run(
        name="qa-accuracy",
        file={"path": "qa/answerer", "type": "flow", "version": "v2", "callable": answer},
        evaluators=[
            {"path": "exact", "args_type": "target_required", "return_type": "boolean",
             "callable": lambda log, dp: log["output"] == dp["target"]["answer"], "threshold": 0.8},
            {"path": "length", "args_type": "target_free", "return_type": "number",
             "callable": lambda log: len(log["output"])},
        ],
        dataset={"path": "qa/smoke", "datapoints": [{"inputs": {"question": "2+2?"}, "target": {"answer": "4"}}]},
        workers=8,
        output="results",  # or s3://bucket/prefix
    )
    result.checks      # [EvaluatorCheck(path, score, delta, threshold, threshold_check, ...)]
    result.stats       # EvaluationStats of the run (rayeval.report)
    result.passed      # no threshold check failed

Rows are stored like any batch run's (``<output>/run_id=<id>/model=<path[@version]>/``), with
each evaluator's judgment in ``metrics_json["evaluators"][path]``. See :func:`run`.
Exports load on first use: Ray, pandas and the report code are imported only by ``run``.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from .api import EvaluationResult, EvaluatorCheck, run
    from .config import (
        DatapointConfig,
        DatasetConfig,
        EvaluationConfigError,
        EvaluatorConfig,
        FileConfig,
        register_evaluator,
    )
    from .library import BUILTINS

__getattr__, __all__ = lazy_exports(__name__)
