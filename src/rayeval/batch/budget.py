"""A run's budget (``--max-cost``): what its model calls cost, counted over the cluster.

One Ray actor per run holds the spend: the cost of the rows already stored (a resumed run
starts from there) plus what every worker's gateway relays. Each worker keeps a view of it
(:class:`BudgetView`) that its gateway asks before each call (the run's spend as last seen,
plus what this worker relayed since) and tells after each call; a thread sends the worker's
spend and reads the run's four times a second. No unit starts once the budget is spent, and
the gateway refuses the calls of the units still running: the run overshoots by at most the
calls already under way."""

from __future__ import annotations

import threading

import ray

from .._messages import option, options
from ..errors import RayevalError
from ..storage import ResultStore
from ..storage.spend import run_spend

#: seconds between a worker's reports of its spend (and reads of the run's)
SYNC_S = 0.25


class BudgetSpent(RayevalError):
    """The run's ``--max-cost`` is spent: no unit started after, and the units that ran had
    their calls refused from then on; the run is resumable, and its resume runs both again."""

    def __init__(self, run_id: str, max_cost_usd: float, spent_usd: float, left: int, refused: int = 0):
        cut = f" and {refused} had model calls refused (limit_reached: run_cost)" if refused else ""
        super().__init__(
            f"run {run_id} stopped: its budget of ${max_cost_usd:g} is spent (${spent_usd:.4f}); {left} units did not "
            f"run{cut}. The same run with {options(('--resume', True), ('--run-id', run_id))} and a higher "
            f"{option('--max-cost')} runs them."
        )
        self.run_id = run_id
        self.left = left
        self.refused = refused


@ray.remote(num_cpus=0)
class _Spend:
    """The run's spend in USD."""

    def __init__(self, spent: float) -> None:
        self.spent = spent

    def add(self, usd: float) -> float:
        self.spent += usd
        return self.spent


def _name(run_id: str) -> str:
    return f"rayeval-budget-{run_id}"


def open_budget(run_id: str, spent_usd: float) -> ray.actor.ActorHandle:
    """The run's spend, starting at ``spent_usd`` (its stored rows'), by name for its workers."""
    return _Spend.options(name=_name(run_id), get_if_exists=False).remote(spent_usd)  # type: ignore[attr-defined]


class BudgetView:
    """A process's view of its run's budget (the gateway's ``RunBudget``); thread-safe."""

    def __init__(self, run_id: str, max_cost_usd: float) -> None:
        self.max_cost_usd = max_cost_usd
        self._spend = ray.get_actor(_name(run_id))
        self._lock = threading.Lock()
        self._one_send = threading.Lock()  # the sync thread's and spent()'s sends, one at a time
        self._unsent = 0.0
        #: what a send under way carries: counted as spent until the run's reply includes it
        self._sending = 0.0
        self._seen = 0.0
        self._closed = threading.Event()
        # the run's spend as it is now: a view starting from nothing would let a resumed run
        # whose stored rows spent its budget start units until its first report
        self._send()
        threading.Thread(target=self._sync, name="rayeval-budget", daemon=True).start()

    def close(self) -> None:
        """Stop reporting (before Ray shuts down: a call after would start a Ray of its own)."""
        self._closed.set()

    def spent_out(self) -> bool:
        with self._lock:
            return self._seen + self._sending + self._unsent >= self.max_cost_usd

    def charge(self, usd: float) -> None:
        with self._lock:
            self._unsent += usd

    def spent(self) -> float:
        """The run's spend now (this process's included)."""
        self._send()
        return self._seen

    def _send(self) -> None:
        if self._closed.is_set() or not ray.is_initialized():
            return
        with self._one_send:
            self._send_unsent()

    def _send_unsent(self) -> None:
        with self._lock:
            self._sending, self._unsent = self._unsent, 0.0
        try:
            seen = ray.get(self._spend.add.remote(self._sending), timeout=30)
        except Exception:  # noqa: BLE001 - the run is ending (its actor gone): keep the count here
            with self._lock:
                self._unsent += self._sending
                self._sending = 0.0
            return
        with self._lock:
            self._seen, self._sending = max(self._seen, seen), 0.0

    def _sync(self) -> None:
        while not self._closed.wait(SYNC_S):
            self._send()


_views: dict[str, BudgetView] = {}
_views_lock = threading.Lock()


def budget_view(run_id: str, max_cost_usd: float) -> BudgetView:
    """A worker's view of run ``run_id``'s budget, made on its first unit (a worker serves one
    run)."""
    with _views_lock:
        view = _views.get(run_id)
        if view is None:
            view = _views[run_id] = BudgetView(run_id, max_cost_usd)
        return view


def stored_spend(store: ResultStore, run_id: str) -> float:
    """What run ``run_id``'s stored rows cost (every attempt's, those each row lists as retried
    included: :func:`rayeval.storage.spend.run_spend`): where a resumed run's budget starts."""
    return run_spend(store.read_table(run_id, columns=["cost_usd", "metadata_json"]))
