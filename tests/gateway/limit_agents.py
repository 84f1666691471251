"""Agents that call their model through the gateway (see test_limits.py, test_replies_cut_short.py,
test_model_pin.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic


def call_until_refused(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """Calls (at most 20 times) until a call is refused, then answers."""
    client = anthropic.Anthropic(max_retries=0)
    made, refusal = 0, None
    for _ in range(20):
        try:
            client.messages.create(
                model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
            )
        except anthropic.APIStatusError as exc:
            refusal = f"{exc.status_code}: {exc.message}"
            break
        made += 1
    return {"answer": {"value": 1}, "metadata": {"made": made, "refused_with": refusal}}


def one_call(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """One model call (refused or not), then the answer."""
    try:
        anthropic.Anthropic(max_retries=0).messages.create(
            model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    except anthropic.APIStatusError:
        pass
    return {"answer": {"value": 1}}


def stream_once(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """One streamed call, read to its end (an error of it raised, as most agents let it be), then the answer."""
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    with anthropic.Anthropic(max_retries=0).messages.stream(
        model="claude-sonnet-4-5", max_tokens=5, messages=messages
    ) as stream:
        stream.get_final_text()
    return {"answer": {"value": 1}}


def call_a_stronger_model(task_prompt: str, work_dir: Path, context: Any) -> dict:
    """A hostile agent, run as its unit's model: it asks a stronger model first, then its own,
    and says what each call got."""
    client = anthropic.Anthropic(max_retries=0)
    asked: dict[str, str] = {}
    for model in ("claude-opus-4-1", context.model.removeprefix("anthropic/")):
        try:
            client.messages.create(model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
            asked[model] = "answered"
        except anthropic.APIStatusError as exc:
            asked[model] = f"{exc.status_code}: {exc.message}"
    return {"answer": {"value": 1}, "metadata": {"asked": asked}}
