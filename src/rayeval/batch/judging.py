"""The judge calls of a run's LLM-judged graders, made apart from the agents: a unit whose agent
has run comes back with its calls (JudgeWork) and frees its slot; a judge actor makes the calls,
at most ``--judge-concurrency`` at once, each retried on its own (the model layer's retries, then
Ray's if the actor dies); once all of a unit's outcomes are in, the unit is graded."""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import ray

from ..graders.judging import FailureKind, Judgments, judge_call, unmade_judge_call
from ..unit.result import EvalResult
from .plan import Unit
from .worker import JudgeWork


class JudgeWorker:
    """Makes judge calls on its threads: they wait on the judge model, not on CPU. It runs in a
    Ray worker process, with the node's environment (the judge's API key), never in the
    agent's sandbox or the credential-free grading process."""

    def __init__(self) -> None:
        # the providers' SDKs load while the first agents run (the judge's code came with this module)
        import anthropic  # noqa: F401
        import openai  # noqa: F401

    def judge(self, request: dict[str, Any]) -> dict[str, Any]:
        return judge_call(request)


@dataclass
class JudgedUnit:
    """A unit waiting on its judge calls; ``outcomes`` fill in as they come back."""

    unit: Unit
    attempt: int
    execution: EvalResult
    outcomes: Judgments
    left: int


@dataclass
class JudgeCalls:
    concurrency: int
    waiting: deque[tuple[int, str, int, dict[str, Any]]] = field(default_factory=deque)
    in_flight: dict[Any, tuple[int, str, int, dict[str, Any]]] = field(default_factory=dict)
    units: dict[int, JudgedUnit] = field(default_factory=dict)
    _tokens: itertools.count = field(default_factory=itertools.count)
    _actor: Any = None

    def add(self, unit: Unit, attempt: int, work: JudgeWork) -> None:
        token = next(self._tokens)
        outcomes: Judgments = {key: [{} for _ in requests] for key, requests in work.requests.items()}
        left = sum(len(requests) for requests in work.requests.values())
        self.units[token] = JudgedUnit(unit, attempt, work.execution, outcomes, left)
        for key, requests in work.requests.items():
            self.waiting.extend((token, key, index, request) for index, request in enumerate(requests))

    def start(self) -> None:
        """Start the judge actor now (a run whose evals have LLM-judged graders): it is up by
        the time the first unit's agent has run."""
        self._judge_actor()

    def submit(self) -> None:
        """Send waiting calls to the judge actor, within the concurrency."""
        while self.waiting and len(self.in_flight) < self.concurrency:
            call = self.waiting.popleft()
            self.in_flight[self._judge_actor().judge.remote(call[3])] = call

    def finished(self, ref: Any) -> JudgedUnit | None:
        """Note the outcome behind ``ref``; returns its unit once all of its outcomes are in."""
        token, key, index, request = self.in_flight.pop(ref)
        try:
            outcome = ray.get(ref)
        except ray.exceptions.RayError as exc:  # a judge failure, not a lost unit
            message = f"the judge call could not be made: {str(exc).strip()[:500]}"
            # the actor kept dying: out of reach; the call raised: the request (the answer in
            # it) may be why, so no excuse
            kind: FailureKind = "fatal" if isinstance(exc, ray.exceptions.RayTaskError) else "transient"
            outcome = unmade_judge_call(request, message, kind)
        judged = self.units[token]
        judged.outcomes[key][index] = outcome
        judged.left -= 1
        return self.units.pop(token) if judged.left == 0 else None

    @property
    def busy(self) -> bool:
        return bool(self.units)

    def _judge_actor(self) -> Any:
        """The run's judge actor, asking Ray for no CPU: it waits on judge models, and the units'
        workers may hold every CPU (a worker's share is sized to fill a node), where an actor
        that asked for any would never start, and the run would wait on it for ever."""
        if self._actor is None:
            self._actor = (
                ray.remote(JudgeWorker)
                .options(num_cpus=0, max_concurrency=self.concurrency, max_restarts=-1, max_task_retries=3)
                .remote()
            )
        return self._actor
