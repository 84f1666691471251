"""Data staging against real parts: local files, an HTTP server and moto's S3 server on
127.0.0.1, several OS processes sharing one cache. Nothing is fetched from the internet."""

from __future__ import annotations

import hashlib
import http.server
import json
import multiprocessing
import os
import pickle
import stat
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest

from rayeval.data import cache
from rayeval.data.cache import key_hash, remove_tree
from rayeval.data.resolvers import RESOLVERS, Resolved, register_resolver, unregister_resolver
from rayeval.data.staging import StagingError
from rayeval.data.staging import stage_data as stage_data_within
from rayeval.evals import load_evals

# These tests keep their local data in pytest's temporary folders: the data root they stage
# local nodes from, as a run stages from its evals folder. The data-root tests pass their own.
stage_data = partial(stage_data_within, data_roots=[tempfile.gettempdir()])

# --------------------------------------------------------------------------- helpers


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_sha(files: dict[str, bytes]) -> str:
    """The documented directory digest, computed independently of the implementation."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{sha(files[rel])}\n".encode())
    return h.hexdigest()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def all_entries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


@dataclass
class Route:
    body: bytes = b""
    delay: float = 0.0  # seconds before answering
    mode: str = "normal"  # "normal" | "stall" (never answers) | "trickle" (1 byte / 0.1 s) | "short"


@dataclass
class FileServer:
    """http.server on 127.0.0.1 in a thread, counting GET requests per path."""

    base: str = ""
    routes: dict[str, Route] = field(default_factory=dict)
    hits: Counter = field(default_factory=Counter)
    release: threading.Event = field(default_factory=threading.Event)

    def add(self, path: str, body: bytes = b"", **kw) -> str:
        self.routes[path] = Route(body, **kw)
        return self.base + path


@pytest.fixture
def http_files():
    server_state = FileServer()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            with lock:
                server_state.hits[path] += 1
            route = server_state.routes.get(path)
            if route is None:
                self.send_error(404, "Not Found")
                return
            if route.mode == "stall":
                server_state.release.wait(30)
                return
            time.sleep(route.delay)
            self.send_response(200)
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            try:
                if route.mode == "trickle":
                    for i in range(len(route.body)):
                        if server_state.release.is_set():
                            return
                        self.wfile.write(route.body[i : i + 1])
                        self.wfile.flush()
                        time.sleep(0.1)
                elif route.mode == "short":  # promise the whole body, send a tenth, hang up
                    self.wfile.write(route.body[: len(route.body) // 10])
                    self.close_connection = True
                else:
                    self.wfile.write(route.body)
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server_state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server_state
    server_state.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def latch():
    """Registers a test resolver for latch:// and removes it afterwards; counts calls."""
    calls: list[str] = []

    def install(mapping: dict[str, object]) -> list[str]:
        def resolve(uri: str) -> object:
            calls.append(uri)
            return mapping[uri]

        register_resolver("latch", resolve)
        return calls

    yield install
    unregister_resolver("latch")


# --------------------------------------------------------------------------- local


def test_local_relative_path_is_copied_via_cache_and_read_only(tmp_path: Path, cache_dir: Path) -> None:
    evals = tmp_path / "evals"
    src = evals / "inputs" / "pbmc.h5ad"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"cells" * 100)
    data_dir = tmp_path / "work" / "data"

    [node] = stage_data(["inputs/pbmc.h5ad"], data_dir, base_dir=evals, cache_dir=cache_dir)

    staged = data_dir / "pbmc.h5ad"
    assert node.uri == "inputs/pbmc.h5ad"
    assert node.path == "data/pbmc.h5ad"
    assert (node.kind, node.size_bytes, node.from_cache) == ("file", 500, False)
    assert node.sha256 == sha(b"cells" * 100)
    assert staged.read_bytes() == src.read_bytes()
    assert mode(staged) == 0o444 and mode(data_dir) == 0o555
    # the user's file is untouched: not linked into the work dir, still writable
    assert src.stat().st_nlink == 1 and src.stat().st_ino != staged.stat().st_ino
    assert mode(src) & 0o200


