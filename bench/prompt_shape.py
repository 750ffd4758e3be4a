"""Figures l2p-against-avalanche and prompts-against-pilot, our side (and figure
prompt-shape alone): one prompt method (L2P, DualPrompt or CODA-Prompt) at its
card defaults on the shape Avalanche 0.6.0's LearningToPrompt was measured on
(docs/references.md section 6: 17.9 s, 2.77 GB peak RSS): ViT-B/16 random weights,
224 px, 4 classes x 4 training images, 2 experiences, 1 epoch, batch 8, 8 test
images evaluated after each experience. Run as its own process so that the
peak RSS is this workload's alone; the time covers model creation, training
and evaluation (imports excluded, as they are in the reference figure's
setting they were not separately reported; both are printed).

    python -m bench.prompt_shape METHOD [precision] [checkpoint_blocks]

As the runner does for a request without fine-tuning methods, the frozen ViT
keeps its matrix-multiply weights in bf16 under bf16 autocast (same numbers),
and the queries come from the feature store (one backbone pass per image)."""

from __future__ import annotations

import json
import sys
import time
from types import SimpleNamespace

T_IMPORT = time.perf_counter()
import torch  # noqa: E402

from bench.common import peak_rss_gb  # noqa: E402
from cl_bench.api import UserError  # noqa: E402
from cl_bench.backbones import load_backbone  # noqa: E402
from cl_bench.cards.catalogue import load_method  # noqa: E402
from cl_bench.cards.strategy import strategy_of  # noqa: E402
from cl_bench.engine.environment import resolve_precision  # noqa: E402
from cl_bench.engine.features import FeatureStore  # noqa: E402
from cl_bench.engine.recording import Recorder  # noqa: E402
from cl_bench.engine.runner import quiet_evaluator  # noqa: E402
from cl_bench.scenarios.stream import build_stream  # noqa: E402

METHODS = ("l2p", "dualprompt", "coda-prompt")


def main(method: str, precision: str = "auto", checkpoint_blocks: int = 0) -> dict:
    imports = time.perf_counter() - T_IMPORT
    precision = resolve_precision(precision, torch.device("cpu"))
    card = load_method(method)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    backbone = load_backbone("vit_base_patch16_224", "random")
    backbone.precision = precision
    if precision == "bf16":
        backbone.store_matmul_weights_in_bf16()
    g = torch.Generator().manual_seed(0)
    train_x = torch.rand(16, 3, 224, 224, generator=g)
    train_y = torch.arange(4).repeat_interleave(4)
    test_x = torch.rand(8, 3, 224, 224, generator=g)
    test_y = torch.arange(4).repeat_interleave(2)
    data = SimpleNamespace(
        name="prompt-shape",
        fingerprint="prompt-shape",
        on_disk=False,
        train_x=train_x,
        test_x=test_x,
    )
    store = FeatureStore(torch.device("cpu"), precision=precision, progress=False, use_disk=False)
    stream = build_stream(
        train_x,
        train_y,
        test_x,
        test_y,
        [0, 1, 2, 3],
        [2, 2],
        test_shuffle=False,
        seed=0,
        train_query=store.get(backbone, data, "train"),
        test_query=store.get(backbone, data, "test"),
    )
    params = dict(
        card.params, epochs=1, batch_size=8, eval_batch_size=8, checkpoint_blocks=checkpoint_blocks
    )
    strategy = strategy_of(card)(
        params=params,
        backbone=backbone,
        n_classes=4,
        device=torch.device("cpu"),
        plugins=[Recorder(stream.task_of_label, progress=False)],
        evaluator=quiet_evaluator(),
    )
    for exp in stream.train:
        strategy.train(exp, eval_streams=[])
        strategy.eval(stream.seen_test[-1])  # all 8 test images, as the reference did
    return {
        "method": method,
        "precision": precision,
        "checkpoint_blocks": checkpoint_blocks,
        "seconds": time.perf_counter() - t0,
        "imports_s": imports,
        "peak_rss_gb": peak_rss_gb(),
        "threads": torch.get_num_threads(),
    }


def arguments(argv: list[str]) -> tuple[str, str, int]:
    """``METHOD [precision] [checkpoint_blocks]``, each checked before anything runs;
    anything else exits 2 with what is wrong and the usage."""
    problem = None
    if not argv or argv[0] not in METHODS or len(argv) > 3:
        problem = f"got {' '.join(argv)!r}"
    elif len(argv) > 2 and not argv[2].isdigit():
        problem = f"checkpoint_blocks {argv[2]!r} is not an integer >= 0"
    else:
        try:
            resolve_precision(argv[1] if len(argv) > 1 else "auto", torch.device("cpu"))
        except UserError as e:
            problem = str(e)
    if problem:
        print(
            f"{problem}\nusage: python -m bench.prompt_shape {{{','.join(METHODS)}}} "
            "[precision] [checkpoint_blocks >= 0]",
            file=sys.stderr,
        )
        sys.exit(2)
    return argv[0], argv[1] if len(argv) > 1 else "auto", int(argv[2]) if len(argv) > 2 else 0


if __name__ == "__main__":
    print(json.dumps(main(*arguments(sys.argv[1:]))))
