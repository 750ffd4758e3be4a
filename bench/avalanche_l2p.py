"""Figure l2p-against-avalanche, the peer side: Avalanche 0.6.0's own
``LearningToPrompt`` on the shape of ``bench.prompt_shape`` (ViT-B/16 random weights,
224 px, 4 classes x 4 training images, 2 experiences of 2 classes, 1 epoch, batch 8, the
8 test images evaluated after each experience). Runs in bench/.venv-avalanche (timm
0.6.13), never in the project's environment, so it imports neither cl_bench nor timm
1.x; prints one JSON line. The time covers model creation, training and evaluation, as
ours does."""

from __future__ import annotations

import json
import resource
import time

T_IMPORT = time.perf_counter()
import torch  # noqa: E402
from avalanche.benchmarks import nc_benchmark  # noqa: E402
from avalanche.training.plugins import EvaluationPlugin  # noqa: E402
from avalanche.training.supervised import LearningToPrompt  # noqa: E402
from torch.utils.data import TensorDataset  # noqa: E402


class Labelled(TensorDataset):
    """Images and labels, with the ``targets`` Avalanche splits classes by."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        super().__init__(x, y)
        self.targets = y.tolist()


def main() -> dict:
    imports = time.perf_counter() - T_IMPORT
    t0 = time.perf_counter()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    train = Labelled(torch.rand(16, 3, 224, 224, generator=g), torch.arange(4).repeat_interleave(4))
    test = Labelled(torch.rand(8, 3, 224, 224, generator=g), torch.arange(4).repeat_interleave(2))
    benchmark = nc_benchmark(
        train, test, n_experiences=2, task_labels=False, fixed_class_order=[0, 1, 2, 3]
    )
    strategy = LearningToPrompt(  # the paper's settings are its defaults; no weights fetched
        model_name="vit_base_patch16_224",
        pretrained=False,
        num_classes=4,
        train_mb_size=8,
        train_epochs=1,
        eval_mb_size=8,
        device="cpu",
        evaluator=EvaluationPlugin(loggers=[]),
    )
    for experience in benchmark.train_stream:
        strategy.train(experience)
        strategy.eval(benchmark.test_stream)  # all 8 test images
    return {
        "seconds": time.perf_counter() - t0,
        "imports_s": imports,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