def test_file_uri_directory_keeps_layout_and_digest(tmp_path: Path, cache_dir: Path) -> None:
    files = {"a.csv": b"1,2\n", "sub/b.txt": b"bee", "sub/deeper/c.bin": bytes(range(256))}
    src = write_tree(tmp_path / "dataset", files)
    data_dir = tmp_path / "work" / "data"

    [node] = stage_data([src.as_uri()], data_dir, cache_dir=cache_dir)

    assert (node.kind, node.path, node.size_bytes) == ("directory", "data/dataset", 4 + 3 + 256)
    assert node.sha256 == tree_sha(files)
    root = data_dir / "dataset"
    for rel, data in files.items():
        assert (root / rel).read_bytes() == data
        assert mode(root / rel) == 0o444
    assert {mode(root), mode(root / "sub"), mode(root / "sub" / "deeper")} == {0o555}
    if os.geteuid() != 0:  # root ignores permission bits
        with pytest.raises(PermissionError):
            (root / "new.txt").write_text("agents cannot add files here")
    remove_tree(data_dir.parent)  # the cleanup helper copes with read-only dirs
    assert not data_dir.parent.exists()


def test_changed_local_file_is_recopied_unchanged_is_reused(tmp_path: Path, cache_dir: Path) -> None:
    src = tmp_path / "table.csv"
    src.write_text("v1\n")
    first = stage_data([str(src)], tmp_path / "w1" / "data", cache_dir=cache_dir)[0]
    again = stage_data([str(src)], tmp_path / "w2" / "data", cache_dir=cache_dir)[0]
    assert (first.from_cache, again.from_cache) == (False, True)

    src.write_text("v2 longer\n")
    os.utime(src, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns + 10**9))
    changed = stage_data([str(src)], tmp_path / "w3" / "data", cache_dir=cache_dir)[0]
    assert changed.from_cache is False
    assert changed.sha256 == sha(b"v2 longer\n")
    assert (tmp_path / "w3" / "data" / "table.csv").read_text() == "v2 longer\n"
    # the earlier work dir kept its own (old) bytes
    assert (tmp_path / "w1" / "data" / "table.csv").read_text() == "v1\n"


def test_basename_collisions_get_distinct_deterministic_names(tmp_path, cache_dir, http_files) -> None:
    one = write_tree(tmp_path / "one", {"x.tar.gz": b"first"}) / "x.tar.gz"
    two = write_tree(tmp_path / "two", {"x.tar.gz": b"second"}) / "x.tar.gz"
    url = http_files.add("/dl/x.tar.gz", b"third")
    nodes = [str(one), str(two), url, str(one)]

    staged = stage_data(nodes, tmp_path / "w" / "data", cache_dir=cache_dir)

    tag2, tag3 = sha(str(two).encode())[:8], sha(url.encode())[:8]
    expected = ["data/x.tar.gz", f"data/x-{tag2}.tar.gz", f"data/x-{tag3}.tar.gz", "data/x.tar.gz"]
    assert [n.path for n in staged] == expected
    contents = [(tmp_path / "w" / n.path).read_bytes() for n in staged]
    assert contents == [b"first", b"second", b"third", b"first"]
    again = stage_data(nodes, tmp_path / "w2" / "data", cache_dir=cache_dir)
    assert [n.path for n in again] == [n.path for n in staged]


# --------------------------------------------------------------------------- data roots


def eval_folder(root: Path, data_node: object) -> Path:
    """``root/evals/e.json`` naming ``data_node``, beside ``root/evals/inputs/ok.csv`` and a
    host-like secret outside the evals folder, ``root/secret.txt``."""
    write_tree(root, {"evals/inputs/ok.csv": b"a,b\n", "secret.txt": b"host secret"})
    grader = {"type": "multiple_choice", "config": {"correct_answer": "B"}}
    (root / "evals" / "e.json").write_text(
        json.dumps({"id": "e", "task": "t", "data_node": data_node, "grader": grader})
    )
    return root / "evals"


@pytest.mark.parametrize(
    "node, fragment",
    [
        ("/etc/shadow", "outside the allowed data roots"),
        ("/proc/self/environ", "under /proc"),
        ("file:///etc/passwd", "outside the allowed data roots"),
        ("../../..", "outside the allowed data roots"),
        ("/dev/null", "under /dev"),
        ("../secret.txt", "outside the allowed data roots"),
    ],
)
def test_local_node_outside_the_data_roots_is_refused(
    tmp_path: Path, cache_dir: Path, node: str, fragment: str
) -> None:
    evals = tmp_path / "evals"
    evals.mkdir()
    data_dir = tmp_path / "w" / "data"
    with pytest.raises(StagingError) as err:
        stage_data_within([node], data_dir, base_dir=evals, cache_dir=cache_dir, data_roots=[evals])
    assert err.value.uri == node and fragment in err.value.problem
    if "outside" in fragment:  # names the allowed roots and how to allow more
        assert f"({evals})" in err.value.problem and "--data-root DIR" in err.value.problem
    assert not data_dir.exists() and not cache_dir.exists()  # refused before anything is read or made


