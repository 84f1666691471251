"""The one price table prices every model the built-in programs are pinned to run, as the
reference runner (latch-eval-tools 0.4.54) does: Codex's current OpenAI models, pi's Anthropic
models and every model of pi's registry; Codex prices its runs from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayeval.agents import codex
from rayeval.agents._base import AgentConfigError
from rayeval.agents.pi import known_models
from rayeval.models.prices import find_price, shipped_prices

CODEX_MODELS = ("openai/gpt-5.4", "openai/gpt-5.5", "openai/gpt-6-astra", "openai/gpt-5.1-codex")
PI_MODELS = ("anthropic/claude-opus-4-7", "anthropic/claude-opus-4-8", "anthropic/claude-melon-lp-eap")


@pytest.mark.parametrize("name", [*CODEX_MODELS, *PI_MODELS, *known_models()])
def test_every_pinned_model_has_a_price(name: str) -> None:
    price = find_price(shipped_prices(), name)
    assert price is not None and price.input > 0 and price.output > 0 and price.cache_read is not None


def test_codex_prices_its_runs_from_the_table_with_cached_input_apart(tmp_path: Path) -> None:
    """A turn of 1,000 input tokens (400 of them cached) and 100 output tokens on gpt-5.5:
    600 x $5 + 400 x $0.50 + 100 x $30 per million; a model the table lacks has no cost."""
    events = [
        {"type": "thread.started", "thread_id": "t-1"},
        {"type": "turn.completed", "usage": {"input_tokens": 1000, "cached_input_tokens": 400, "output_tokens": 100}},
    ]
    summary = codex("openai/gpt-5.5").summarize(events, tmp_path, tmp_path)
    assert summary.cost_usd == pytest.approx((600 * 5.0 + 400 * 0.5 + 100 * 30.0) / 1e6)
    assert summary.cost_source == "rayeval_price_table"
    assert codex("gpt-unheard-of").summarize(events, tmp_path, tmp_path).cost_usd is None


@pytest.mark.parametrize("prices", [(-1.0, 0.5, 2.0), (1.0, 2.0), "1,2,3"])
def test_codex_refuses_prices_that_are_not_three_prices(prices: object) -> None:
    with pytest.raises(AgentConfigError, match="prices must be three USD prices per million tokens"):
        codex("gpt-5.5", prices=prices)
