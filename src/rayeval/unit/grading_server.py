"""A grading subprocess of :mod:`rayeval.unit.grading_pool`: ``python -m rayeval.unit.grading_server MAX_REQUEST_BYTES``.

It reads one JSON request per line on stdin and writes one JSON reply per line on stdout (the
protocol is described in ``pool``), one at a time, until stdin closes or its parent is
gone. Its caller bounds each grading by killing it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import BinaryIO

from ..evals.model import GraderSpec
from .grading import collect_judge_requests, grade_with_outcomes
from .grading_pool import READY, RESULT_FIELDS, decode_line, encode_line

_DISCARD_CHUNK = 1 << 20
_ORPHAN_CHECK_S = 1.0

Specs = dict[str, tuple[list[GraderSpec], bool]]


def handle(line: bytes, specs_by_eval: Specs) -> bytes:
    """The reply line to one request line: the GraderResult's fields (with ``judgments``: the
    outcomes of its LLM-judged graders' calls), the judge requests (``collect``), or an error."""
    try:
        request = decode_line(line)
        key = request["eval"]
        if "specs" in request:
            specs_by_eval[key] = (
                [GraderSpec.model_validate(spec) for spec in request["specs"]],
                bool(request["single"]),
            )
        specs, single = specs_by_eval[key]
        if request.get("collect"):  # the judge calls of LLM-judged graders, none made
            return encode_line({"requests": collect_judge_requests(specs, request["answer"], single=single)})
        result = grade_with_outcomes(specs, request["answer"], single=single, judgments=request.get("judgments"))
        return encode_line({"result": {name: getattr(result, name) for name in RESULT_FIELDS}})
    except Exception as exc:  # noqa: BLE001 - whatever went wrong is the caller's to report
        return encode_line({"error": f"{type(exc).__name__}: {exc}"})


def serve(stdin: BinaryIO, stdout: BinaryIO, max_request_bytes: int) -> None:
    """Answer requests until stdin ends; a request longer than ``max_request_bytes`` is read
    past in chunks, never held whole, and answered with an error."""
    specs_by_eval: Specs = {}
    stdout.write(READY)
    stdout.flush()
    while line := stdin.readline(max_request_bytes + 1):
        if line.endswith(b"\n"):
            reply = handle(line, specs_by_eval)
        elif len(line) <= max_request_bytes:
            return  # the caller went away mid-request
        else:
            while (rest := stdin.readline(_DISCARD_CHUNK)) and not rest.endswith(b"\n"):
                pass
            reply = encode_line({"error": f"the request is over the grading limit of {max_request_bytes} bytes"})
        stdout.write(reply)
        stdout.flush()


def _exit_when_orphaned(parent: int) -> None:
    """End this process once its parent is gone: a grading that runs long (the reason the
    caller kills it) would otherwise go on after its caller was killed without notice."""
    while os.getppid() == parent:
        time.sleep(_ORPHAN_CHECK_S)
    os._exit(1)


def main(argv: list[str]) -> None:
    max_request_bytes = int(argv[0])
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    # The replies keep stdout's pipe to themselves: anything a grader prints goes to stderr.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        serve(sys.stdin.buffer, replies, max_request_bytes)
    except BrokenPipeError:  # the caller is gone
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
