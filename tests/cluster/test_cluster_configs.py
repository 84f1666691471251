"""The cluster configs in cluster/: valid YAML, the right entrypoint, and no secret values."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rayeval.secrets import is_secret_name

from .conftest import REPO

CLUSTER = REPO / "cluster"

# Shapes of real credentials: none may appear in a config file.
SECRET_SHAPES = [
    re.compile(r"sk-[A-Za-z0-9_-]{8,}"),  # OpenAI / Anthropic keys
    re.compile(r"AKIA[0-9A-Z]{16}"),  # AWS access key id
    re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub tokens
    re.compile(r"(?i)aws_secret_access_key"),
    re.compile(r"(?i)\b[A-Z0-9_]*(API_KEY|TOKEN|SECRET)[A-Z0-9_]*\s*=\s*['\"]?[A-Za-z0-9_\-]{8,}"),  # NAME=literal
]


def load(name: str) -> Any:
    return yaml.safe_load((CLUSTER / name).read_text())


def strings(node: Any):
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)
    elif node is not None:
        yield str(node)


@pytest.mark.parametrize("name", ["aws-cluster.yaml", "rayjob.yaml"])
def test_no_literal_secret_values(name: str) -> None:
    text = (CLUSTER / name).read_text()
    for shape in SECRET_SHAPES:
        assert not shape.search(text), f"{name}: looks like a literal secret: {shape.search(text).group(0)!r}"


def test_aws_cluster_config() -> None:
    config = load("aws-cluster.yaml")
    from ray.autoscaler._private.util import fillout_defaults, validate_config

    validate_config(fillout_defaults(dict(config)))  # Ray's own launcher schema (offline)

    assert config["provider"]["type"] == "aws"
    assert config["head_node_type"] in config["available_node_types"]
    workers = [spec for name, spec in config["available_node_types"].items() if name != config["head_node_type"]]
    assert workers and all(spec["max_workers"] > spec.get("min_workers", 0) for spec in workers)  # autoscaling
    for spec in config["available_node_types"].values():
        assert "IamInstanceProfile" in spec["node_config"]  # S3 and SSM through the instance profile
    # rayeval installed from this repository on every node
    mounted = [remote for remote, local in config["file_mounts"].items() if local in (".", "./")]
    assert mounted, "the repository is not mounted on the nodes"
    setup = "\n".join(config["setup_commands"])
    assert "pip install" in setup and mounted[0] in setup
    # keys come from the node environment at `ray start`, fetched with the instance profile
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        start = " ".join(config[key])
        assert "ray start" in start and "rayeval_node_env.py" in start and "RAY_AUTH_MODE=token" in start
    assert "get_parameters_by_path" in setup and "WithDecryption=True" in setup
    assert "rayeval check-sandbox" in setup  # a node that cannot sandbox units fails its set-up


def test_rayjob_manifest() -> None:
    job = load("rayjob.yaml")
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    entrypoint = spec["entrypoint"]
    assert entrypoint.startswith("rayeval run ")
    assert re.search(r"--output s3://\S+", entrypoint)
    assert "--agent " in entrypoint
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == "2.60.0"
    pods = [cluster["headGroupSpec"]["template"]] + [group["template"] for group in cluster["workerGroupSpecs"]]
    assert len(pods) >= 2
    for pod in pods:
        for container in pod["spec"]["containers"]:
            env = {item["name"]: item for item in container.get("env", [])}
            keys = [name for name in env if name.endswith("_API_KEY")]
            assert keys, f"{container['name']}: no API key variables"
            for name, item in env.items():
                if is_secret_name(name):  # only ever from a Kubernetes Secret
                    assert "value" not in item, f"{container['name']}: {name} has a literal value"
                    assert item["valueFrom"]["secretKeyRef"]["name"], name
            # units are sandboxed in user namespaces: the pod's seccomp profile must allow them
            assert container["securityContext"]["seccompProfile"]["type"] == "Unconfined", container["name"]
            assert not container["securityContext"].get("privileged"), container["name"]
    for group in cluster["workerGroupSpecs"]:
        for container in group["template"]["spec"]["containers"]:
            assert container["lifecycle"]["postStart"]["exec"]["command"] == ["rayeval", "check-sandbox"]


def test_readme_covers_all_three_setups() -> None:
    text = (CLUSTER / "README.md").read_text()
    for needle in ("aws-cluster.yaml", "rayjob.yaml", "scripts/submit_run.py", "--temp-dir", "RAY_AUTH_MODE"):
        assert needle in text


def test_every_yaml_in_cluster_loads() -> None:
    files = sorted(Path(CLUSTER).glob("*.yaml"))
    assert {f.name for f in files} >= {"aws-cluster.yaml", "rayjob.yaml"}
    for path in files:
        assert isinstance(yaml.safe_load(path.read_text()), dict), path
    assert all(isinstance(s, str) for s in strings(load("rayjob.yaml")))
