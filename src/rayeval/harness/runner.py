"""EvalRunner: one agent on one eval, isolated, staged, answered, graded, recorded."""
from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..evals import Eval, load_eval
from ..graders.result import GraderResult
from ..grading import grade
from .answers import find_answer
from .context import AgentContext, AgentFunction, call_agent
from .isolation import Isolation, Outcome, run_agent_isolated
from .prompt import build_prompt
from .result import EvalResult, Status
from .secrets import compile_secrets, redact, secret_values
from .staging import StagingError, stage_data
from .workspace import collect_artifacts, default_work_root, make_work_dir, remove_tree

# Metadata keys an agent may report that become first-class result fields.
_LIFTED_INT_FIELDS = ("input_tokens", "output_tokens", "n_turns")


def _number(value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return kind(value)


class EvalRunner:
    """Runs agents on one eval. Each ``run`` gets a fresh work folder under ``work_root``."""

    def __init__(
        self,
        eval_or_path: Eval | str | Path,
        *,
        work_root: str | Path | None = None,
        cache_dir: str | Path | None = None,
        keep_workspace: bool = False,
        run_id: str | None = None,
        s3_endpoint_url: str | None = None,
    ):
        self.eval = eval_or_path if isinstance(eval_or_path, Eval) else load_eval(eval_or_path)
        self.work_root = Path(work_root) if work_root is not None else default_work_root()
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.keep_workspace = keep_workspace
        self.run_id = run_id
        self.s3_endpoint_url = s3_endpoint_url

    def _timeout(self, override: float | None) -> float | None:
        return override if override is not None else self.eval.effective_timeout

    def run(
        self,
        agent_function: AgentFunction,
        *,
        model: str | None = None,
        seed: int | None = None,
        timeout: float | None = None,
        agent_args: dict[str, str] | None = None,
        isolation: Isolation = "process",
    ) -> EvalResult:
        """Stage, run, find the answer, grade. Never raises for anything the agent does."""
        started_at = datetime.now(timezone.utc)
        start = time.monotonic()
        limit = self._timeout(timeout)
        context = AgentContext(eval_id=self.eval.id, model=model, seed=seed, run_id=self.run_id, timeout=limit, args=agent_args or {})
        base = {"eval_id": self.eval.id, "model": model, "seed": seed, "run_id": self.run_id, "started_at": started_at}
        work_dir = make_work_dir(self.work_root, run_id=self.run_id, eval_id=self.eval.id, model=model, seed=seed)
        try:
            fields = self._run_in(work_dir, agent_function, context, limit, isolation)
            fields["artifacts"] = collect_artifacts(work_dir)
        finally:
            if not self.keep_workspace:
                remove_tree(work_dir)
        if self.keep_workspace:
            fields["metadata"]["work_dir"] = str(work_dir)
        fields = _scrub_secrets(fields)
        fields.setdefault("duration_s", round(time.monotonic() - start, 6))
        return EvalResult(**base, **fields, finished_at=datetime.now(timezone.utc))

    def _run_in(self, work_dir: Path, agent: AgentFunction, context: AgentContext, limit: float | None, isolation: Isolation) -> dict:
        base_dir = self.eval.source_path.parent if self.eval.source_path else None
        # Agents that never read inputs (replay, sleep) set ``needs_data = False``.
        nodes = self.eval.data_nodes if getattr(agent, "needs_data", True) else []
        try:
            staged = stage_data(
                nodes,
                work_dir / "data",
                base_dir=base_dir,
                cache_dir=self.cache_dir,
                timeout=self.eval.download_timeout,
                s3_endpoint_url=self.s3_endpoint_url,
            )
        except StagingError as exc:
            return _error_fields("error", "StagingError", str(exc))
        if staged:
            (work_dir / "data").chmod(0o555)  # nothing may be added to or removed from the inputs
        prompt = build_prompt(self.eval.task, work_dir, [node.path for node in staged])
        outcome = run_agent_isolated(
            lambda: call_agent(agent, prompt, work_dir, context),
            timeout=limit,
            isolation=isolation,
            log_path=work_dir / "agent_stdout.log",
        )
        return self._judge(outcome, work_dir)

    def _judge(self, outcome: Outcome, work_dir: Path) -> dict:
        fields: dict[str, Any] = {"agent_s": round(outcome.seconds, 6)}
        if outcome.kind == "timeout":
            return {**fields, **_error_fields("timeout", outcome.error_type, outcome.error_message)}
        if outcome.kind in ("raised", "crashed"):
            message = outcome.error_message or ""
            if outcome.traceback:
                message = f"{message}\n{outcome.traceback}".strip()
            return {**fields, **_error_fields("error", outcome.error_type, message)}

        found = find_answer(outcome.value, work_dir)
        metadata = found.metadata
        grade_start = time.monotonic()
        grader_result = grade(self.eval, found.answer)
        fields["grade_s"] = round(time.monotonic() - grade_start, 6)
        status: Status = "passed" if grader_result.passed else "failed"
        if grader_result.is_configuration_error:
            status = "config_error"
        if not found.found:
            details = metadata.get("error_details")
            detail = details.get("error") if isinstance(details, dict) else None
            fields["error_type"] = "NoAnswer"
            fields["error_message"] = "; ".join(text for text in (found.problem, detail) if text)
        fields.update(_lift_metadata(metadata))
        if metadata.get("replayed") and _number(metadata.get("duration_s"), float) is not None:
            fields["duration_s"] = float(metadata["duration_s"])  # a replay reports the recorded run's time
        return {
            **fields,
            "status": status,
            "passed": status == "passed",
            "grader_result": grader_result,
            "agent_answer": found.answer,
            "answer_source": found.source,
            "metadata": metadata,
        }


def _scrub_secrets(fields: dict) -> dict:
    """Mask every secret value of this environment in whatever the result will keep."""
    pattern = compile_secrets(secret_values(os.environ))
    if pattern is None:
        return fields
    grader_result = fields.pop("grader_result", None)
    fields = redact(fields, pattern)
    if grader_result is not None:
        fields["grader_result"] = GraderResult(
            passed=grader_result.passed,
            metrics=redact(grader_result.metrics, pattern),
            reasoning=redact(grader_result.reasoning, pattern),
            agent_answer=redact(grader_result.agent_answer, pattern),
            score=grader_result.score,
            field_scores=redact(grader_result.field_scores, pattern),
            score_max=grader_result.score_max,
        )
    return fields


def _error_fields(status: Status, error_type: str | None, message: str | None) -> dict:
    return {"status": status, "passed": False, "error_type": error_type, "error_message": message, "metadata": {}}


def _lift_metadata(metadata: dict) -> dict:
    lifted: dict[str, Any] = {}
    if isinstance(metadata.get("harness"), str):
        lifted["harness"] = metadata["harness"]
    cost = metadata.get("cost_usd", metadata.get("total_cost"))
    if _number(cost, float) is not None:
        lifted["cost_usd"] = float(cost)
    for key in _LIFTED_INT_FIELDS:
        if _number(metadata.get(key), int) is not None:
            lifted[key] = int(metadata[key])
    return lifted
