"""What resuming a session in place saves on a provider's storm (issue 27), against running the
unit again from the start: the real Claude Code against the scripted model server.

The session has --turns scripted turns (shell commands, then a final message); after
--storm-after of them the server answers 529 (``retry-after: 0``) to the next --storm requests; every request is answered after --delay seconds (a model's latency).
Claude Code retries each call twice itself (``CLAUDE_CODE_MAX_RETRIES=2``: three requests per
failed run), so a storm of 6 ends two runs.

  (a) resume: ``provider_wait_s`` default; the session resumes with ``--resume`` after each
      failed run (waits: the policy's floor, 1 s then 2 s, with ``provider_jitter_s=0``);
  (b) re-run: ``provider_wait_s=0`` (never resume); each failed run is run again from the start
      in a fresh work folder after the same waits, as a run's ``--retries`` would.

For each: model turns served, tokens the server billed (input/output), seconds, runs.

Usage: python scripts/bench_resume.py [--turns 8] [--storm-after 6] [--storm 6] [--delay 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rayeval.agents import claude_code
from rayeval.agents._recovery import provider_failure, resume_wait_s
from tests.agents.fake_model_server import FakeModelServer

PROMPT = "Run the commands you are given, then write the answer to eval_answer.json."


def _script(turns: int) -> list[dict[str, str]]:
    steps = [{"command": f"echo step-{i}"} for i in range(turns - 2)]
    return [*steps, {"command": "echo '{\"answer\": 42}' > eval_answer.json"}, {"text": "Done."}]


def _measure(args: argparse.Namespace, *, resume: bool) -> dict[str, Any]:
    with FakeModelServer(script=_script(args.turns), delay_s=args.delay) as server:
        os.environ["HTTPS_PROXY"] = server.url  # anything but loopback is refused by the server
        server.fail(529, args.storm, retry_after="0", after_turns=args.storm_after)
        options = {"base_url": server.url, "timeout": 300, "provider_jitter_s": 0}
        start = time.monotonic()
        runs, answer = 0, None
        while answer is None and runs < 10:
            if runs:  # a re-run waits as a resume would
                time.sleep(resume_wait_s(provider_failure(529, "", 0.0), runs, 0.0))
            work_dir = Path(tempfile.mkdtemp(prefix="bench-resume-"))
            out = claude_code("claude-sonnet-4-5", provider_wait_s=1800 if resume else 0, **options)(PROMPT, work_dir)
            runs += 1 + out["metadata"]["provider_retry_count"]
            answer = out["answer"]
        seconds = time.monotonic() - start
        tokens_in, tokens_out = server.total_usage("anthropic")
        return {
            "turns": len(server.scripted_replies("anthropic")),
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "seconds": round(seconds, 1),
            "runs": runs,
            "answered": answer is not None,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--storm-after", type=int, default=6)
    parser.add_argument("--storm", type=int, default=6)
    parser.add_argument("--delay", type=float, default=2.0, help="seconds the server takes per model request")
    args = parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "sk-bench-not-a-key")
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"
    os.environ.pop("ANTHROPIC_API_KEY_FALLBACKS", None)
    print(f"{args.turns} turns, a storm of {args.storm} 529s after turn {args.storm_after}, {args.delay} s a request")
    print(f"{'':8} {'turns':>5} {'tokens in':>10} {'tokens out':>10} {'seconds':>8} {'runs':>5} answered")
    for name, resume in (("resume", True), ("re-run", False)):
        r = _measure(args, resume=resume)
        row = f"{r['turns']:>5} {r['tokens_in']:>10} {r['tokens_out']:>10} {r['seconds']:>8} {r['runs']:>5}"
        print(f"{name:8} {row} {r['answered']}")


if __name__ == "__main__":
    main()
