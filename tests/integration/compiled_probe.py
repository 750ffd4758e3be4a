"""What test_compiled_features.py asserts about OpenVINO-compiled features and runs,
measured in a process of its own (run as a script with a scratch folder; prints one JSON
object): once OpenVINO is imported, a pytest process's later in-process CLI runs
(click's CliRunner) lose pytest's captured stderr, so the test process never imports
it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

from cl_bench.backbones.base import TORCH_RUNTIME
from cl_bench.backbones.compiled import SWITCH, frozen_features, native_bf16, runtime_for
from cl_bench.backbones.efficientnet import efficientnet_lite0
from cl_bench.scenarios.transforms import ToModelInput

DATA = Path(__file__).resolve().parents[2] / "cl_bench" / "data" / "fmnist_subset.npz"
SIZE = 64


def lite0(runtime: str, precision: str = "fp32"):
    backbone = efficientnet_lite0("pretrained", SIZE)
    backbone.precision, backbone.runtime = precision, runtime
    return backbone


def similarity(features: torch.Tensor, reference: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(features, reference).min())


def fp32(images: torch.Tensor, ov: str) -> dict:
    backbone = lite0(ov)
    compiled, eager = frozen_features(backbone, images), backbone.features(images)
    first = backbone._compiled
    chunks = torch.cat([frozen_features(backbone, c) for c in images.split(7)])
    return {
        "dtype": str(compiled.dtype),
        "shape": list(compiled.shape),
        "identical_to_eager": torch.equal(compiled, eager),
        "max_diff_share": float((compiled - eager).abs().max() / eager.abs().max()),
        "fp16_changed_share": float((compiled.half() != eager.half()).float().mean()),
        "repeat_equal": torch.equal(frozen_features(backbone, images), compiled),
        "chunks_equal": torch.equal(chunks, compiled),
        "single_equal": torch.equal(frozen_features(backbone, images[5:6]), compiled[5:6]),
        "compiled_once": backbone._compiled is first,
        "streams": len(first.requests),
        "threads": torch.get_num_threads(),
    }


def recompiled(images: torch.Tensor, ov: str) -> dict:
    backbone = lite0(ov)
    before = frozen_features(backbone, images)
    first = backbone._compiled
    with torch.no_grad():
        backbone.model.bn2.running_mean.add_(0.5)  # in place, as batch-norm adaptation does
    after = frozen_features(backbone, images)
    changed = {
        "new_compilation": backbone._compiled is not first,
        "moved": float((after - before).abs().max()),
        "max_diff_share": float(
            (after - backbone.features(images)).abs().max() / after.abs().max()
        ),
    }
    torch.set_num_threads(1)
    frozen_features(backbone, images[:2])
    return {
        **changed,
        "threads_after_set_to_1": backbone._compiled.threads,
        "streams_after_set_to_1": len(backbone._compiled.requests),
    }


def bf16(images: torch.Tensor, ov: str) -> dict | None:
    if not native_bf16():
        return None
    eager = lite0(TORCH_RUNTIME)
    reference = eager.features(images)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast_bf16 = eager.features(images)
    backbone = lite0(ov, "bf16")
    compiled = frozen_features(backbone, images)
    return {
        "max_diff_share": float((compiled - reference).abs().max() / reference.abs().max()),
        "similarity": similarity(compiled, reference),
        "autocast_similarity": similarity(autocast_bf16, reference),
        "repeat_equal": torch.equal(frozen_features(backbone, images), compiled),
    }


def runs(out: Path) -> dict:
    """The same SimpleCIL and APER w/ BN runs (APER's adapted CNN stays in torch, its
    frozen features do not) through torch eager and through the compiled runtime (the
    CLI in this process, with its own feature cache): what each printed, the accuracy
    matrices by method and runtime, the result files and the cache entries."""
    from typer.testing import CliRunner

    from cl_bench.commands.cli import app

    printed = {}
    for runtime in ("torch", "auto"):
        os.environ[SWITCH] = runtime
        result = CliRunner().invoke(
            app,
            [
                "run",
                "--methods",
                "simplecil,aper",
                "--set",
                "aper.adapt=bn",
                "--set",
                "aper.epochs=1",
                "--scenario",
                "synthetic",
                "--image-size",
                "32",
                "--precision",
                "fp32",
                "--out",
                str(out / "out"),
                "--no-progress",
            ],
        )
        printed[runtime] = {"exit_code": result.exit_code, "stdout": result.stdout}
    records = [json.loads(p.read_text()) for p in (out / "out").glob("runs/*/*/*.json")]
    return {
        "printed": printed,
        "acc_matrix": {
            f"{r['method']} {r['config']['backbone'].get('runtime')}": r["acc_matrix"]
            for r in records
        },
        "results": len(records),
        "cache_entries": len(list((out / "cache").glob("*/*.npy"))),
    }


def main(out: Path) -> dict:
    os.environ["CL_BENCH_CACHE"] = str(out / "cache")
    found = {"cli": runs(out)}
    os.environ[SWITCH] = "auto"
    ov = runtime_for("cnn", "cpu", "fp32")
    images = ToModelInput(SIZE)(torch.from_numpy(np.load(DATA)["train_x"][:24]).unsqueeze(1))
    found.update({"runtime": ov, "fp32": fp32(images, ov), "bf16": bf16(images, ov)})
    found["telemetry"] = [
        sys.modules[f"openvino.tools.ovc.{m}"].tm.__name__
        for m in ("convert_impl", "telemetry_utils")
    ]
    found["recompiled"] = recompiled(images, ov)  # last: it leaves one thread
    return found


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
