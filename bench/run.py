"""The performance harness: every figure as a ratio measured in one process run.

    python -m bench.run            # all five figures, about 10 minutes on 2 cores
    python -m bench.run b c        # a subset

(a) second invocation vs first (feature cache), target >= 5x
(b) TOSCA evaluation at T = 10 vs a backbone pass per module, target >= 5x
(c) features-only training loop through Avalanche vs bare PyTorch, target <= 1.5x
(d) L2P on Avalanche's LearningToPrompt shape: time and peak RSS against
    17.9 s / 2.77 GB, targets <= 0.7x and <= 0.6x (own process, for its RSS),
    with the card defaults and with checkpoint_blocks 8
(e) frozen ViT-B/16 extraction images/s fp32 vs bf16 (target >= 40 % of the
    bf16 peak; this CPU's GEMM peak is measured too) and the fmnist accuracy
    change bf16 makes
"""

from __future__ import annotations

import json
import subprocess
import sys

AVALANCHE_L2P = {"seconds": 17.9, "peak_rss_gb": 2.77}


def figure_d() -> list[dict]:
    """Card defaults, then activation checkpointing of the first 8 of 12 blocks."""
    runs = []
    for blocks in ("0", "8"):
        out = subprocess.run([sys.executable, "-m", "bench.l2p_shape", "auto", blocks],
                             capture_output=True, text=True, check=True).stdout
        ours = json.loads(out.strip().splitlines()[-1])
        runs.append({**ours, "time_ratio": ours["seconds"] / AVALANCHE_L2P["seconds"],
                     "memory_ratio": ours["peak_rss_gb"] / AVALANCHE_L2P["peak_rss_gb"]})
    return runs


def main(which: list[str]) -> dict:
    from bench import features_reuse, loop_overhead, throughput, tosca_eval
    figures = {"a": features_reuse.main, "b": tosca_eval.main, "c": loop_overhead.main,
               "d": figure_d, "e": throughput.main}
    results = {}
    for key in which or list(figures):
        results[key] = figures[key]()
        print(key, json.dumps(results[key]), flush=True)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
