"""What ``augment_views: K`` costs and gains: TOSCA on the embedded fmnist
(EfficientNet-Lite0, card defaults: 20 epochs) with K = 0, 5 and 20 cached
augmented views per training image, three seeds each, in one process with a
fresh feature cache.

Cost: the extraction time of the views (each view is one backbone pass over the
5,000 training images; K = 20 reuses the 5 views the K = 5 run cached) and the
training time. Gain: average and last accuracy against K = 0.

    python -m bench.augment_views          # the longest bench: 3 seeds at 3 view counts

Prints one JSON line per K and records the figure as
``bench/results/augment-views-DATE-CPU.json`` (:func:`bench.measurements.write`).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path

SEEDS = [1993, 1, 2]
VIEWS = [0, 5, 20]


def main() -> dict:
    import cl_bench

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CL_BENCH_CACHE"] = str(Path(tmp) / "cache")
        for k in VIEWS:
            records = cl_bench.run(
                ["tosca"],
                "fmnist",
                SEEDS,
                out=Path(tmp) / f"k{k}",
                settings={"tosca.augment_views": k},
                echo=None,
            )
            out[k] = {
                "features_s": sum(r.timing["features_s"] for r in records),
                "train_s": statistics.mean(sum(r.timing["train_s"]) for r in records),
                "avg_acc": statistics.mean(r.avg_acc for r in records),
                "last_acc": statistics.mean(r.last_acc for r in records),
                "last_acc_per_seed": [round(r.last_acc, 2) for r in records],
                "routing_last": statistics.mean(r.routing_acc[-1] for r in records),
            }
            print(k, json.dumps(out[k]), flush=True)
    return out


def headline(out: dict) -> list[tuple[str, str]]:
    return [
        (
            f"augment_views {k}",
            f"avg {r['avg_acc']:.1f}, last {r['last_acc']:.1f} "
            f"({', '.join(f'{a:.1f}' for a in r['last_acc_per_seed'])}), routing "
            f"{r['routing_last']:.1f}; extraction {r['features_s']:.0f} s, training "
            f"{r['train_s']:.1f} s",
        )
        for k, r in out.items()
    ]


def record(out: dict):
    import torch

    from bench.measurements import command_line, write
    from cl_bench.engine.environment import resolve_precision

    return write(
        "augment-views",
        headline(out),
        {str(k): r for k, r in out.items()},
        resolve_precision("auto", torch.device("cpu")),
        command_line(["-m", "bench.augment_views"]),
    )


if __name__ == "__main__":
    print(f"recorded in {record(main())}")
