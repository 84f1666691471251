"""Manifests of earlier versions, which listed every unit of the plan, still load and resume."""

from __future__ import annotations

import json
from pathlib import Path

from rayeval.storage import ResultStore


def _earlier_manifest(run_id: str) -> dict:
    return {
        "run_id": run_id,
        "status": "cancelled",
        "created_at": "2026-01-02T03:04:05Z",
        "updated_at": "2026-01-02T03:14:05Z",
        "agent": "reference",
        "agent_args": {"api_key": "***"},
        "isolation": "sandbox",
        "network": "host",
        "models": ["m1", "m2"],
        "seeds": [1, 2, 3],
        "eval_files": [{"path": "evals/a.json", "id": "a", "eval_hash": "h-a"}],
        "plan": [
            {
                "unit_id": f"u{i}",
                "eval_id": "a",
                "model": f"m{1 + i // 3}",
                "seed": 1 + i % 3,
            }
            for i in range(6)
        ],
        "rayeval_version": "0.0.9",
        "python_version": "3.11.7",
        "command_line": ["rayeval", "run"],
        "host": "old-host",
    }


def test_an_earlier_manifest_loads_and_is_rewritten_without_its_unit_list(
    local_store: ResultStore,
) -> None:
    path = Path(local_store.manifest_path("old"))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_earlier_manifest("old")))
    manifest = local_store.read_manifest("old")
    assert manifest.total_units == 6 and len(manifest.plan) == 6  # its total, from its list
    assert manifest.seeds == [1, 2, 3] and manifest.plan_digest is None and manifest.secret_fingerprints == {}
    assert "timeout" not in manifest.model_fields_set  # recorded by later versions only: not compared
    local_store.write_manifest(manifest.with_status("completed"))
    rewritten = json.loads(path.read_text())
    assert "plan" not in rewritten and rewritten["total_units"] == 6 and rewritten["status"] == "completed"
    assert local_store.read_manifest("old").total_units == 6
