"""The performance harness: every figure as a ratio measured in one process run.

    python -m bench.run                              # all nine figures, one after another
    python -m bench.run loop-overhead process-exit   # a subset

bench/figures.yaml says what each figure measures and its target; each one measured is
printed as one JSON line and recorded as bench/results/FIGURE-DATE-CPU.json
(:func:`bench.measurements.write`). Each figure's bench is the module of its name
(``loop-overhead``: bench/loop_overhead.py):

feature-cache          second invocation vs first (feature cache)
tosca-evaluation       TOSCA evaluation at T = 10 vs a backbone pass per module
loop-overhead          features-only training loop through Avalanche vs bare PyTorch
l2p-against-avalanche  our L2P vs Avalanche 0.6.0's LearningToPrompt on the same shape,
                       each in its own process (peak RSS of the process): time and
                       memory, ours at the card defaults and with 8 and 12 checkpointed
                       blocks; the first run creates bench/.venv-avalanche (timm 0.6.13)
                       for the peer
vit-extraction         frozen ViT-B/16 extraction images/s fp32 vs bf16 against this
                       CPU's GEMM peak, and the fmnist accuracy change bf16 makes
loop-under-load        features-only training loop with one CPU-bound competitor per
                       core vs idle, at the old thread count (all cores) and the new (1)
extraction-engines     frozen EfficientNet-Lite0 extraction (the default run's backbone
                       pass) through torch eager, TorchScript, OpenVINO and ONNX Runtime
prompts-against-pilot  our DualPrompt and CODA-Prompt vs LAMDA-PILOT's on
                       l2p-against-avalanche's shape, each in its own process; needs a
                       LAMDA-PILOT checkout ($CL_BENCH_PILOT, default ../LAMDA-PILOT
                       beside this repository; bench/parity.md says which commit) and
                       runs it with bench/.venv-avalanche
process-exit           the end of a `cl-bench` process: CPython's teardown after
                       importing the run's stack vs the entry point's quick exit
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent

# the figures bench.run makes, in the order it runs them; each is the ``main`` of the
# module named after it
FIGURES = (
    "feature-cache",
    "tosca-evaluation",
    "loop-overhead",
    "l2p-against-avalanche",
    "vit-extraction",
    "loop-under-load",
    "extraction-engines",
    "prompts-against-pilot",
    "process-exit",
)
# the figures whose raw result is kept under the figure's id in its file
NESTED = ("l2p-against-avalanche", "prompts-against-pilot")


def _gb(s: float, gb: float) -> str:
    return f"{s:.1f} s, {gb:.2f} GB"


def _blocks(row: dict) -> str:
    k = int(row["checkpoint_blocks"])
    return "card defaults" if k == 0 else f"checkpoint_blocks: {k}"


def _against(name: str, rows: list[dict]) -> list[tuple[str, str]]:
    return [
        (
            f"{name}, {_blocks(r)}",
            f"{r['time_ratio']:.2f}x time, {r['memory_ratio']:.2f}x memory "
            f"({_gb(r['seconds'], r['peak_rss_gb'])})",
        )
        for r in rows
    ]


def _percent(share: float) -> str:
    return f"{100 * share:.0f} %"


def headline(key: str, r: dict) -> list[tuple[str, str]]:
    """The rows a reader compares, from figure ``key``'s result ``r``."""
    if key == "feature-cache":
        return [
            (
                "first invocation / second (features from the cache)",
                f"{r['ratio']:.2f}x ({r['first_s']:.1f} s vs {r['second_s']:.1f} s)",
            )
        ]
    if key == "tosca-evaluation":
        return [
            (
                "ours (one pass, modules batched) vs a backbone pass per module, T = 10, batch 8",
                f"{r['ratio']:.1f}x ({r['ours_s']:.2f} s vs {r['per_module_backbone_s']:.1f} s)",
            )
        ]
    if key == "loop-overhead":
        return [
            (
                "Avalanche loop / bare loop",
                f"{r['ratio']:.2f}x ({r['avalanche_s']:.2f} s vs {r['bare_s']:.2f} s)",
            )
        ]
    if key == "l2p-against-avalanche":
        peer = r["avalanche"]
        return [
            ("Avalanche", _gb(peer["seconds"], peer["peak_rss_gb"])),
            *_against("ours", r["ours"]),
        ]
    if key == "vit-extraction":
        peaks = r["gemm_peak_gflops"]
        rows = [
            (
                label,
                f"{r[label]['images_per_s']:.2f} img/s = "
                f"{_percent(r[label]['share_of_this_cpu_peak'])} of this CPU's "
                f"{precision} GEMM peak ({peaks[precision]:.0f} GFLOP/s), "
                f"{_percent(r[label]['share_of_reference_bf16_peak'])} of the 2,300 "
                "GFLOP/s of docs/references.md section 6",
            )
            for label, precision in (
                ("fp32", "fp32"),
                ("bf16", "bf16"),
                ("bf16 + bf16 weights", "bf16"),
            )
        ]
        acc = r["fmnist_last_acc"]
        return rows + [
            (
                "fmnist last accuracy, fp32 -> bf16",
                ", ".join(f"{m} {a['fp32']:.1f} -> {a['bf16']:.1f}" for m, a in acc.items()),
            )
        ]
    if key == "loop-under-load":
        old, new = r["old"], r["new"]
        return [
            (
                f"{new['threads']} thread (new), loaded / idle",
                f"{new['loaded_over_idle']:.2f}x ({new['idle_s']:.2f} s -> "
                f"{new['loaded_s']:.2f} s)",
            ),
            (
                f"{old['threads']} threads (old), loaded / idle",
                f"{old['loaded_over_idle']:.2f}x ({old['idle_s']:.2f} s -> "
                f"{old['loaded_s']:.2f} s)",
            ),
            ("loaded, old / new", f"{r['loaded_old_over_new']:.2f}x"),
        ]
    if key == "extraction-engines":
        peaks = r["peak_gflops"]
        rows = [
            ("matrix-multiply peak", ", ".join(f"{k} {v:,.0f} GFLOP/s" for k, v in peaks.items()))
        ]
        for name, e in r["engines"].items():
            # an engine's share of the peak of its own precision
            k = "bf16" if "bf16" in name and "bf16" in peaks else "fp32"
            shares = f"{_percent(e[f'share_of_{k}_peak'])} of the {k} peak"
            diff = (
                f"; largest feature difference against eager fp32 {e['max_abs_diff']:.2g}"
                if "max_abs_diff" in e
                else ""
            )
            rows.append(
                (name, f"{e['images_per_s']:.1f} img/s ({e['speedup']:.2f}x, {shares}){diff}")
            )
        return rows
    if key == "prompts-against-pilot":
        rows = []
        for method, name in (("dualprompt", "DualPrompt"), ("coda-prompt", "CODA-Prompt")):
            pilot = r[method]["pilot"]
            rows.append((f"{name}, PILOT", _gb(pilot["seconds"], pilot["peak_rss_gb"])))
            rows += _against(f"{name}, ours", r[method]["ours"])
        return rows
    if key == "process-exit":
        return [
            (
                "saved per process",
                f"{r['saved_per_process_s']:.2f} s (median teardown - median quick exit)",
            ),
            (
                "CPython's teardown",
                f"{min(r['teardown_s']):.2f}-{max(r['teardown_s']):.2f}"
                f" s (median {r['median_teardown_s']:.2f} s)",
            ),
            (
                "quick exit",
                f"{min(r['quick_exit_s']):.3f}-{max(r['quick_exit_s']):.3f} s "
                f"(median {r['median_quick_exit_s']:.3f} s)",
            ),
        ]
    raise KeyError(key)


