"""Figure tosca-evaluation: TOSCA evaluation at T = 10: one backbone pass + all modules
in one batched call (cl-bench) vs the official code's one full backbone pass per stored
module."""

from __future__ import annotations

import torch

from bench.common import timed
from cl_bench.backbones import load_backbone
from cl_bench.strategies.tosca import ToscaNet


def main(tasks: int = 10, batch: int = 8) -> dict:
    backbone = load_backbone("vit_base_patch16_224", "random")
    net = ToscaNet(backbone.dim, 16, 16, "tosca", "sample", "xavier")
    for t in range(tasks):
        net.add_task(20 * (t + 1))
    net.eval()
    x = torch.rand(batch, 3, 224, 224)

    @torch.no_grad()
    def ours():
        return net(backbone.features(x))

    @torch.no_grad()
    def official():
        outs = []
        for m in net.luca:  # the official code reloads module i and re-runs the ViT
            outs.append(net.classifier(m(backbone.features(x))))
        return torch.stack(outs)

    ours()
    t_ours, t_official = timed(ours, repeat=2), timed(official, repeat=1)
    return {"ours_s": t_ours, "per_module_backbone_s": t_official, "ratio": t_official / t_ours}


if __name__ == "__main__":
    import json

    from bench.run import record

    result = main()
    print(json.dumps(result))
    record("tosca-evaluation", result, ["-m", "bench.tosca_evaluation"])
