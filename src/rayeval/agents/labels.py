"""How a unit's row names its model and harness: from the run's configuration, the same for
every unit of a model (errors included), never from what the agent reports about itself."""

from __future__ import annotations

from collections.abc import Mapping

from .resolve import BUILT_IN_AGENTS


def row_labels(agent: str, model: str, agent_args: Mapping[str, str]) -> tuple[str, str]:
    """``(model, harness)`` of the rows of ``agent`` run with ``model``: as its entry in
    :data:`~rayeval.agents.resolve.BUILT_IN_AGENTS` labels them (the replay agent's
    ``model@harness`` names a recorded model and harness); every other agent's rows carry the
    model as given (a ``@`` in it, as in Vertex AI's ``claude-sonnet-4@20250514``, is part of
    the name) and the agent's name as their harness.
    """
    built_in = BUILT_IN_AGENTS.get(agent)
    if built_in is not None and built_in.labels is not None:
        return built_in.labels(model, agent_args)
    return model, agent