def test_no_data_roots_means_no_local_node(tmp_path: Path, cache_dir: Path) -> None:
    write_tree(tmp_path, {"ok.csv": b"x"})
    with pytest.raises(StagingError, match=r"outside the allowed data roots \(none\)"):
        stage_data_within(["ok.csv"], tmp_path / "data", base_dir=tmp_path, cache_dir=cache_dir)


def test_symlink_swapped_after_loading_is_refused_at_staging(tmp_path: Path, cache_dir: Path) -> None:
    evals = eval_folder(tmp_path, "inputs/data.csv")
    link = evals / "inputs" / "data.csv"
    link.symlink_to("ok.csv")
    (eval_,) = load_evals(evals)  # the link points inside the evals folder: accepted
    stage = partial(
        stage_data_within,
        eval_.data_nodes,
        base_dir=eval_.source_path.parent,
        cache_dir=cache_dir,
        data_roots=eval_.data_roots,
    )
    [node] = stage(tmp_path / "w1" / "data")
    assert node.path == "data/data.csv" and (tmp_path / "w1" / "data" / "data.csv").read_bytes() == b"a,b\n"
    link.unlink()
    link.symlink_to(tmp_path / "secret.txt")  # what an agent writing into the evals folder could do
    with pytest.raises(StagingError) as err:
        stage(tmp_path / "w2" / "data")
    assert err.value.uri == "inputs/data.csv" and f"resolves to {tmp_path / 'secret.txt'}" in err.value.problem
    assert not (tmp_path / "w2" / "data").exists()


