"""EvalRunner: one agent on one eval, isolated, staged, answered, graded, recorded."""
from __future__ import annotations

import time
from pathlib import Path

from ..evals import Eval, load_eval
from .answers import find_answer
from .cache import remove_tree
from .context import AgentContext, AgentFunction, call_agent
from .execution import Execution, grade_execution, now
from .isolation import Isolation, Outcome, run_agent_isolated
from .prompt import build_prompt
from .result import EvalResult
from .secrets import environment_secrets, redact
from .staging import StagingError, stage_data
from .workspace import (
    Listing,
    collect_artifacts,
    default_work_root,
    list_or_retire,
    list_work_dir,
    make_work_dir,
)


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
        execution = self.execute(agent_function, model=model, seed=seed, timeout=timeout, agent_args=agent_args, isolation=isolation)
        return grade_execution(self.eval, execution)

    def execute(
        self,
        agent_function: AgentFunction,
        *,
        model: str | None = None,
        seed: int | None = None,
        timeout: float | None = None,
        agent_args: dict[str, str] | None = None,
        isolation: Isolation = "process",
    ) -> Execution:
        """Everything but grading, so a batch engine can grade many executions in one task."""
        started_at = now()
        start = time.monotonic()
        limit = timeout if timeout is not None else self.eval.effective_timeout
        context = AgentContext(eval_id=self.eval.id, model=model, seed=seed, run_id=self.run_id, timeout=limit, args=agent_args or {})
        work_dir = make_work_dir(self.work_root, run_id=self.run_id, eval_id=self.eval.id, model=model, seed=seed)
        removed = False
        try:
            ran = self._run_agent(work_dir, agent_function, context, limit, isolation)
            # what the agent left is listed once, for its answer files and its artifacts
            if self.keep_workspace:
                listing = list_work_dir(work_dir)
            else:
                left = list_or_retire(work_dir, reuse=_done_with(agent_function, ran))
                removed, listing = left is None, left or []
            if isinstance(ran, StagingError):
                fields = {"outcome": "error", "error_type": "StagingError", "error_message": str(ran)}
            else:
                fields = _find_answer(ran, work_dir, listing)
            fields["artifacts"] = collect_artifacts(listing)
        finally:
            if not self.keep_workspace and not removed:
                remove_tree(work_dir)
        if self.keep_workspace:
            fields.setdefault("metadata", {})["work_dir"] = str(work_dir)
        pattern = environment_secrets()
        if pattern is not None:
            fields = redact(fields, pattern)
        return Execution(
            **fields,
            eval_id=self.eval.id,
            model=model,
            seed=seed,
            run_id=self.run_id,
            started_at=started_at,
            finished_at=now(),
            duration_s=round(time.monotonic() - start, 6),
        )

    def _run_agent(
        self, work_dir: Path, agent: AgentFunction, context: AgentContext, limit: float | None, isolation: Isolation
    ) -> Outcome | StagingError:
        """Stage the data and run the agent in ``work_dir``: its outcome, or why staging failed."""
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
            return exc
        if staged:
            (work_dir / "data").chmod(0o555)  # nothing may be added to or removed from the inputs
        prompt = build_prompt(self.eval.task, work_dir, [node.path for node in staged])
        return run_agent_isolated(
            lambda: call_agent(agent, prompt, work_dir, context),
            timeout=limit,
            isolation=isolation,
            log_path=work_dir / "agent_stdout.log",
        )


def _done_with(agent: AgentFunction, ran: Outcome | StagingError) -> bool:
    """Whether nothing the agent started can still use its work folder, which may then serve
    the next unit: only agents that say so (``leaves_nothing_running = True``: rayeval's
    in-process agents), and not after a timeout (an inline agent's thread may still run).
    A process an agent leaves behind could otherwise write into another unit's folder."""
    timed_out = isinstance(ran, Outcome) and ran.kind == "timeout"
    return bool(getattr(agent, "leaves_nothing_running", False)) and not timed_out


def _find_answer(outcome: Outcome, work_dir: Path, listing: Listing) -> dict:
    fields: dict = {"agent_s": round(outcome.seconds, 6)}
    if outcome.kind == "timeout":
        return {**fields, "outcome": "timeout", "error_type": outcome.error_type, "error_message": outcome.error_message}
    if outcome.kind in ("raised", "crashed"):
        message = outcome.error_message or ""
        if outcome.traceback:
            message = f"{message}\n{outcome.traceback}".strip()
        return {**fields, "outcome": "error", "error_type": outcome.error_type, "error_message": message}
    found = find_answer(outcome.value, work_dir, listing)
    fields.update(answer=found.answer, answer_source=found.source, metadata=found.metadata)
    if found.found:
        return {**fields, "outcome": "answered"}
    details = found.metadata.get("error_details")
    detail = details.get("error") if isinstance(details, dict) else None
    message = "; ".join(text for text in (found.problem, detail) if text)
    return {**fields, "outcome": "no_answer", "error_type": "NoAnswer", "error_message": message}
