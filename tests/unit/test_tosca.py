"""ToscaNet, the cosine classifier, prototypes, and the TOSCA / SimpleCIL
strategies end to end on small separable features (TOSCA paper, arXiv 2502.14762)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from avalanche.benchmarks.utils.classification_dataset import (
    _make_taskaware_tensor_classification_dataset as tensor_dataset,
)
from torch.testing import assert_close

from cl_bench.cards.catalogue import load_method
from cl_bench.contract import drive
from cl_bench.engine.recording import Recorder
from cl_bench.engine.runner import quiet_evaluator
from cl_bench.scenarios.order import class_order, task_split
from cl_bench.scenarios.stream import build_stream, remap_labels
from cl_bench.strategies.blocks.heads import CosineClassifier, class_means, set_prototypes
from cl_bench.strategies.blocks.luca import LuCA, entropy
from cl_bench.strategies.simplecil import SimpleCIL
from cl_bench.strategies.tosca import Tosca, ToscaNet

CPU = torch.device("cpu")
D = 32
# LuCA(32), ratios 16 -> hidden 2: adapter 32*2+2 + 2*32+32 = 162, LayerNorm 64,
# calibrator 2*32*2 = 128: 354 parameters
LUCA_32 = 354


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def make_net(init: str = "xavier", selection: str = "sample", dim: int = 16) -> ToscaNet:
    return ToscaNet(dim, mlp_ratio=4, se_ratio=4, flow="tosca", selection=selection, init=init)


# ----------------------------------------------------------------------------- ToscaNet


def test_luca_32_count():
    assert n_params(LuCA(D)) == LUCA_32


def test_add_task_grows_classifier_and_freezes_old_modules():
    torch.manual_seed(0)
    net = make_net()
    assert net.classifier.n_classes == 0 and len(net.luca) == 0
    net.add_task(2)
    assert net.classifier.weight.shape == (2, 16) and len(net.luca) == 1
    assert all(p.requires_grad for p in net.luca[0].parameters())
    net.add_task(4)
    assert net.classifier.weight.shape == (4, 16) and len(net.luca) == 2
    assert not any(p.requires_grad for p in net.luca[0].parameters())
    assert all(p.requires_grad for p in net.luca[1].parameters())
    assert net.classifier.weight.requires_grad and net.classifier.sigma.requires_grad
    net.add_task(6)
    assert [any(p.requires_grad for p in m.parameters()) for m in net.luca] == [False, False, True]


def two_task_net(selection: str) -> ToscaNet:
    torch.manual_seed(1)
    net = make_net(selection=selection)
    net.add_task(3)
    net.add_task(6)
    with torch.no_grad():  # sharp, random classifier so that the entropies differ clearly
        net.classifier.weight.normal_()
        net.classifier.sigma.fill_(8.0)
        for m in net.luca:
            for p in m.parameters():
                p.add_(0.5 * torch.randn_like(p))
    return net


def test_eval_forward_picks_lowest_entropy_module_per_sample():
    net = two_task_net("sample").eval()
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = net(x)
        per_module = [net.classifier(m(x)) for m in net.luca]
    expected, chosen = [], []
    for b in range(x.shape[0]):
        hs = []
        for logits in per_module:
            p = torch.softmax(logits[b], -1)
            hs.append(float(-(p * torch.log(p + 1e-9)).sum()))
        k = min(range(len(hs)), key=hs.__getitem__)
        chosen.append(k)
        expected.append(per_module[k][b])
    assert_close(out, torch.stack(expected))
    assert torch.equal(net.routing, torch.tensor(chosen))
    assert set(chosen) == {0, 1}  # the case really exercises per-sample routing
    # and agrees with a stack / entropy / argmin over modules
    stacked = torch.stack(per_module)
    assert torch.equal(net.routing, entropy(stacked).argmin(0))


def test_eval_forward_batch_rule_uses_one_module():
    net = two_task_net("batch").eval()
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = net(x)
        stacked = torch.stack([net.classifier(m(x)) for m in net.luca])
    k = int(entropy(stacked).mean(1).argmin())
    assert torch.equal(net.routing, torch.full((32,), k))
    assert_close(out, stacked[k])


def test_train_forward_uses_newest_module_only():
    net = two_task_net("sample").train()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    out = net(x)
    assert_close(out, net.classifier(net.luca[1](x)))
    assert not torch.allclose(out, net.classifier(net.luca[0](x)))
    assert net.routing is None
    assert out.requires_grad


@pytest.mark.parametrize("init, calls", [("official", [0, 1, 2]), ("xavier", [1, 2, 3])])
def test_init_official_skips_reset_of_first_module(monkeypatch, init, calls):
    counter = {"n": 0}
    original = LuCA.reset_parameters

    def counting(self):
        counter["n"] += 1
        original(self)

    monkeypatch.setattr(LuCA, "reset_parameters", counting)
    torch.manual_seed(0)
    net = make_net(init=init)
    seen = []
    for k in (2, 4, 6):
        net.add_task(k)
        seen.append(counter["n"])
    assert seen == calls
    # PyTorch's default Linear init has non-zero biases, Xavier reset zeroes them
    first_bias_zero = bool(torch.count_nonzero(net.luca[0].adapter[0].bias) == 0)
    assert first_bias_zero is (init == "xavier")
    for m in net.luca[1:]:
        assert torch.count_nonzero(m.adapter[0].bias) == 0
        assert torch.count_nonzero(m.adapter[2].bias) == 0


# ----------------------------------------------------------------------------- CosineClassifier


def test_cosine_classifier_grow():
    torch.manual_seed(0)
    clf = CosineClassifier(16)
    clf.grow(3)
    w0 = clf.weight.detach().clone()
    bound = 1.0 / math.sqrt(16)
    assert w0.shape == (3, 16)
    assert float(w0.abs().max()) <= bound
    assert float(w0.abs().max()) > 0.5 * bound and float(w0.std()) > 0.1 * bound
    with torch.no_grad():
        clf.sigma.fill_(2.5)
    clf.grow(5)
    assert clf.weight.shape == (5, 16) and clf.n_classes == 5
    assert torch.equal(clf.weight[:3].detach(), w0)
    assert torch.equal(clf.weight[3:].detach(), torch.zeros(2, 16))
    assert float(clf.sigma.detach()) == 2.5
    assert clf.weight.requires_grad
    before = clf.weight
    clf.grow(4)  # never shrinks
    clf.grow(5)
    assert clf.weight is before


def test_cosine_classifier_forward_is_scaled_cosine():
    torch.manual_seed(0)
    clf = CosineClassifier(8)
    clf.grow(4)
    with torch.no_grad():
        clf.weight.normal_()
        clf.sigma.fill_(3.0)
    f = torch.randn(5, 8)
    w = clf.weight.detach()
    cos = (f @ w.T) / (f.norm(dim=1, keepdim=True) * w.norm(dim=1))
    with torch.no_grad():
        assert_close(clf(f), 3.0 * cos)
    assert not CosineClassifier(8, learn_scale=False).sigma.requires_grad


def test_cosine_classifier_grow_keeps_frozen_weight_frozen():
    clf = CosineClassifier(8, learn_scale=False).requires_grad_(False)
    clf.grow(2)
    clf.grow(4)
    assert not clf.weight.requires_grad and not clf.sigma.requires_grad
    assert sum(p.numel() for p in clf.parameters() if p.requires_grad) == 0


# ----------------------------------------------------------------------------- prototypes


def tiny_dataset():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(23, 6, generator=g)
    y = torch.tensor([2, 3, 3, 2, 3] * 4 + [2, 2, 3])
    return x, y, tensor_dataset(x, y, task_labels=0, targets=y)


def test_class_means_across_batches():
    x, y, ds = tiny_dataset()
    lin = torch.nn.Linear(6, 4)
    classes, means = class_means(ds, lin, CPU, batch_size=4)  # several batches
    assert torch.equal(classes, torch.tensor([2, 3]))
    with torch.no_grad():
        f = lin(x)
    assert_close(means, torch.stack([f[y == 2].mean(0), f[y == 3].mean(0)]))


def test_set_prototypes_overwrites_only_dataset_classes():
    torch.manual_seed(0)
    x, y, ds = tiny_dataset()
    lin = torch.nn.Linear(6, 4)
    clf = CosineClassifier(4)
    clf.grow(2)
    old = clf.weight.detach().clone()
    set_prototypes(clf, ds, lin, CPU)
    assert clf.n_classes == 4  # grown to the highest label + 1
    assert torch.equal(clf.weight[:2].detach(), old)
    with torch.no_grad():
        f = lin(x)
    assert_close(clf.weight[2].detach(), f[y == 2].mean(0))
    assert_close(clf.weight[3].detach(), f[y == 3].mean(0))


# ----------------------------------------------------------------------------- end to end

N_CLASSES, N_TRAIN, N_TEST = 6, 30, 10


@pytest.fixture(scope="module")
def data():
    """Six well-separated classes in d = 32 (5 * e_c + noise), 3 tasks of 2,
    PILOT's seed-1993 order ([0, 2, 3, 4, 5, 1] for 6 classes)."""
    g = torch.Generator().manual_seed(0)
    centres = torch.zeros(N_CLASSES, D)
    centres[torch.arange(N_CLASSES), torch.arange(N_CLASSES)] = 5.0

    def sample(n):
        y = torch.arange(N_CLASSES).repeat_interleave(n)
        return centres[y] + 0.3 * torch.randn(len(y), D, generator=g), y

    train_x, train_y = sample(N_TRAIN)
    test_x, test_y = sample(N_TEST)
    order = class_order(N_CLASSES, 1993)
    sizes = task_split(N_CLASSES, 2, 2)
    stream = build_stream(train_x, train_y, test_x, test_y, order, sizes, test_shuffle=True, seed=0)
    return SimpleNamespace(
        train_x=train_x, train_pos=remap_labels(train_y, order), stream=stream, order=order
    )