def test_symlink_inside_a_staged_directory_pointing_out_is_refused(tmp_path: Path, cache_dir: Path) -> None:
    evals = eval_folder(tmp_path, "inputs")
    (eval_,) = load_evals(evals)  # loading refuses such a link too: this one comes after
    (evals / "inputs" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(StagingError) as err:
        stage_data_within(
            ["inputs"], tmp_path / "w" / "data", base_dir=evals, cache_dir=cache_dir, data_roots=eval_.data_roots
        )
    assert err.value.uri == "inputs" and "holds leak.txt, which resolves to" in err.value.problem
    (evals / "inputs" / "leak.txt").unlink()
    [node] = stage_data_within(
        ["inputs"], tmp_path / "w" / "data", base_dir=evals, cache_dir=cache_dir, data_roots=eval_.data_roots
    )
    assert node.kind == "directory"


def test_a_data_root_outside_the_evals_folder_is_staged_from(tmp_path: Path, cache_dir: Path) -> None:
    evals = eval_folder(tmp_path, ["inputs/ok.csv", "../shared/ref.csv"])
    write_tree(tmp_path, {"shared/ref.csv": b"ref"})
    (eval_,) = load_evals(evals, data_roots=[tmp_path / "shared"])
    staged = stage_data_within(
        eval_.data_nodes, tmp_path / "w" / "data", base_dir=evals, cache_dir=cache_dir, data_roots=eval_.data_roots
    )
    assert [n.path for n in staged] == ["data/ok.csv", "data/ref.csv"]
    assert (tmp_path / "w" / "data" / "ref.csv").read_bytes() == b"ref"


# --------------------------------------------------------------------------- http


def test_http_download_then_cache_reuse_makes_no_request(tmp_path: Path, cache_dir: Path, http_files) -> None:
    body = os.urandom(3 * 1024 * 1024 + 17)  # spans several read chunks
    url = http_files.add("/files/counts.h5ad", body)

    first = stage_data([url], tmp_path / "w1" / "data", cache_dir=cache_dir, timeout=10)[0]
    second = stage_data([url], tmp_path / "w2" / "data", cache_dir=cache_dir, timeout=10)[0]

    assert http_files.hits["/files/counts.h5ad"] == 1
    assert (first.from_cache, second.from_cache) == (False, True)
    assert first.sha256 == second.sha256 == sha(body)
    staged = tmp_path / "w2" / "data" / "counts.h5ad"
    assert staged.read_bytes() == body
    assert mode(staged) == 0o444
    payload = cache_dir / "entries" / key_hash(url) / "payload"
    # the work dir holds its own copy: not the payload's inode, and no link to anything
    assert staged.stat().st_ino != payload.stat().st_ino
    assert staged.stat().st_nlink == payload.stat().st_nlink == 1
    meta = (cache_dir / "entries" / key_hash(url) / "meta.json").read_text()
    assert sha(body) in meta and str(len(body)) in meta


def test_corrupt_cache_entries_are_fetched_again(tmp_path: Path, cache_dir: Path, http_files) -> None:
    url = http_files.add("/a.txt", b"good bytes")
    stage_data([url], tmp_path / "w1" / "data", cache_dir=cache_dir)
    entry = cache_dir / "entries" / key_hash(url)

    payload = entry / "payload"
    payload.chmod(0o644)
    payload.write_bytes(b"trunc")  # damaged payload: wrong size
    node = stage_data([url], tmp_path / "w2" / "data", cache_dir=cache_dir)[0]
    assert (node.from_cache, http_files.hits["/a.txt"]) == (False, 2)
    assert (tmp_path / "w2" / "data" / "a.txt").read_bytes() == b"good bytes"

    (entry / "meta.json").write_text('{"version": 1, "key": ')  # damaged sidecar
    node = stage_data([url], tmp_path / "w3" / "data", cache_dir=cache_dir)[0]
    assert (node.from_cache, http_files.hits["/a.txt"]) == (False, 3)
    assert node.sha256 == sha(b"good bytes")


def test_http_404_is_a_clean_error_and_nothing_is_left(tmp_path: Path, cache_dir: Path, http_files) -> None:
    good = write_tree(tmp_path / "src", {"ok.csv": b"fine"}) / "ok.csv"
    url = http_files.base + "/missing.csv"
    data_dir = tmp_path / "w" / "data"
    with pytest.raises(StagingError) as err:
        stage_data([str(good), url], data_dir, cache_dir=cache_dir, timeout=5)
    assert err.value.uri == url
    assert url in str(err.value) and "HTTP 404" in str(err.value)
    assert all_entries(data_dir) == []  # the node staged before the failure was removed too
    assert not (cache_dir / "entries" / key_hash(url)).exists()


def test_truncated_http_body_is_an_error_not_a_cache_entry(tmp_path: Path, cache_dir: Path, http_files) -> None:
    url = http_files.add("/cut.bin", b"q" * 1000, mode="short")
    with pytest.raises(StagingError, match=r"truncated download .*: 100 of 1000 bytes"):
        stage_data([url], tmp_path / "w" / "data", cache_dir=cache_dir, timeout=5)
    assert all_entries(cache_dir / "entries") == [] and all_entries(cache_dir / "tmp") == []


@pytest.mark.parametrize(
    "route", [Route(mode="stall"), Route(body=b"z" * 100, mode="trickle")], ids=["stall", "trickle"]
)
def test_timeout_raises_on_time_and_leaves_no_partial_file(tmp_path, cache_dir, http_files, route) -> None:
    http_files.routes["/slow.bin"] = route
    url = http_files.base + "/slow.bin"
    data_dir = tmp_path / "w" / "data"

    started = time.monotonic()
    with pytest.raises(StagingError) as err:
        stage_data([url], data_dir, cache_dir=cache_dir, timeout=1.0)
    elapsed = time.monotonic() - started

    assert 0.9 <= elapsed < 20  # the timeout, not the server, ended it: a hang guard, not a speed bound
    assert "timed out" in str(err.value) and "1s" in str(err.value) and url in str(err.value)
    assert all_entries(data_dir) == []
    assert all_entries(cache_dir / "entries") == []
    for _ in range(50):  # the abandoned fetch thread removes its scratch files promptly
        if all_entries(cache_dir / "tmp") == []:
            break
        time.sleep(0.05)
    assert all_entries(cache_dir / "tmp") == []


def _stage_in_child(url: str, data_dir: str, cache_dir: str, barrier, results) -> None:
    barrier.wait(30)
    try:
        [node] = stage_data([url], Path(data_dir), cache_dir=Path(cache_dir), timeout=20)
        results.put((node.from_cache, node.sha256, sha((Path(data_dir).parent / node.path).read_bytes())))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put(("error", repr(exc), None))


def test_eight_processes_download_once(tmp_path: Path, cache_dir: Path, http_files) -> None:
    body = os.urandom(256 * 1024)
    url = http_files.add("/shared/big.bin", body, delay=0.3)  # slow enough for all 8 to collide
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [
        ctx.Process(
            target=_stage_in_child,
            args=(url, str(tmp_path / f"w{i}" / "data"), str(cache_dir), barrier, results),
        )
        for i in range(8)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    assert [o for o in outcomes if o[0] == "error"] == []

    assert http_files.hits["/shared/big.bin"] == 1
    assert sorted(from_cache for from_cache, _, _ in outcomes) == [False] + [True] * 7
    assert {digest for _, digest, _ in outcomes} == {sha(body)}
    assert {content for _, _, content in outcomes} == {sha(body)}


# --------------------------------------------------------------------------- s3


def test_s3_file_and_prefix_directory(tmp_path: Path, cache_dir: Path, s3_bucket) -> None:
    files = {"counts.csv": b"gene,n\nA,1\n", "obs/meta.json": b"{}", "obs/deep/x.bin": b"\x00\x01"}
    for rel, data in files.items():
        s3_bucket.put(f"dataset/{rel}", data)
    s3_bucket.put("single/pbmc.h5ad", b"h5-bytes")
    nodes = [s3_bucket.uri("single/pbmc.h5ad"), s3_bucket.uri("dataset/"), s3_bucket.uri("dataset/obs")]

    staged = stage_data(nodes, tmp_path / "w" / "data", cache_dir=cache_dir, s3_endpoint_url=s3_bucket.endpoint_url)

    assert [(n.path, n.kind) for n in staged] == [
        ("data/pbmc.h5ad", "file"),
        ("data/dataset", "directory"),
        ("data/obs", "directory"),  # a key with no object but objects under key/ is a prefix
    ]
    assert staged[0].sha256 == sha(b"h5-bytes")
    assert staged[1].sha256 == tree_sha(files)
    assert staged[2].sha256 == tree_sha({"meta.json": b"{}", "deep/x.bin": b"\x00\x01"})
    for rel, data in files.items():
        assert (tmp_path / "w" / "data" / "dataset" / rel).read_bytes() == data


@pytest.mark.parametrize("marker", ["../../escaped/", "/{tmp}/escaped/deep/", "a/../../escaped/", "a//b/"])
def test_s3_keys_out_of_their_prefix_are_refused_folder_markers_too(
    tmp_path: Path, cache_dir: Path, s3_bucket, marker: str
) -> None:
    """A key ending in ``/`` (a folder marker) names a folder under the prefix, as a file's key
    names a file there: one leading out of it makes nothing, anywhere."""
    s3_bucket.put("set/data.csv", b"a,b\n")
    s3_bucket.put("set/" + marker.format(tmp=str(tmp_path).lstrip("/")), b"")
    with pytest.raises(StagingError, match="unsafe relative path"):
        stage_data([s3_bucket.uri("set/")], tmp_path / "w" / "data", cache_dir=cache_dir,
                   s3_endpoint_url=s3_bucket.endpoint_url)  # fmt: skip
    assert not any(path.name == "escaped" for path in tmp_path.rglob("*"))


def test_s3_endpoint_from_environment(tmp_path: Path, cache_dir: Path, s3_bucket, monkeypatch) -> None:
    uri = s3_bucket.put("env/data.txt", "via env")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_bucket.endpoint_url)
    [node] = stage_data([uri], tmp_path / "w" / "data", cache_dir=cache_dir)
    assert (tmp_path / "w" / node.path).read_text() == "via env"


def test_s3_missing_key_and_bucket(tmp_path: Path, cache_dir: Path, s3_bucket) -> None:
    kw = {"cache_dir": cache_dir, "s3_endpoint_url": s3_bucket.endpoint_url, "timeout": 10}
    with pytest.raises(StagingError, match=r"no such S3 key: s3://.*/nope\.csv"):
        stage_data([s3_bucket.uri("nope.csv")], tmp_path / "a" / "data", **kw)
    with pytest.raises(StagingError, match="no objects under S3 prefix"):
        stage_data([s3_bucket.uri("empty/")], tmp_path / "b" / "data", **kw)
    with pytest.raises(StagingError, match="no such S3 bucket: no-such-bucket-x"):
        stage_data(["s3://no-such-bucket-x/k.csv"], tmp_path / "c" / "data", **kw)


# --------------------------------------------------------------------------- resolvers, errors, filesystems


def test_latch_without_resolver_is_a_clear_error(tmp_path: Path, cache_dir: Path) -> None:
    unregister_resolver("latch")
    with pytest.raises(StagingError) as err:
        stage_data(["latch://123.account/data/pbmc.h5ad"], tmp_path / "data", cache_dir=cache_dir)
    assert "latch://123.account/data/pbmc.h5ad" in str(err.value)
    assert (
        "no resolver for latch:// URIs: install/configure one with "
        "rayeval.data.register_resolver('latch', ...) (e.g. using latch's SDK)"
    ) in str(err.value)
    with pytest.raises(StagingError, match=r"unknown URI scheme gs://"):
        stage_data(["gs://bucket/x"], tmp_path / "data", cache_dir=cache_dir)


def test_latch_resolver_to_local_path_and_presigned_url(tmp_path, cache_dir, http_files, latch) -> None:
    local = write_tree(tmp_path / "latch-download", {"f.txt": b"from sdk"})
    url = http_files.add("/bucket/obj-123", b"presigned bytes") + "?X-Amz-Signature=secret"
    calls = latch({"latch://1.account/proj/atlas": str(local), "latch://1.account/proj/pbmc.h5ad": url})
    nodes = ["latch://1.account/proj/atlas", "latch://1.account/proj/pbmc.h5ad"]

    staged = stage_data(nodes, tmp_path / "w1" / "data", cache_dir=cache_dir, timeout=10)
    assert [(n.path, n.kind) for n in staged] == [("data/atlas", "directory"), ("data/pbmc.h5ad", "file")]
    assert (tmp_path / "w1" / "data" / "pbmc.h5ad").read_bytes() == b"presigned bytes"
    assert (tmp_path / "w1" / "data" / "atlas" / "f.txt").read_bytes() == b"from sdk"

    again = stage_data(nodes, tmp_path / "w2" / "data", cache_dir=cache_dir, timeout=10)
    assert all(n.from_cache for n in again)
    assert len(calls) == 2  # cache hits never call the resolver
    assert http_files.hits["/bucket/obj-123"] == 1


def test_an_installed_package_offers_a_resolver_by_entry_point(tmp_path, cache_dir, install_plugin) -> None:
    local = write_tree(tmp_path / "plugged-download", {"f.txt": b"from the plug-in"})
    install_plugin(RESOLVERS, "plugged", "my_plugin_resolvers", f"def plugin(uri):\n    return {str(local)!r}\n")
    (staged,) = stage_data(["plugged://bucket/tree"], tmp_path / "data", cache_dir=cache_dir)
    assert (staged.path, (tmp_path / "data" / "tree" / "f.txt").read_bytes()) == ("data/tree", b"from the plug-in")


def test_resolver_can_name_id_style_nodes(tmp_path, cache_dir, http_files, latch) -> None:
    url = http_files.add("/blob/8f3a", b"named by the resolver")
    calls = latch({"latch://5521.node": Resolved(url, name="pbmc3k.h5ad")})
    first = stage_data(["latch://5521.node"], tmp_path / "w1" / "data", cache_dir=cache_dir)[0]
    again = stage_data(["latch://5521.node"], tmp_path / "w2" / "data", cache_dir=cache_dir)[0]
    assert first.path == again.path == "data/pbmc3k.h5ad"  # the name is kept in the cache sidecar
    assert (tmp_path / "w2" / "data" / "pbmc3k.h5ad").read_bytes() == b"named by the resolver"
    assert len(calls) == 1


def test_resolver_failures_are_reported_without_secrets(tmp_path, cache_dir, http_files, latch) -> None:
    latch({"latch://1.account/gone.csv": http_files.base + "/gone.csv?X-Amz-Signature=secret"})
    with pytest.raises(StagingError) as err:
        stage_data(["latch://1.account/gone.csv"], tmp_path / "data", cache_dir=cache_dir)
    assert "HTTP 404" in str(err.value) and "secret" not in str(err.value)
    with pytest.raises(StagingError, match=r"the 'latch' resolver failed: KeyError"):
        stage_data(["latch://1.account/unknown.csv"], tmp_path / "data", cache_dir=cache_dir)


def test_cache_on_another_filesystem_still_copies(tmp_path: Path, http_files) -> None:
    shm = Path("/dev/shm")
    other_fs = shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    cache_dir = other_fs / f"rayeval-test-{os.getpid()}-{time.time_ns()}"
    try:
        url = http_files.add("/x.bin", b"bytes across devices")
        stage_data([url], tmp_path / "w" / "data", cache_dir=cache_dir)
        staged = tmp_path / "w" / "data" / "x.bin"
        assert staged.read_bytes() == b"bytes across devices" and mode(staged) == 0o444
        assert staged.stat().st_nlink == 1  # a byte copy: no reflink across devices
    finally:
        remove_tree(cache_dir)


def test_existing_target_is_replaced_and_errors_pickle(tmp_path: Path, cache_dir: Path) -> None:
    src = write_tree(tmp_path / "src", {"t.csv": b"new"}) / "t.csv"
    data_dir = tmp_path / "w" / "data"
    (data_dir / "t.csv").mkdir(parents=True)
    (data_dir / "t.csv" / "old").write_text("stale")
    (data_dir / "t.csv").chmod(0o555)
    stage_data([str(src)], data_dir, cache_dir=cache_dir)
    assert (data_dir / "t.csv").read_bytes() == b"new"
    stage_data([str(src)], data_dir, cache_dir=cache_dir)  # again into the now read-only data dir
    assert (data_dir / "t.csv").read_bytes() == b"new" and mode(data_dir) == 0o555

    err = pickle.loads(pickle.dumps(StagingError("s3://b/k", "no such S3 key: s3://b/k")))
    assert (err.uri, err.problem) == ("s3://b/k", "no such S3 key: s3://b/k")
    assert str(err) == "cannot stage data node 's3://b/k': no such S3 key: s3://b/k"


def test_nothing_to_stage_needs_no_working_folder_or_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An eval without data (or an agent that reads none) stages nothing, even in a process
    whose working folder is gone and whose cache location cannot be worked out."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    assert stage_data([], tmp_path / "data") == [] and stage_data(None, tmp_path / "data") == []
    assert not (tmp_path / "data").exists()


# --------------------------------------------------------------------------- integrity


def let_clock_tick() -> None:
    """Sleep past a coarse kernel timestamp tick, so the next change moves the ctime."""
    time.sleep(0.05)


def tamper(path: Path, data: bytes) -> None:
    """What a hostile agent can do to a file it owns: rewrite it and hide the change
    from size and mtime (only the ctime, which user space cannot set, moves)."""
    before = path.stat()
    assert len(data) == before.st_size
    path.chmod(0o644)
    path.write_bytes(data)
    path.chmod(stat.S_IMODE(before.st_mode))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def payload_of(cache_dir: Path, key: str) -> Path:
    return cache_dir / "entries" / key_hash(key) / "payload"


def test_agent_rewriting_its_staged_copy_cannot_poison_the_cache(tmp_path, cache_dir, http_files) -> None:
    url = http_files.add("/ref/genome.fa", b"ACGTACGT")
    src = write_tree(tmp_path / "atlas", {"a.csv": b"1,2\n", "sub/b.txt": b"bee"})
    stage = partial(stage_data, cache_dir=cache_dir, data_roots=[tmp_path])
    w1 = tmp_path / "w1" / "data"
    stage([url, str(src)], w1)

    tamper(w1 / "genome.fa", b"TTTTTTTT")  # the agent owns its copies...
    tamper(w1 / "atlas" / "sub" / "b.txt", b"BAD")
    assert (w1 / "genome.fa").read_bytes() == b"TTTTTTTT"

    w2 = tmp_path / "w2" / "data"
    again = stage([url, str(src)], w2)
    # ...but they were never the cache's bytes: the next unit gets the originals, unfetched
    assert [n.from_cache for n in again] == [True, True]
    assert http_files.hits["/ref/genome.fa"] == 1
    assert (w2 / "genome.fa").read_bytes() == b"ACGTACGT"
    assert (w2 / "atlas" / "sub" / "b.txt").read_bytes() == b"bee"
    assert payload_of(cache_dir, url).read_bytes() == b"ACGTACGT"
    local_payload = payload_of(cache_dir, f"file://{src}")
    assert (local_payload / "sub" / "b.txt").read_bytes() == b"bee"
    assert (src / "sub" / "b.txt").read_bytes() == b"bee"
    # no file in a work dir shares an inode with the cache or the source
    for staged, cached, source in [
        (w2 / "genome.fa", payload_of(cache_dir, url), None),
        (w2 / "atlas" / "a.csv", local_payload / "a.csv", src / "a.csv"),
    ]:
        assert staged.stat().st_nlink == cached.stat().st_nlink == 1
        assert staged.stat().st_ino != cached.stat().st_ino
        if source is not None:
            assert source.stat().st_nlink == 1
            assert len({staged.stat().st_ino, cached.stat().st_ino, source.stat().st_ino}) == 3


def test_tampered_cache_payload_is_detected_and_rebuilt(tmp_path, cache_dir, http_files) -> None:
    url = http_files.add("/t.bin", b"good bytes")
    src = write_tree(tmp_path / "tree", {"x.txt": b"xx", "y/z.txt": b"zzz"})
    stage = partial(stage_data, cache_dir=cache_dir, data_roots=[tmp_path])
    stage([url, str(src)], tmp_path / "w1" / "data")
    file_payload, tree_payload = payload_of(cache_dir, url), payload_of(cache_dir, f"file://{src}")
    before = file_payload.stat()

    let_clock_tick()
    tamper(file_payload, b"evil bytes")
    tamper(tree_payload / "y" / "z.txt", b"ZZZ")
    after = file_payload.stat()  # what the old size + mtime check looked at is unchanged
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)

    w2 = tmp_path / "w2" / "data"
    nodes = stage([url, str(src)], w2)
    assert [n.from_cache for n in nodes] == [False, False]  # re-hashed, found wrong, rebuilt
    assert http_files.hits["/t.bin"] == 2
    assert (w2 / "t.bin").read_bytes() == file_payload.read_bytes() == b"good bytes"
    assert (w2 / "tree" / "y" / "z.txt").read_bytes() == (tree_payload / "y" / "z.txt").read_bytes() == b"zzz"
    assert nodes[0].sha256 == sha(b"good bytes")

    (tree_payload / "y").chmod(0o755)  # a file slipped into a directory payload
    (tree_payload / "y" / "extra.txt").write_bytes(b"")
    assert stage([str(src)], tmp_path / "w3" / "data")[0].from_cache is False
    assert not (tmp_path / "w3" / "data" / "tree" / "y" / "extra.txt").exists()


