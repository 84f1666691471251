"""Humanloop-style evaluations on the Ray batch engine: ``evaluations.run(name, file,
evaluators, dataset)`` (see :func:`rayeval.evaluations.api.run` and the README). Rows are
stored like any batch run's, each evaluator's judgment in ``metrics_json["evaluators"][path]``.
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