def run(cls, params: dict, data, snapshot):
    """What runner.run_one does, with a snapshot of the strategy after each task."""
    torch.manual_seed(1993)
    recorder = Recorder(data.stream.task_of_label, progress=False)
    strategy = cls(
        params=params,
        backbone=SimpleNamespace(dim=D),
        n_classes=6,
        device=CPU,
        plugins=[recorder],
        evaluator=quiet_evaluator(),
    )
    snaps = []
    drive(
        strategy,
        data.stream,
        after_task=lambda done: snaps.append(snapshot(strategy, done - 1, data)),
    )
    return SimpleNamespace(strategy=strategy, recorder=recorder, snaps=snaps)


def tosca_snapshot(strategy, i, data):
    model = strategy.model
    opt_ids = {id(p) for g in strategy.optimizer.param_groups for p in g["params"]}
    with torch.no_grad():
        luca = model.luca[i].eval()
        feats = luca(data.train_x)
    return SimpleNamespace(
        weight=model.classifier.weight.detach().clone(),
        sigma=float(model.classifier.sigma.detach()),
        n_modules=len(model.luca),
        luca_is_newest=model.luca[-1] is luca,
        feats=feats,
        opt_covers_classifier=id(model.classifier.weight) in opt_ids,
        opt_covers_sigma=id(model.classifier.sigma) in opt_ids,
        opt_covers_newest=all(id(p) in opt_ids for p in model.luca[-1].parameters()),
        opt_covers_old=any(id(p) in opt_ids for m in model.luca[:-1] for p in m.parameters()),
    )


