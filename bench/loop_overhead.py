"""Figure loop-overhead: the features-only training loop through Avalanche vs a bare PyTorch loop
on the same tensors: TOSCA's 20 epochs on one task of 2 classes x 500 features."""

from __future__ import annotations

import torch
from torch import nn

from bench.common import timed
from cl_bench.cards.catalogue import load_method
from cl_bench.contract.optimizer import make_optimizer
from cl_bench.engine.recording import Recorder
from cl_bench.engine.runner import quiet_evaluator
from cl_bench.scenarios.stream import build_stream
from cl_bench.strategies.tosca import Tosca, ToscaNet


def data(dim: int = 1280, per_class: int = 500):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2 * per_class, dim, generator=g)
    y = torch.arange(2).repeat_interleave(per_class)
    return x, y


def avalanche_loop(x, y, params) -> None:
    stream = build_stream(x, y, x, y, [0, 1], [2], test_shuffle=False, seed=0)
    backbone = type("B", (), {"dim": x.shape[-1]})()
    strategy = Tosca(
        params=params,
        backbone=backbone,
        n_classes=2,
        device=torch.device("cpu"),
        plugins=[Recorder(stream.task_of_label, progress=False)],
        evaluator=quiet_evaluator(),
    )
    strategy.train(stream.train[0], eval_streams=[])


def bare_loop(x, y, params) -> None:
    net = ToscaNet(
        x.shape[1],
        params["mlp_ratio"],
        params["se_ratio"],
        params["flow"],
        params["selection"],
        params["init"],
    )
    net.add_task(2)
    opt, sched = make_optimizer(params, net.parameters())
    loss_fn = nn.CrossEntropyLoss()
    bs = params["batch_size"]
    for _ in range(params["epochs"]):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), bs):
            idx = perm[i : i + bs]
            opt.zero_grad()
            loss = loss_fn(net(x[idx]), y[idx]) + params["l1"] * sum(
                p.abs().sum() for p in net.luca[-1].parameters()
            )
            loss.backward()
            opt.step()
        sched.step()


def main() -> dict:
    params = load_method("tosca").params
    x, y = data()
    torch.manual_seed(0)
    ava = timed(lambda: avalanche_loop(x, y, params), repeat=3)
    bare = timed(lambda: bare_loop(x, y, params), repeat=3)
    return {"avalanche_s": ava, "bare_s": bare, "ratio": ava / bare}


if __name__ == "__main__":
    import json

    from bench.run import record

    result = main()
    print(json.dumps(result))
    record("loop-overhead", result, ["-m", "bench.loop_overhead"])
