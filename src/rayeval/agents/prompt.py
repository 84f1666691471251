"""The ``prompt`` agent: sends the eval's task to the unit's model and answers with its reply.

It sends the task (and, with ``system``, a system message first), asking for the answer in
``<EVAL_ANSWER>`` tags; the work folder, which the model cannot use, is not mentioned.

``rayeval run evals --agent prompt --models openai/gpt-4o,anthropic/claude-sonnet-4-5``.
Options (``--agent-arg``): see :class:`PromptOptions`. The unit's seed is sent as the
model's ``seed`` (unless ``seed`` is set), so the trials of an eval are distinct requests:
distinct cache entries, and independent samples where the provider honours seeds.

Where it runs: in the worker's own process (rows say ``isolation = inline``), whatever the
run's ``--isolation``. It executes nothing the model writes (the reply is text, searched for
``<EVAL_ANSWER>`` by the harness's own parser), and it needs what a sandboxed unit must not
have: the worker's Ray connection (the request limit shared by the run's workers) and the
response cache's storage. Its call goes through the model gateway as any unit's does (the
unit's token, not the provider's key): the row's tokens, cost and call count are the
gateway's, the unit's limits and the run's budget apply, and its transcript is kept.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .._json import TooManyValues
from ..models import ModelError
from ..models.calls import PromptOptions, generate_output, prompt_model, reply_metadata
from ..models.failures import provider_failure
from ..models.providers import CallFailed
from ..models.retry import retry_after_s
from ..models.types import ChatMessage, ModelOutput
from ..unit.answers import CLOSE_TAG, OPEN_TAG, answer_envelope, extract_tagged
from ..unit.context import MIB, AgentContext, UnitResources
from ..unit.prompt import task_of
from ..unit.run_summary import refusal_status, run_summary
from ._refusal import reply_refusal, write_verdict

#: After the task, in place of the file-based conventions of agents that have a work folder.
ANSWER_INSTRUCTION = f"\n\nEnd your reply with {OPEN_TAG}{{...}}{CLOSE_TAG} holding your answer, in the format above."


def prompt_agent(task_prompt: str, work_dir: Path, context: AgentContext) -> dict[str, Any]:
    model, options = prompt_model(context.model, context.args)
    if context.relay is not None:  # its calls counted, limited and recorded by the run's gateway
        model = model.through(context.relay.base_url, context.relay.token)
    # the task alone (the same for every unit of the eval, so cached replies serve any run)
    messages = [ChatMessage(role="user", content=task_of(task_prompt) + ANSWER_INSTRUCTION)]
    started = time.monotonic()
    try:
        output = generate_output(model, options, messages, context.seed)
    except ModelError as exc:
        if exc.call is None:
            raise
        return answer_envelope(None, _failed_call(model.name, exc, exc.call), work_dir)
    metadata = reply_metadata(output)
    refusal = reply_refusal(model.provider.sdk, output.stop_reason, output.text, output.refusal)
    if refusal is not None:
        metadata["refusal"] = refusal.as_dict()
        write_verdict(work_dir, refusal)
    metadata["run_summary"] = _run_summary(output, options, time.monotonic() - started, refusal is not None)
    try:
        answer = extract_tagged(output.text)
    except TooManyValues as exc:
        answer, metadata["error_details"] = (
            None,
            {"error": f"the model's {OPEN_TAG} answer is too large to read: {exc}"},
        )
    else:
        if answer is None:
            metadata["error_details"] = {"error": f"the model's reply holds no {OPEN_TAG}{{json}}{CLOSE_TAG}"}
    return answer_envelope(answer, metadata, work_dir)


def _failed_call(model: str, error: ModelError, call: CallFailed) -> dict[str, Any]:
    """The metadata of a call the provider failed after the model layer's retries: a
    ``ProviderError`` row's (see :func:`rayeval.unit.runner.provider_failure_details`)."""
    failure = provider_failure(call.status, call.message, retry_after_s(call.headers))
    retries = max(error.attempts - 1, 0)
    details = {"error": str(error), **failure.as_dict(), "provider_retry_count": retries, "provider_retry_wait_s": None}
    return {
        "harness": "prompt",
        "model": model,
        "attempts": error.attempts,
        "key_fallback_count": error.key_fallbacks,
        "error_details": details,
    }


def _run_summary(output: ModelOutput, options: PromptOptions, seconds: float, refused: bool) -> dict:
    """One model call: one turn, no steps; the cost from rayeval's price table (or the
    ``prices`` file), 0 for a cached reply."""
    source = "response_cache" if output.cached else "configured_prices" if options.prices else "rayeval_price_table"
    return run_summary(
        duration_s=seconds,
        n_turns=1,
        n_steps=0,
        usage={"input_tokens": output.input_tokens, "output_tokens": output.output_tokens},
        cost_usd=output.cost_usd,
        cost_source=source,
        refusal=refusal_status(True, refused),
    )


prompt_agent.needs_data = False  # type: ignore[attr-defined]
# it waits on the model's reply (in the worker, no sandbox): a hundredth of a CPU
prompt_agent.resources = UnitResources(cpus=0.01, memory=16 * MIB)  # type: ignore[attr-defined]
prompt_agent.runs_in_worker = True  # type: ignore[attr-defined]