@pytest.fixture(scope="module")
def tosca_run(data):
    params = dict(load_method("tosca").params)
    params["epochs"] = 2
    assert params["selection"] == "sample" and params["init"] == "xavier"
    return run(Tosca, params, data, tosca_snapshot)


def test_tosca_prototypes_are_class_means_of_task_module(tosca_run, data):
    for i, task in enumerate(data.stream.tasks):
        snap = tosca_run.snaps[i]
        assert snap.luca_is_newest
        for c in task:
            expected = snap.feats[data.train_pos == c].mean(0)
            assert_close(snap.weight[c], expected)


def test_tosca_old_rows_keep_training(tosca_run, data):
    """The optimizer covers every classifier row and sigma (official behaviour):
    task 0's prototypes move while task 1 trains."""
    for snap in tosca_run.snaps:
        assert snap.opt_covers_classifier and snap.opt_covers_sigma and snap.opt_covers_newest
        assert not snap.opt_covers_old
    first, second = tosca_run.snaps[0], tosca_run.snaps[1]
    rows0 = data.stream.tasks[0]
    drift = (second.weight[rows0] - first.weight[rows0]).abs().max()
    assert float(drift) > 1e-4
    assert second.sigma != first.sigma


def test_tosca_modules_accuracy_and_matrix_shape(tosca_run):
    rec = tosca_run.recorder
    assert [len(r) for r in rec.acc_matrix] == [1, 2, 3]
    assert [s.n_modules for s in tosca_run.snaps] == [1, 2, 3]
    assert len(tosca_run.strategy.model.luca) == 3
    assert tosca_run.strategy.model.classifier.n_classes == N_CLASSES
    chance = 100.0 / N_CLASSES
    assert min(rec.acc_seen) > 80.0 > 4 * chance
    assert all(a > 70.0 for row in rec.acc_matrix for a in row)
    assert all(r is not None and 0.0 <= r <= 100.0 for r in rec.routing_acc)


