"""A real S3-protocol server (moto's standalone server) on 127.0.0.1 for tests.

``s3_server`` (session): the server process; tests pass ``s3_server.endpoint_url``
explicitly to whatever talks to S3 (boto3, s3fs, pyarrow, rayeval). Nothing global is
set, so other tests are unaffected.
``aws_credentials`` (function): fake credentials in the environment, isolated from any
real ~/.aws config; child processes started by the test inherit them.
``s3_bucket`` (function): a fresh, uniquely named bucket on that server, emptied and
deleted afterwards.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.tcp_proxy import TcpProxy

_STARTUP_TIMEOUT = 30.0


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    host: str
    port: int
    process: subprocess.Popen


@dataclass(frozen=True)
class S3Bucket:
    name: str
    endpoint_url: str
    client: Any  # boto3 S3 client bound to the server

    def uri(self, key: str = "") -> str:
        """``s3://<bucket>/<key>``."""
        return f"s3://{self.name}/{key}"

    def put(self, key: str, body: bytes | str) -> str:
        """Upload ``body`` at ``key``; returns its s3:// URI."""
        data = body.encode() if isinstance(body, str) else body
        self.client.put_object(Bucket=self.name, Key=key, Body=data)
        return self.uri(key)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _wait_until_up(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + _STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = log.read_text(errors="replace")
            raise RuntimeError(f"moto server exited with {proc.returncode}:\n{output}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answered, even if not with 200
        except OSError:
            time.sleep(0.05)
    output = log.read_text(errors="replace")
    raise RuntimeError(f"moto server did not answer at {url} within {_STARTUP_TIMEOUT:g}s:\n{output}")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """moto's standalone S3 server as a subprocess on a free 127.0.0.1 port."""
    host = "127.0.0.1"
    port = _free_port(host)
    log = tmp_path_factory.mktemp("moto") / "server.log"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        endpoint = f"http://{host}:{port}"
        _wait_until_up(proc, endpoint + "/moto-api/", log)
        yield S3Server(endpoint_url=endpoint, host=host, port=port, process=proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials and region; no real profile, config file or endpoint leaks in."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def s3_bucket(s3_server: S3Server, aws_credentials: None):
    """A fresh bucket on ``s3_server``; emptied and deleted after the test."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    session = boto3.session.Session()
    client = session.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    name = f"test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    yield S3Bucket(name=name, endpoint_url=s3_server.endpoint_url, client=client)
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=name, Key=obj["Key"])
        client.delete_bucket(Bucket=name)
    except (BotoCoreError, ClientError):  # server already gone: its state died with it
        pass


@pytest.fixture
def s3_proxy(s3_server: S3Server):
    """A TCP forwarder in front of the moto server that tests can take down and bring back."""
    proxy = TcpProxy(s3_server.host, s3_server.port)
    yield proxy
    proxy.close()