def precision_of(key: str, r: dict) -> str:
    """``meta.precision`` of figure ``key``'s result ``r``."""
    if key in NESTED:
        ours = r["ours"] if key == "l2p-against-avalanche" else r["dualprompt"]["ours"]
        return ours[0]["precision"]
    if key == "feature-cache":
        import torch

        from cl_bench.engine.environment import resolve_precision

        return resolve_precision("auto", torch.device("cpu"))
    if key == "vit-extraction":
        return "fp32, bf16"
    if key == "extraction-engines":
        return "fp32, bf16" if "bf16" in r["peak_gflops"] else "fp32"
    if key == "process-exit":
        return "n/a (no arithmetic measured)"
    return "fp32"


def record(key: str, result: dict, args: list[str]) -> Path | None:
    """Figure ``key``'s result as bench/results/KEY-DATE-CPU.json, made by ``python ARGS``;
    nothing where it was not measured (a missing peer). Returns the file."""
    from bench.measurements import command_line, write

    if "not_measured" in result:
        return None
    data = {key: result} if key in NESTED else result
    path = write(key, headline(key, result), data, precision_of(key, result), command_line(args))
    print(f"({key}) recorded in {path.relative_to(BENCH.parent)}", file=sys.stderr)
    return path


def module_of(figure: str):
    """The bench module of ``figure`` (``loop-overhead``: bench.loop_overhead)."""
    return importlib.import_module(f"bench.{figure.replace('-', '_')}")


def main(which: list[str]) -> dict:
    unknown = [k for k in which if k not in FIGURES]
    if unknown:
        print(
            f"usage: python -m bench.run [{' '.join(FIGURES)}]; unknown: {' '.join(unknown)}",
            file=sys.stderr,
        )
        sys.exit(2)
    results = {}
    for key in which or list(FIGURES):
        results[key] = module_of(key).main()
        print(key, json.dumps(results[key]), flush=True)
        record(key, results[key], ["-m", "bench.run", key])
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