def test_tosca_parameter_accounting(tosca_run):
    rec = tosca_run.recorder
    # trainable: the newest LuCA + all classifier rows (2, 4, 6 classes) * 32 + sigma
    assert rec.trainable == [LUCA_32 + 2 * D + 1, LUCA_32 + 4 * D + 1, LUCA_32 + 6 * D + 1]
    assert rec.trainable == [419, 483, 547]
    # stored: every LuCA + the classifier
    assert rec.stored == [k * LUCA_32 + 2 * k * D + 1 for k in (1, 2, 3)]
    assert rec.stored == [419, 837, 1255]


def simplecil_snapshot(strategy, i, data):
    return SimpleNamespace(weight=strategy.model.weight.detach().clone())


@pytest.fixture(scope="module")
def simplecil_run(data):
    return run(SimpleCIL, dict(load_method("simplecil").params), data, simplecil_snapshot)


def test_simplecil_rows_are_raw_class_means(simplecil_run, data):
    for i in range(len(data.stream.tasks)):
        w = simplecil_run.snaps[i].weight
        assert w.shape == (2 * (i + 1), D)
        for j in range(i + 1):  # current and earlier tasks: nothing moves
            for c in data.stream.tasks[j]:
                assert_close(w[c], data.train_x[data.train_pos == c].mean(0))


def test_simplecil_accuracy_is_perfect_on_separable_data(simplecil_run):
    rec = simplecil_run.recorder
    assert rec.acc_seen == [100.0, 100.0, 100.0]
    assert rec.acc_matrix == [[100.0], [100.0, 100.0], [100.0, 100.0, 100.0]]
    assert rec.routing_acc == [None, None, None]
    assert rec.stored == [2 * D + 1, 4 * D + 1, 6 * D + 1]  # prototypes + (frozen) sigma


def test_simplecil_reports_nothing_trainable(simplecil_run):
    # nothing is trained: the prototype rows must not count as trainable
    assert simplecil_run.recorder.trainable == [0, 0, 0]


def test_all_modules_in_one_batched_call_equals_the_loop():
    torch.manual_seed(0)
    net = ToscaNet(32, 16, 16, "tosca", "sample", "xavier")
    for n in (2, 4, 6):
        net.add_task(n)
    net.eval()
    x = torch.randn(7, 32)
    with torch.no_grad():
        batched = net.all_modules(x)
        loop = torch.stack([m(x) for m in net.luca])
    torch.testing.assert_close(batched, loop, rtol=1e-5, atol=1e-6)
    net.add_task(8)  # a new module invalidates the stacked weights
    with torch.no_grad():
        assert net.all_modules(x).shape == (4, 7, 32)


class AutogradL1Tosca(Tosca):
    """The L1 term as the official code writes it: through autograd, ``|theta|`` in the
    loss's graph."""

    def criterion(self) -> torch.Tensor:
        loss = self._criterion(self.mb_output, self.mb_y)
        if self.is_training:
            loss = loss + self.params["l1"] * sum(
                p.abs().sum() for p in self.model.luca[-1].parameters()
            )
        return loss

    def backward(self) -> None:
        self.loss.backward()


def trained_state(cls, params: dict, data) -> tuple[dict, list[float]]:
    losses: list[float] = []

    class Losses(cls):
        def optimizer_step(self):
            losses.append(float(self.loss))
            super().optimizer_step()

    out = run(Losses, params, data, lambda s, i, d: None)
    return {k: v.clone() for k, v in out.strategy.model.state_dict().items()}, losses


