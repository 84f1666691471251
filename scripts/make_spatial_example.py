#!/usr/bin/env python3
"""Generate the small synthetic spatial data set and its spatial_adjacency example eval.

Writes, under ``--out`` (default: the repository's ``evals/`` folder):

* ``data/synthetic_tumor_immune_spatial.csv`` — one row per cell: ``cell_id``, ``x_um``,
  ``y_um`` (centroid in micrometres, 0.1 µm resolution) and ``cell_type`` (``tumor``,
  ``immune``, ``stroma``, ``endothelial``). Tumour cells form compact nests; most immune
  cells hug the nest borders (an "inflamed" pattern), the rest are scattered in the stroma.
* ``spatial/synthetic_tumor_immune_adjacency.json`` — the eval. The spatial_adjacency grader
  has no ground truth, only thresholds on the metrics the agent reports, so this script
  computes those metrics from the written CSV and refuses to write an eval whose real values
  do not clear the thresholds by a safe margin.

Everything is drawn from one fixed-seed generator, so the output is byte-identical on every
run (``--out DIR`` lets the tests regenerate into a temporary folder and compare).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "evals"
SEED = 20240611
CSV_NAME = "synthetic_tumor_immune_spatial.csv"
EVAL_ID = "synthetic_tumor_immune_adjacency"

FIELD_UM = 400.0
NEST_CENTRES = ((90.0, 95.0), (290.0, 80.0), (200.0, 210.0), (85.0, 315.0), (315.0, 310.0))
NEST_RADII = (48.0, 42.0, 55.0, 40.0, 46.0)
TUMOR_SPACING_UM = 11.0
N_PERITUMORAL_IMMUNE = 120
N_STROMAL_IMMUNE = 40
N_STROMA = 220
N_ENDOTHELIAL = 40

THRESHOLDS = {
    "max_median_ic_to_pc_um": 25.0,
    "max_p90_ic_to_pc_um": 80.0,
    "min_pct_ic_within_15um": 60.0,
    "min_pct_ic_mixed_within_55um": 60.0,
}
MARGINS = {  # how far inside each threshold the real metrics must be
    "median_ic_to_pc_um": 5.0,
    "p90_ic_to_pc_um": 10.0,
    "pct_ic_within_15um": 5.0,
    "pct_ic_mixed_within_55um": 5.0,
}


# --------------------------------------------------------------------------- simulation


def tumour_cells(rng: np.random.Generator) -> np.ndarray:
    """Jittered hexagonal packing inside each circular nest."""
    points = []
    row_height = TUMOR_SPACING_UM * np.sqrt(3) / 2
    for (cx, cy), radius in zip(NEST_CENTRES, NEST_RADII):
        n_rows = int(radius // row_height) + 1
        for row in range(-n_rows, n_rows + 1):
            offset = TUMOR_SPACING_UM / 2 if row % 2 else 0.0
            n_cols = int(radius // TUMOR_SPACING_UM) + 1
            for col in range(-n_cols, n_cols + 1):
                x = cx + col * TUMOR_SPACING_UM + offset
                y = cy + row * row_height
                if (x - cx) ** 2 + (y - cy) ** 2 <= radius**2:
                    points.append((x, y))
    base = np.asarray(points)
    return base + rng.normal(0.0, 1.5, size=base.shape)


def outside_nests(points: np.ndarray, buffer_um: float) -> np.ndarray:
    keep = np.ones(len(points), dtype=bool)
    for (cx, cy), radius in zip(NEST_CENTRES, NEST_RADII):
        keep &= np.hypot(points[:, 0] - cx, points[:, 1] - cy) > radius + buffer_um
    return keep


def uniform_outside(rng: np.random.Generator, n: int, buffer_um: float) -> np.ndarray:
    chosen: list[np.ndarray] = []
    while sum(len(c) for c in chosen) < n:
        batch = rng.uniform(0.0, FIELD_UM, size=(n, 2))
        chosen.append(batch[outside_nests(batch, buffer_um)])
    return np.concatenate(chosen)[:n]


def peritumoral_immune(rng: np.random.Generator, n: int) -> np.ndarray:
    """Immune cells along a nest rim, from 6 µm inside to 6 µm beyond it, all around the perimeter."""
    nest = rng.integers(0, len(NEST_CENTRES), size=n)
    angle = rng.uniform(0.0, 2 * np.pi, size=n)
    beyond = rng.uniform(-6.0, 6.0, size=n)
    centres = np.asarray(NEST_CENTRES)[nest]
    radii = np.asarray(NEST_RADII)[nest] + beyond
    return centres + np.column_stack([np.cos(angle), np.sin(angle)]) * radii[:, None]


def simulate() -> list[tuple[str, float, float, str]]:
    rng = np.random.default_rng(SEED)
    groups = [
        ("tumor", tumour_cells(rng)),
        ("immune", peritumoral_immune(rng, N_PERITUMORAL_IMMUNE)),
        ("immune", uniform_outside(rng, N_STROMAL_IMMUNE, buffer_um=5.0)),
        ("stroma", uniform_outside(rng, N_STROMA, buffer_um=5.0)),
        ("endothelial", uniform_outside(rng, N_ENDOTHELIAL, buffer_um=20.0)),
    ]
    rows = [(cell_type, float(x), float(y)) for cell_type, pts in groups for x, y in pts]
    order = rng.permutation(len(rows))  # interleave the types so row order carries no signal
    cells = []
    for index, row_index in enumerate(order):
        cell_type, x, y = rows[row_index]
        x = min(max(x, 0.0), FIELD_UM)
        y = min(max(y, 0.0), FIELD_UM)
        cells.append((f"cell_{index:04d}", round(x, 1), round(y, 1), cell_type))
    return cells


def render_csv(cells: list[tuple[str, float, float, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["cell_id", "x_um", "y_um", "cell_type"])
    for cell_id, x, y, cell_type in cells:
        writer.writerow([cell_id, f"{x:.1f}", f"{y:.1f}", cell_type])
    return buffer.getvalue()


# --------------------------------------------------------------------------- metrics


def adjacency_metrics(csv_text: str) -> dict[str, float]:
    """The four reported statistics, by brute-force pairwise distances on the written CSV."""
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    xy = np.array([[float(r["x_um"]), float(r["y_um"])] for r in rows])
    kind = np.array([r["cell_type"] for r in rows])
    ic, pc = xy[kind == "immune"], xy[kind == "tumor"]
    ic_to_pc = np.sqrt(((ic[:, None, :] - pc[None, :, :]) ** 2).sum(-1))
    nearest = ic_to_pc.min(axis=1)
    ic_to_ic = np.sqrt(((ic[:, None, :] - ic[None, :, :]) ** 2).sum(-1))
    np.fill_diagonal(ic_to_ic, np.inf)
    mixed = (ic_to_pc <= 55.0).any(axis=1) & (ic_to_ic <= 55.0).any(axis=1)
    return {
        "n_ic": len(ic),
        "n_pc": len(pc),
        "median_ic_to_pc_um": float(np.median(nearest)),
        "p90_ic_to_pc_um": float(np.percentile(nearest, 90)),
        "pct_ic_within_15um": float((nearest <= 15.0).mean() * 100),
        "pct_ic_mixed_within_55um": float(mixed.mean() * 100),
    }


def check_margins(m: dict[str, float]) -> None:
    problems = []
    if m["median_ic_to_pc_um"] > THRESHOLDS["max_median_ic_to_pc_um"] - MARGINS["median_ic_to_pc_um"]:
        problems.append("median")
    if m["p90_ic_to_pc_um"] > THRESHOLDS["max_p90_ic_to_pc_um"] - MARGINS["p90_ic_to_pc_um"]:
        problems.append("p90")
    if m["pct_ic_within_15um"] < THRESHOLDS["min_pct_ic_within_15um"] + MARGINS["pct_ic_within_15um"]:
        problems.append("within 15 um")
    if m["pct_ic_mixed_within_55um"] < THRESHOLDS["min_pct_ic_mixed_within_55um"] + MARGINS["pct_ic_mixed_within_55um"]:
        problems.append("mixed within 55 um")
    if problems:
        raise RuntimeError(f"simulated metrics do not clear the thresholds safely ({', '.join(problems)}): {m}")


# --------------------------------------------------------------------------- the eval


def build_eval(m: dict[str, float]) -> dict:
    t = THRESHOLDS
    task = (
        f"The file `{CSV_NAME}` is a small imaging-based spatial data set of a tumour section: one "
        "row per segmented cell with its centroid (`x_um`, `y_um`, in micrometres) and its "
        "annotated `cell_type` (`tumor`, `immune`, `stroma` or `endothelial`).\n\n"
        "Assess whether the immune cells (ICs, `cell_type == 'immune'`) sit next to the tumour "
        "parenchymal cells (PCs, `cell_type == 'tumor'`). Using Euclidean distances between "
        "centroids, compute:\n"
        "- `median_ic_to_pc_um`: the median, over all ICs, of the distance from each IC to its "
        "nearest PC;\n"
        "- `p90_ic_to_pc_um`: the 90th percentile of those nearest-PC distances;\n"
        "- `pct_ic_within_15um`: the percentage (0-100) of ICs whose nearest PC is at most 15 µm "
        "away;\n"
        "- `pct_ic_mixed_within_55um`: the percentage (0-100) of ICs with a mixed neighbourhood, "
        "i.e. with at least one PC and at least one other IC within 55 µm of it;\n"
        "- `adjacency_pass`: true if the immune cells are tumour-adjacent, meaning the median "
        f"distance is at most {t['max_median_ic_to_pc_um']:g} µm, the 90th percentile at most "
        f"{t['max_p90_ic_to_pc_um']:g} µm, at least {t['min_pct_ic_within_15um']:g}% of ICs are "
        f"within 15 µm of a PC and at least {t['min_pct_ic_mixed_within_55um']:g}% have a mixed "
        "neighbourhood; false otherwise.\n\n"
        "Return EXACTLY:\n\n<EVAL_ANSWER>\n"
        '{"median_ic_to_pc_um": <float>, "p90_ic_to_pc_um": <float>, "pct_ic_within_15um": <float>, '
        '"pct_ic_mixed_within_55um": <float>, "adjacency_pass": <true|false>}'
        "\n</EVAL_ANSWER>"
    )
    notes = (
        f"Synthetic data from scripts/make_spatial_example.py (seed {SEED}): {m['n_pc']} tumour "
        f"cells in {len(NEST_CENTRES)} nests, {m['n_ic']} immune cells "
        f"({N_PERITUMORAL_IMMUNE} at nest rims, {N_STROMAL_IMMUNE} scattered in the stroma), "
        f"{N_STROMA} stromal and {N_ENDOTHELIAL} endothelial cells in a {FIELD_UM:g} x "
        f"{FIELD_UM:g} µm field. Real values: median {m['median_ic_to_pc_um']:.2f} µm, p90 "
        f"{m['p90_ic_to_pc_um']:.2f} µm, {m['pct_ic_within_15um']:.2f}% within 15 µm, "
        f"{m['pct_ic_mixed_within_55um']:.2f}% mixed within 55 µm, so the correct verdict is "
        "adjacency_pass = true. The grader has no ground truth: it checks the reported values "
        "against the thresholds and requires adjacency_pass to be literally true."
    )
    return {
        "id": EVAL_ID,
        "task": task,
        "metadata": {
            "task": "spatial_analysis",
            "kit": "synthetic_spatial",
            "time_horizon": "small",
            "eval_type": "scientific",
        },
        "data_node": f"../data/{CSV_NAME}",
        "grader": {"type": "spatial_adjacency", "config": {"scoring": {"pass_thresholds": dict(THRESHOLDS)}}},
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="evals folder to write data/ and spatial/ into")
    args = parser.parse_args(argv)

    csv_text = render_csv(simulate())
    metrics = adjacency_metrics(csv_text)
    check_margins(metrics)

    data_path = args.out / "data" / CSV_NAME
    eval_path = args.out / "spatial" / f"{EVAL_ID}.json"
    data_path.parent.mkdir(parents=True, exist_ok=True)
    eval_path.parent.mkdir(parents=True, exist_ok=True)
    data_path.write_text(csv_text, encoding="utf-8")
    eval_path.write_text(json.dumps(build_eval(metrics), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {data_path} ({len(csv_text.encode())} bytes)")
    print(f"wrote {eval_path}")
    print("metrics: " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