def test_innocent_ctime_change_is_rehashed_once(tmp_path, cache_dir, monkeypatch) -> None:
    src = write_tree(tmp_path / "tree", {"a.bin": os.urandom(3 * 1024 * 1024), "b.txt": b"b", "c.txt": b"c"})
    stage = partial(stage_data, [str(src)], cache_dir=cache_dir, data_roots=[tmp_path])
    stage(tmp_path / "w1" / "data")
    payload = payload_of(cache_dir, f"file://{src}")
    hashed: list[Path] = []
    real_hash = cache._hash_file
    monkeypatch.setattr(cache, "_hash_file", lambda path: hashed.append(path) or real_hash(path))

    assert stage(tmp_path / "w2" / "data")[0].from_cache
    assert hashed == []  # unchanged stat: trusted without reading

    let_clock_tick()
    touched = payload / "a.bin"
    st = touched.stat()
    touched.chmod(0o444)  # same mode, same times: only the ctime moves
    os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert touched.stat().st_ctime_ns != st.st_ctime_ns

    node = stage(tmp_path / "w3" / "data")[0]
    assert node.from_cache and hashed == [touched]  # only the changed file was read
    meta = json.loads((payload.parent / "meta.json").read_text())
    [record] = [f for f in meta["files"] if f["path"] == "a.bin"]
    assert record["ctime_ns"] == touched.stat().st_ctime_ns  # its new stat is recorded

    assert stage(tmp_path / "w4" / "data")[0].from_cache
    assert hashed == [touched]  # so the next reuse reads nothing again
    assert (tmp_path / "w4" / "data" / "tree" / "a.bin").read_bytes() == (src / "a.bin").read_bytes()


