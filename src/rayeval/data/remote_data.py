"""Before a run: every remote data node (``s3://``, ``http(s)://``) of its evals is there.

One request per distinct node (a HEAD; an S3 prefix: a listing of one key), at most
:data:`AT_ONCE` at a time, from this machine, with the S3 client staging uses (the same
endpoint: ``--s3-endpoint`` or ``AWS_ENDPOINT_URL``, and credentials).  A missing object then
stops the run before any unit, instead of making every unit that stages it an error row.
Nodes of resolver schemes (``latch://``) are not checked: their resolvers run where the units
run, and resolving one downloads it.  Local nodes are checked when the evals load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from ..evals import Eval
from ..evals.loader import EvalProblem
from .fetch import FetchError, check_http, check_s3, s3_client

#: requests in flight at once
AT_ONCE = 16
#: seconds a check waits for an answer (S3: per try, two tries)
CHECK_TIMEOUT_S = 15.0
SKIP_HINT = "--no-check-data (Python: check_data=False) skips this check"


def remote_data_problems(evals: Sequence[Eval], *, s3_endpoint_url: str | None = None) -> list[EvalProblem]:
    """One problem per eval file and field naming a remote data node that is not there (or
    cannot be reached from here), saying why and what to do."""
    fields: dict[str, list[tuple[str, str]]] = {}  # node -> (file, field) naming it
    for eval_ in evals:
        for index, node in enumerate(eval_.data_nodes):
            if urlsplit(node).scheme in ("s3", "http", "https"):
                field = "data_node" if isinstance(eval_.data_node, str) else f"data_node[{index}]"
                where = str(eval_.source_path) if eval_.source_path else f"<eval {eval_.id}>"
                fields.setdefault(node, []).append((where, field))
    if not fields:
        return []
    check = _checker(any(node.startswith("s3://") for node in fields), s3_endpoint_url)
    with ThreadPoolExecutor(max_workers=min(AT_ONCE, len(fields)), thread_name_prefix="data-check") as pool:
        found = dict(zip(fields, pool.map(check, fields)))
    return [
        EvalProblem(where, field, f"remote data node {node!r}: {problem}")
        for node, problem in found.items()
        if problem is not None
        for where, field in fields[node]
    ]


def _checker(s3: bool, endpoint_url: str | None) -> Callable[[str], str | None]:
    """``check(node)``: why the node is not there, with the fix, or None.  One S3 client for
    every check (boto3 clients are thread-safe)."""
    client = s3_client(endpoint_url, CHECK_TIMEOUT_S) if s3 else None

    def check(node: str) -> str | None:
        try:
            if node.startswith("s3://"):
                check_s3(node, client)
            else:
                check_http(node, CHECK_TIMEOUT_S)
        except FetchError as exc:
            if node.startswith("s3://"):
                return (
                    f"{exc}: correct the URI, or the S3 endpoint (--s3-endpoint or AWS_ENDPOINT_URL) and "
                    f"credentials this machine uses; {SKIP_HINT}"
                )
            return f"{exc}: correct the URL; {SKIP_HINT}"
        return None

    return check