def test_l1_gradient_by_hand_is_autograds_bit_for_bit(data):
    """TOSCA adds the L1 term's gradient by hand; every parameter and loss of a
    three-task run is the autograd version's exactly, at an L1 weight large enough to
    move them (the run without the term ends elsewhere)."""
    params = dict(load_method("tosca").params, epochs=2, l1=0.01)
    ours, our_losses = trained_state(Tosca, params, data)
    theirs, their_losses = trained_state(AutogradL1Tosca, params, data)
    assert len(our_losses) == len(their_losses) > 10
    assert our_losses == their_losses
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert torch.equal(ours[k], theirs[k]), k
    without, _ = trained_state(Tosca, dict(params, l1=0.0), data)
    assert not torch.equal(without["luca.2.adapter.0.weight"], ours["luca.2.adapter.0.weight"])


def test_add_l1_gradient_sign_and_missing_gradient():
    from cl_bench.strategies.tosca import add_l1_gradient

    a = torch.nn.Parameter(torch.tensor([-2.0, 0.0, 3.0]))
    b = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    a.grad = torch.tensor([0.5, 0.5, 0.5])
    add_l1_gradient([a, b], 0.25)
    assert a.grad.tolist() == [0.25, 0.5, 0.75]
    assert b.grad.tolist() == [0.25, -0.25]


class AvalancheLoaderTosca(Tosca):
    """TOSCA reading its training batches through Avalanche 0.6's own loader."""

    def make_train_dataloader(self, **kwargs) -> None:
        super(Tosca, self).make_train_dataloader(**kwargs)


def test_gathered_batches_are_avalanches_bit_for_bit(data):
    """The gathered loader draws and yields what Avalanche's task-balanced loader does:
    the same batches over three epochs, and the global generator left in the same
    state (the sampler's permutations and the loader's base seeds)."""
    from avalanche.benchmarks.utils.data_loader import TaskBalancedDataLoader

    from cl_bench.strategies.blocks.gathered_batches import GatheredTaskBalancedLoader

    dataset = data.stream.train[1].dataset.train()
    epochs = {}
    for cls in (TaskBalancedDataLoader, GatheredTaskBalancedLoader):
        torch.manual_seed(7)
        loader = cls(dataset, oversample_small_groups=True, batch_size=5, shuffle=True)
        epochs[cls] = ([[list(b) for b in loader] for _ in range(3)], torch.get_rng_state())
    (theirs, their_state), (ours, our_state) = epochs.values()
    assert len(ours) == 3 and len(ours[0]) == math.ceil(len(dataset) / 5)
    for their_epoch, our_epoch in zip(theirs, ours, strict=True):
        for their_batch, our_batch in zip(their_epoch, our_epoch, strict=True):
            assert len(their_batch) == len(our_batch) == 3  # x, y, task label
            for a, b in zip(their_batch, our_batch, strict=True):
                assert a.dtype == b.dtype and torch.equal(a, b)
    assert not torch.equal(theirs[0][0][1], theirs[1][0][1])  # epochs are reshuffled
    assert torch.equal(their_state, our_state)


def test_tosca_trains_on_gathered_batches_as_on_avalanches(data):
    """A three-task run through the gathered loader equals one through Avalanche's own,
    every parameter and loss bit for bit; with augment_views the epoch's views come
    through Avalanche's loader."""
    from cl_bench.strategies.blocks.gathered_batches import GatheredTaskBalancedLoader

    params = dict(load_method("tosca").params, epochs=2)
    ours, our_losses = trained_state(Tosca, params, data)
    theirs, their_losses = trained_state(AvalancheLoaderTosca, params, data)
    assert our_losses == their_losses and len(our_losses) > 10
    for k in ours:
        assert torch.equal(ours[k], theirs[k]), k
    loaders = []

    class Loaders(Tosca):
        def make_train_dataloader(self, **kwargs) -> None:
            super().make_train_dataloader(**kwargs)
            loaders.append(type(self.dataloader))

    run(Loaders, params, data, lambda s, i, d: None)
    run(Loaders, dict(params, augment_views=2), data, lambda s, i, d: None)
    assert loaders[:3] == [GatheredTaskBalancedLoader] * 3
    assert len(loaders) == 6 and GatheredTaskBalancedLoader not in loaders[3:]
