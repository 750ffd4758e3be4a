"""Figure extraction-engines: frozen EfficientNet-Lite0 extraction on this CPU,
inference engines side by side.

The default run's cost is its backbone pass: 6,000 embedded Fashion-MNIST images at
224 px, 0.768 GFLOPs each as cl-bench's accounting counts them (README, Reports
table). Each engine gets the same normalised batches of the embedded training images;
the figure is images/s (best of ``repeat`` passes), its share of this CPU's fp32
(and, where the CPU has bf16 units, bf16) matrix-multiply peak measured in the same
process, and the largest feature difference against torch eager fp32 with the share of
features whose fp16 copy (what the feature store keeps) changes.

    python -m bench.extraction_engines [images] [batch]

Engines: torch eager in channels_last (``Backbone.features``, what runs with
``CL_BENCH_FROZEN_RUNTIME=torch``) and in the default layout; a frozen TorchScript graph
(``torch.jit.freeze`` + ``optimize_for_inference``); OpenVINO through
``cl_bench.backbones.compiled.CompiledPass`` (what ``cl-bench run`` extracts with on the
CPU; in the lock), as it runs (two streams, slices of 8) and in its earlier layout (one
stream over the whole batch); ONNX Runtime when importable (not in the lock: ``pip install
onnxruntime onnx`` into a scratch folder on ``PYTHONPATH``). Prints one JSON line and
records it as figure extraction-engines (``bench.run.record``)."""

from __future__ import annotations

import copy
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bench.common import timed
from bench.vit_extraction import gemm_gflops
from cl_bench.backbones.base import Backbone, PreLogits
from cl_bench.backbones.compiled import CompiledPass, native_bf16, openvino_version
from cl_bench.backbones.efficientnet import efficientnet_lite0
from cl_bench.engine.environment import bf16_switch
from cl_bench.scenarios.transforms import ToModelInput

LITE0_GFLOPS = 0.768
DATA = Path(__file__).resolve().parents[1] / "cl_bench" / "data" / "fmnist_subset.npz"


def torch_engines(
    pooled: nn.Module, plain: nn.Module, example: torch.Tensor
) -> dict[str, Callable]:
    """``pooled`` keeps its weights in channels_last (as ``Backbone`` does), ``plain`` is
    a copy in the default layout."""

    def eager(model, layout):
        def run(x):
            with torch.inference_mode():
                return model(x.contiguous(memory_format=layout))

        return run

    with torch.no_grad():
        frozen = torch.jit.optimize_for_inference(
            torch.jit.freeze(
                torch.jit.trace(
                    pooled, example.contiguous(memory_format=torch.channels_last), check_trace=False
                )
            )
        )

    def script(x):
        with torch.no_grad():
            return frozen(x.contiguous(memory_format=torch.channels_last))

    return {
        "torch eager channels_last": eager(pooled, torch.channels_last),
        "torch eager contiguous": eager(plain, torch.contiguous_format),
        "torchscript freeze": script,
    }


# cl-bench's pass as it runs (streams and slices: cl_bench.backbones.compiled), and the
# layout it had before: one stream over the whole batch
LAYOUTS = {"": {}, ", one stream over the batch": {"streams": 1, "slice_size": None}}


def bf16_rows() -> bool:
    """bf16 rows where the CPU has bf16 units, unless ``CL_BENCH_CPU_BF16=0`` asks for an
    fp32-only machine (as when oneDNN is held to AVX2 with ``ONEDNN_MAX_CPU_ISA``)."""
    return native_bf16() and bf16_switch() is not False


