"""The provider recovery's pure parts: the wait policy, the options and fallback keys it takes
(refused at a run's start, exit 2), its decisions, and how the trusted side reads its report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rayeval.agents._recovery import MAX_WAIT_S, Recovery, resume_wait_s
from rayeval.agents.claude_code import claude_code
from rayeval.agents.resolve import AgentArgsError, check_agent_args
from rayeval.batch.queue import unit_retry_delay
from rayeval.cli import main
from rayeval.models.failures import ProviderFailure, fallback_keys, provider_failure
from rayeval.record import PROVIDER_ERROR
from rayeval.unit.runner import provider_failure_details

REPO = Path(__file__).resolve().parents[2]


def low(a: float, b: float) -> float:
    return a


def high(a: float, b: float) -> float:
    return b


def test_a_hint_is_waited_with_up_to_the_jitter_on_top() -> None:
    hinted = provider_failure(529, "overloaded", 12.0)
    assert resume_wait_s(hinted, 1, 5.0, low) == 12.0
    assert resume_wait_s(hinted, 1, 5.0, high) == 17.0
    assert resume_wait_s(hinted, 1, 0.0, high) == 12.0


@pytest.mark.parametrize(("status", "least", "most"), [(429, 60, 75), (529, 60, 75), (503, 5, 10), (408, 5, 10)])
def test_without_a_hint_capacity_waits_a_minute_and_others_seconds(status: int, least: float, most: float) -> None:
    failure = provider_failure(status, "")
    assert (resume_wait_s(failure, 1, 5.0, low), resume_wait_s(failure, 1, 5.0, high)) == (least, most)


def test_consecutive_failures_double_the_wait_up_to_the_cap_never_below_the_hint() -> None:
    failure = provider_failure(503, "")
    assert [resume_wait_s(failure, n, 5.0, low) for n in (1, 2, 3, 4, 5, 6, 7)] == [5, 10, 20, 40, 80, 160, MAX_WAIT_S]
    assert resume_wait_s(failure, 50, 5.0, low) == MAX_WAIT_S
    slow = provider_failure(429, "", 900.0)  # the cap bounds our backoff, not the provider's wait
    assert resume_wait_s(slow, 3, 5.0, high) == 900.0


def test_a_zero_hint_still_waits_a_second_and_doubles() -> None:
    failure = provider_failure(529, "", 0.0)
    assert [resume_wait_s(failure, n, 0.0) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]


def test_recovery_resumes_within_the_budget_then_stops() -> None:
    recovery = Recovery(wait_budget_s=3.5, jitter_s=0.0)
    failure = provider_failure(529, "overloaded", 0.0)
    steps = [recovery.next_step(failure, False, True) for _ in range(3)]
    assert [step.wait_s if step else None for step in steps] == [1.0, 2.0, None]
    assert recovery.stop_reason == "wait_budget_exhausted" and recovery.resumes == 2


def test_recovery_waits_are_counted_and_a_model_turn_resets_the_doubling() -> None:
    recovery = Recovery(jitter_s=0.0)
    failure = provider_failure(529, "", 0.0)
    first = recovery.next_step(failure, False, True)
    assert first is not None
    recovery.waited(first.wait_s)
    second = recovery.next_step(failure, False, True)
    third = recovery.next_step(failure, True, True)  # a completed turn in between
    assert (first.wait_s, second and second.wait_s, third and third.wait_s) == (1.0, 2.0, 1.0)
    assert recovery.metadata() == {"provider_retry_count": 3, "provider_retry_wait_s": 1.0, "key_fallback_count": 0}


@pytest.mark.parametrize(
    ("failure", "resumable", "deadline", "reason"),
    [
        (provider_failure(400, "bad request"), True, None, "not_retryable"),
        (provider_failure(401, "invalid x-api-key"), True, None, "not_retryable"),  # no spare key
        (provider_failure(529, ""), False, None, "missing_session"),
        (provider_failure(503, "", 30.0), True, 10.0, "run_deadline"),
    ],
)
def test_recovery_stops_with_its_reason(
    failure: ProviderFailure, resumable: bool, deadline: float | None, reason: str
) -> None:
    import time

    recovery = Recovery(jitter_s=0.0, deadline=None if deadline is None else time.monotonic() + deadline)
    assert recovery.next_step(failure, False, resumable) is None
    assert recovery.stop_reason == reason and recovery.resumes == 0
    assert recovery.error_details()["provider_retry_stop_reason"] == reason


def test_a_rejected_key_moves_to_the_next_key_at_once() -> None:
    recovery = Recovery(spare_keys=["k2", "k3"])
    for status, message in ((401, "invalid"), (400, "Your credit balance is too low")):
        step = recovery.next_step(provider_failure(status, message), False, True)
        assert step is not None and step.wait_s == 0
    assert recovery.key_fallbacks == 2 and recovery.spare_keys == [] and recovery.resumes == 0
    assert recovery.next_step(provider_failure(403, "forbidden"), False, True) is None


@pytest.mark.parametrize("value", ["-1", "NaN", "Infinity", "-Infinity", "soon", "true", "[1]"])
def test_a_bad_wait_budget_is_refused_at_start(value: str) -> None:
    with pytest.raises(AgentArgsError, match="provider_wait_s must be a finite number of seconds >= 0"):
        check_agent_args("claude-code", {"provider_wait_s": value}, [None], environment=False)


def test_a_wait_budget_of_zero_never_resumes() -> None:
    check_agent_args("claude-code", {"provider_wait_s": "0", "provider_jitter_s": "0"}, [None], environment=False)
    agent = claude_code(provider_wait_s=0)
    recovery = Recovery(wait_budget_s=agent.provider_wait_s, jitter_s=0.0)
    assert recovery.next_step(provider_failure(529, "", 0.0), False, True) is None
    assert recovery.stop_reason == "wait_budget_exhausted"


SECRET = "sk-test-FALLBACK-not-shown"


@pytest.mark.parametrize(
    "value", [f'"{SECRET}"', f'["{SECRET}", ""]', f'["{SECRET}", 3]', f"{SECRET}", f'{{"a": "{SECRET}"}}']
)
def test_bad_fallback_keys_are_refused_without_showing_them(value: str) -> None:
    with pytest.raises(ValueError, match="must be a JSON list of non-empty strings") as caught:
        fallback_keys("ANTHROPIC_API_KEY_FALLBACKS", value)
    assert SECRET not in str(caught.value)
    assert fallback_keys("X", f'["{SECRET}", "k2"]') == [SECRET, "k2"]
    assert fallback_keys("X", None) == [] and fallback_keys("X", " ") == []


def test_a_run_with_bad_fallback_keys_or_wait_budget_exits_2_before_any_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-primary")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    run = ["run", str(REPO / "evals"), "--agent", "claude-code", "--output", str(tmp_path / "out"), "--no-progress"]
    monkeypatch.setenv("ANTHROPIC_API_KEY_FALLBACKS", f'["{SECRET}", ""]')
    assert main(run) == 2
    err = capsys.readouterr().err
    assert "ANTHROPIC_API_KEY_FALLBACKS must be a JSON list of non-empty strings" in err and SECRET not in err
    monkeypatch.setenv("ANTHROPIC_API_KEY_FALLBACKS", f'["{SECRET}"]')
    assert main([*run, "--agent-arg", "provider_wait_s=NaN"]) == 2
    assert "provider_wait_s must be a finite number of seconds >= 0, got nan" in capsys.readouterr().err
    monkeypatch.setenv("ANTHROPIC_KEY_FALLBACK_ON", "refusals")
    assert main(run) == 2
    assert "ANTHROPIC_KEY_FALLBACK_ON must be one of rejected_key, refusal, both, got 'refusals'" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


def test_the_trusted_side_checks_what_an_agent_reports_of_its_provider() -> None:
    report = {"error": "no answer", "status": 529, "code": "overloaded", "message": "x" * 900,
              "retry_after_s": 2, "provider_retry_count": 3, "provider_retry_wait_s": 7.5}  # fmt: skip
    checked = provider_failure_details(report)
    assert checked == {"status": 529, "code": "overloaded", "message": "x" * 500, "retry_after_s": 2.0,
                       "provider_retry_count": 3, "provider_retry_wait_s": 7.5}  # fmt: skip
    assert provider_failure_details({**report, "retry_after_s": math.inf, "provider_retry_count": -1}) == {
        **checked,
        "retry_after_s": None,
        "provider_retry_count": None,
    }
    for bad in ({**report, "code": "whatever"}, {**report, "status": "529"}, {**report, "status": 999}, {"error": "x"}):
        assert provider_failure_details(bad) is None
    assert provider_failure_details({"code": "connection_error", "status": None})["status"] is None  # type: ignore[index]


class _Row:
    def __init__(self, details: dict, error_type: str = PROVIDER_ERROR) -> None:
        self.error_type = error_type
        self.metadata_json = json.dumps({"error_details": details})


def test_retries_rerun_a_provider_error_only_when_its_status_is_retryable_and_not_before_its_hint() -> None:
    assert unit_retry_delay(_Row({"status": 401, "code": "http_401"}), 1, 1.0) is None  # type: ignore[arg-type]
    assert unit_retry_delay(_Row({"status": 400, "code": "http_400"}), 1, 1.0) is None  # type: ignore[arg-type]
    # a rate limit the unit's own requests may bring on: a rerun would be the agent's to buy
    assert unit_retry_delay(_Row({"status": 429, "code": "rate_limit"}), 1, 1.0) is None  # type: ignore[arg-type]
    delay = unit_retry_delay(_Row({"status": 529, "code": "overloaded", "retry_after_s": 40.0}), 1, 1.0)  # type: ignore[arg-type]
    assert delay == 40.0
    short = unit_retry_delay(_Row({"status": 503, "code": "server_error"}), 1, 1.0)  # type: ignore[arg-type]
    assert short is not None and 0.5 <= short <= 1.5


def test_retries_rerun_what_the_trusted_side_saw_fail_and_never_an_agents_own_error() -> None:
    """A unit Ray or the runner could not run may pass on a second try; an agent's own error
    (a raised exception, an answer too large: no ``seen_by``, which the harness drops from
    what an agent writes) would not."""
    for who in ("ray", "runner"):
        delay = unit_retry_delay(_Row({"seen_by": who}, "WorkerCrashedError"), 2, 1.0)  # type: ignore[arg-type]
        assert delay is not None and 1.0 <= delay <= 3.0
    for error_type, details in (("RuntimeError", {}), ("AnswerTooLarge", {"error": "x"}), ("X", {"seen_by": "agent"})):
        assert unit_retry_delay(_Row(details, error_type), 1, 1.0) is None  # type: ignore[arg-type]
