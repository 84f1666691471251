"""How a unit's row names its model and harness: from the run's configuration, the same for
every unit of a model (errors included), never from what the agent reports about itself."""

from __future__ import annotations

from collections.abc import Mapping


def row_labels(agent: str, model: str, agent_args: Mapping[str, str]) -> tuple[str, str]:
    """``(model, harness)`` of the rows of ``agent`` run with ``model``.

    The replay agent's ``model@harness`` names a recorded model and harness (a model recorded
    with one harness may omit it); every other agent's rows carry the model as given (a
    ``@`` in it, as in Vertex AI's ``claude-sonnet-4@20250514``, is part of the name) and the
    agent's name as their harness.
    """
    if agent == "replay":
        from .replay import recorded_harness

        name, _, harness = model.partition("@")
        return name, harness or recorded_harness(agent_args.get("trials"), name) or agent
    return model, agent