def test_mount_mode_stages_placeholders_and_payload_paths(tmp_path, cache_dir, monkeypatch) -> None:
    single = write_tree(tmp_path / "in", {"pbmc.h5ad": b"cells"}) / "pbmc.h5ad"
    tree = write_tree(tmp_path / "atlas", {"a.csv": b"1,2\n", "sub/b.txt": b"bee"})
    data_dir = tmp_path / "w" / "data"
    monkeypatch.chdir(tmp_path)  # a relative cache dir still yields absolute payload paths
    stage = partial(stage_data, cache_dir=Path("cache"), data_roots=[tmp_path])

    nodes = stage([str(single), str(tree)], data_dir, mode="mount")

    assert [(n.path, n.kind, n.from_cache) for n in nodes] == [
        ("data/pbmc.h5ad", "file", False),
        ("data/atlas", "directory", False),
    ]
    assert (nodes[0].sha256, nodes[0].size_bytes) == (sha(b"cells"), 5)
    assert nodes[1].sha256 == tree_sha({"a.csv": b"1,2\n", "sub/b.txt": b"bee"})
    placeholder_file, placeholder_dir = data_dir / "pbmc.h5ad", data_dir / "atlas"
    assert placeholder_file.is_file() and placeholder_file.stat().st_size == 0 and mode(placeholder_file) == 0o444
    assert placeholder_dir.is_dir() and list(placeholder_dir.iterdir()) == [] and mode(placeholder_dir) == 0o555
    assert mode(data_dir) == 0o555 and sorted(p.name for p in data_dir.iterdir()) == ["atlas", "pbmc.h5ad"]
    # what a sandbox bind-mounts onto the placeholders: the cache payloads
    assert nodes[0].view_source == str(payload_of(cache_dir, f"file://{single}"))
    assert nodes[1].view_source == str(payload_of(cache_dir, f"file://{tree}"))
    assert Path(nodes[0].view_source).read_bytes() == b"cells"
    assert (Path(nodes[1].view_source) / "sub" / "b.txt").read_bytes() == b"bee"
    assert Path(nodes[0].view_source).stat().st_ino != single.stat().st_ino

    copied = stage([str(single)], tmp_path / "w2" / "data")[0]
    assert copied.from_cache and copied.view_source is None
    with pytest.raises(ValueError, match="mode must be 'copy' or 'mount'"):
        stage([str(single)], tmp_path / "w3" / "data", mode="link")  # type: ignore[arg-type]