def runtime_engines(
    backbone: Backbone, pooled: nn.Module, example: torch.Tensor, threads: int
) -> dict:
    """OpenVINO through cl-bench's own compiled pass (fp32, and bf16 where the CPU has
    bf16 units: what ``cl-bench run`` uses) and ONNX Runtime, each with the seconds its
    conversion took; an engine that is not installed is named. ``pooled``: the model in
    the default layout."""
    engines, missing = {}, []
    version = openvino_version()
    if version is None:
        missing.append("openvino")
    else:
        for precision in ["fp32", "bf16"] if bf16_rows() else ["fp32"]:
            backbone.precision = precision
            for layout, options in LAYOUTS.items():
                t0 = time.perf_counter()
                compiled = CompiledPass(backbone, threads, **options)
                engines[f"openvino {version} {precision}{layout}"] = (
                    compiled,
                    time.perf_counter() - t0,
                )
    try:
        import onnxruntime as ort
    except ImportError:
        missing.append("onnxruntime")
    else:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "lite0.onnx")
            torch.onnx.export(
                pooled,
                example,
                path,
                dynamo=False,
                input_names=["x"],
                dynamic_axes={"x": {0: "batch"}},
            )
            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        convert_s = time.perf_counter() - t0

        def run_ort(x):
            return torch.from_numpy(session.run(None, {"x": x.contiguous().numpy()})[0])

        engines[f"onnxruntime {ort.__version__}"] = (run_ort, convert_s)
    return {"engines": engines, "missing": missing}


def measure(
    run: Callable, batches: list[torch.Tensor], reference: torch.Tensor | None, repeat: int
) -> dict:
    run(batches[0])
    out: list[torch.Tensor] = []
    seconds = timed(lambda: out.__setitem__(slice(None), [run(b) for b in batches]), repeat)
    features = torch.cat(out).float()
    n = len(features)
    row = {"images_per_s": n / seconds, "gflops": n * LITE0_GFLOPS / seconds}
    if reference is not None:
        row["max_abs_diff"] = float((features - reference).abs().max())
        row["fp16_changed_share"] = float((features.half() != reference.half()).float().mean())
    return row, features


def main(images: int = 256, batch: int = 32, repeat: int = 2) -> dict:
    threads = torch.get_num_threads()
    backbone = efficientnet_lite0("pretrained")
    raw = torch.from_numpy(np.load(DATA)["train_x"][:images]).unsqueeze(1)
    batches = [
        backbone.normalize(ToModelInput(backbone.input_size)(raw[s : s + batch]))
        for s in range(0, images, batch)
    ]
    peaks = {"fp32": gemm_gflops(torch.float32)}
    if bf16_rows():
        peaks["bf16"] = gemm_gflops(torch.bfloat16)
    pooled = PreLogits(backbone.model).eval()
    plain = copy.deepcopy(pooled).to(memory_format=torch.contiguous_format)
    rows, reference = {}, None
    for name, run in torch_engines(pooled, plain, batches[0]).items():
        rows[name], features = measure(run, batches, reference, repeat)
        reference = features if reference is None else reference
    found = runtime_engines(backbone, plain, batches[0], threads)
    for name, (run, convert_s) in found["engines"].items():
        rows[name], _ = measure(run, batches, reference, repeat)
        rows[name]["convert_s"] = convert_s
    for row in rows.values():
        row.update({f"share_of_{k}_peak": row["gflops"] / v for k, v in peaks.items()})
    base = rows["torch eager channels_last"]["images_per_s"]
    for row in rows.values():
        row["speedup"] = row["images_per_s"] / base
    return {
        "threads": threads,
        "images": images,
        "batch": batch,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "peak_gflops": peaks,
        "engines": rows,
        "not_installed": found["missing"],
    }


def arguments(argv: list[str]) -> list[int]:
    """``[images] [batch]``: whole numbers, images from 1 to the 5,000 embedded training
    images, batch at least 1; anything else exits 2 with the usage."""
    try:
        values = [int(a) for a in argv]
    except ValueError:
        values = []
    if (
        len(argv) > 2
        or len(values) != len(argv)
        or not all(v >= 1 for v in values)
        or (values and values[0] > 5000)
    ):
        print(
            "usage: python -m bench.extraction_engines [images 1-5000] [batch >= 1]; "
            f"got {' '.join(argv)!r}",
            file=sys.stderr,
        )
        sys.exit(2)
    return values


if __name__ == "__main__":
    from bench.run import record

    result = main(*arguments(sys.argv[1:]))
    print(json.dumps(result))
    record("extraction-engines", result, ["-m", "bench.extraction_engines", *sys.argv[1:]])
