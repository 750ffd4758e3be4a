"""LAMDA-PILOT's side of the APER / RanPAC / SimpleCIL parity rows
(bench/parity/methods/aper/row.py, ranpac.py, simplecil.py). Our code, run with the
reference's interpreter (bench/.venv-avalanche) from the root of a scratch PILOT copy
patched by patch_pilot.py and patch_pilot_adapter_vit.py, importing PILOT's own modules:

    python DRIVER run  SPEC.json OUT.json   # one seed end to end, fixed class order
    python DRIVER step SPEC.json OUT.pt     # the step check on fixed inputs

``run``: PILOT's trainer loop for one seed (``trainer._set_random``, its DataManager,
its Learner, ``incremental_train`` and ``eval_task`` per task), with the class order
given instead of drawn (``shuffle: false`` and the parity dataset's ``class_order``
set to it). Writes the top-1 curve over seen classes and the accuracy matrix.

``step``: PILOT's Learner on the tensors of ``SPEC["inputs"]`` (images already
transformed, no augmentation; the batch order of every epoch; the order in which the
classifier pass reads each task), its trainable tensors replaced by the ones cl-bench
exported, adapter dropout 0. Runs PILOT's ``_train`` for the first ``SPEC["tasks"]``
tasks (default 2; its own optimizer, schedule, ``_init_train``, ``setup_RP``,
``replace_fc``) and records, after the first optimizer step and after each task: the
trainable tensors (after task 1 and 2), the losses, the test logits and (RanPAC) the
ridge search's validation losses. The paired seeds of the RanPAC row run it for every
task on a seed's inputs (``SPEC["states"]`` false: G and Q not written).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
import torch.nn.functional as F
import trainer  # PILOT
from torch.utils.data import DataLoader, Dataset
from utils import factory  # PILOT
from utils.data import iParity  # PILOT, added by patch_pilot.py
from utils.data_manager import DataManager  # PILOT


def run(spec: dict) -> dict:
    """One seed of PILOT's trainer loop with ``spec["order"]`` as the class order."""
    args = dict(spec["args"], seed=spec["seed"], shuffle=False, device=[-1])
    iParity.class_order = list(spec["order"])
    trainer._set_random(args["seed"])
    trainer._set_device(args)
    data = DataManager(
        args["dataset"], False, args["seed"], args["init_cls"], args["increment"], args
    )
    args["nb_classes"], args["nb_tasks"] = data.nb_classes, data.nb_tasks
    model = factory.get_model(args["model_name"], args)
    curve, matrix = [], []
    for _ in range(data.nb_tasks):
        model.incremental_train(data)
        y_pred, y_true = model._eval_cnn(model.test_loader)
        top1 = y_pred[:, 0]
        curve.append(float((top1 == y_true).mean() * 100))
        bounds = np.cumsum([0] + [data.get_task_size(t) for t in range(model._cur_task + 1)])
        tasks = [(y_true >= lo) & (y_true < hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]
        matrix.append([float((top1[m] == y_true[m]).mean() * 100) for m in tasks])
        model.after_task()
    return {"curve": curve, "acc_matrix": matrix}


class Fixed(Dataset):
    """PILOT's loader items ``(index, image, label)`` over fixed tensors."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y
        self.labels = y.numpy()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return i, self.x[i], int(self.y[i])


class Batches:
    """A loader yielding the given index lists, one list per epoch in turn."""

    def __init__(self, data: Fixed, epochs: list[list[list[int]]]) -> None:
        self.data, self.epochs, self.epoch = data, epochs, 0

    def __len__(self) -> int:
        return len(self.epochs[0])

    def __iter__(self):
        batches = self.epochs[self.epoch]
        self.epoch += 1
        for idx in batches:
            yield (torch.tensor(idx), self.data.x[idx], self.data.y[idx])


class Recorder:
    """What the step check compares, taken from PILOT's objects as they run."""

    def __init__(self, learner, test: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.learner, self.test = learner, test
        self.out: dict = {"step 1": {}, **{f"task {t + 1}": {} for t in range(len(test))}}
        self.losses: list[float] = []
        self.ridge_losses: list[float] = []

    def trainable(self) -> dict[str, torch.Tensor]:
        net = self.learner._network
        return {n: p.detach().clone() for n, p in net.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def logits(self, task: int) -> torch.Tensor:
        net = self.learner._network
        was = net.training
        net.eval()
        out = net(self.test[task][0])["logits"].clone()
        net.train(was)
        return out

    def cross_entropy(self, logits, targets, *a, **k):
        loss = F.cross_entropy(logits, targets, *a, **k)
        self.losses.append(float(loss))
        return loss

    def mse_loss(self, pred, target, *a, **k):
        loss = F.mse_loss(pred, target, *a, **k)
        self.ridge_losses.append(float(loss))
        return loss


class _Functional:
    """torch.nn.functional with cross_entropy and mse_loss recorded (the names a PILOT
    method module calls ``F``)."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    def __getattr__(self, name: str):
        if name == "cross_entropy":
            return self.rec.cross_entropy
        if name == "mse_loss":
            return self.rec.mse_loss
        return getattr(F, name)


def round_fp16(_module, _args, out):
    """A backbone's features rounded through fp16, as cl-bench's feature store keeps them."""
    return out.half().float()


def step(spec: dict) -> dict:
    """The step check on PILOT's side (module docstring)."""
    torch.set_num_threads(1)
    inputs = torch.load(spec["inputs"], weights_only=True)
    init = torch.load(spec["init"], weights_only=True)
    tasks = spec.get("tasks", 2)
    args = dict(spec["args"], seed=0, device=[-1], nb_classes=spec["n_classes"], nb_tasks=tasks)
    trainer._set_random(0)
    trainer._set_device(args)
    learner = factory.get_model(args["model_name"], args)
    module = sys.modules[type(learner).__module__]
    test = [(inputs[f"test_x{t}"], inputs[f"test_y{t}"]) for t in range(tasks)]
    rec = Recorder(learner, test)
    module.F = _Functional(rec)
    for m in learner._network.modules():  # adapter dropout off: no random draw to share
        if type(m).__name__ == "Adapter":
            m.dropout = 0.0

    original_init_train = learner._init_train

    def init_train(train_loader, test_loader, optimizer, scheduler):
        def after_first(opt, *_):
            if not rec.out["step 1"]:
                rec.out["step 1"] = {
                    "params": rec.trainable(),
                    "loss": list(rec.losses),
                    "logits": rec.logits(0),
                }

        optimizer.register_step_post_hook(after_first)
        original_init_train(train_loader, test_loader, optimizer, scheduler)

    learner._init_train = init_train

    for task in range(tasks):
        learner._cur_task += 1
        learner._total_classes = learner._known_classes + spec["increment"]
        learner._network.update_fc(learner._total_classes)
        if task == 0:
            state = learner._network.state_dict()
            missing = [n for n in init if n not in state]
            assert not missing, f"exported tensors PILOT does not have: {missing}"
            learner._network.load_state_dict({**state, **init})
            trained = set(rec.trainable())
            assert trained == set(init), (
                f"PILOT trains other tensors than cl-bench exported: {sorted(trained ^ set(init))}"
            )
        train = Fixed(inputs[f"train_x{task}"], inputs[f"train_y{task}"])
        learner.train_dataset = train
        loader = Batches(train, spec["batches"])
        order = inputs[f"fit_order{task}"].tolist()
        fit_loader = Batches(train, [[order[i : i + 256] for i in range(0, len(order), 256)]])
        test_loader = DataLoader(Fixed(*test[task]), batch_size=256, shuffle=False)
        rec.ridge_losses = []
        rec.losses = []
        if task == 0:
            _train_first(learner, loader, test_loader, fit_loader, rec)
        else:
            learner._train(loader, test_loader, fit_loader)
        if task == 1:
            rec.out["task 2"]["params"] = adapters(learner)
        key = f"task {task + 1}"
        rec.out[key].update(
            logits=rec.logits(task), loss=list(rec.losses), ridge_losses=list(rec.ridge_losses)
        )
        rec.out[key]["state"] = classifier_state(learner, spec.get("states", True))
        learner.after_task()
    return rec.out


def _train_first(learner, loader, test_loader, fit_loader, rec: Recorder) -> None:
    """PILOT's ``_train`` for task 1, with the adapted tensors recorded after its
    ``_init_train`` (before RanPAC's ``setup_RP`` / APER's dual branch replace the head)
    and the backbones' features rounded through fp16 from then on."""
    original_construct = getattr(learner, "construct_dual_branch_network", None)
    original_setup = getattr(learner, "setup_RP", None)

    def snapshot():
        rec.out["task 1"]["params"] = rec.trainable()

    def construct():
        snapshot()
        original_construct()
        for b in learner._network.backbones:
            b.register_forward_hook(round_fp16)

    def setup():
        snapshot()
        learner._network.backbone.register_forward_hook(round_fp16)
        original_setup()

    if original_construct is not None:
        learner.construct_dual_branch_network = construct
    if original_setup is not None:
        learner.setup_RP = setup
    learner._train(loader, test_loader, fit_loader)


def adapters(learner) -> dict[str, torch.Tensor]:
    """The adapted tensors after task 2 (nothing trains there), named as in task 1 (the
    APER dual-branch network holds the adapted ViT as ``backbones.1``)."""
    net = learner._network
    return {
        n.replace("backbones.1.", "backbone."): p.detach().clone()
        for n, p in net.named_parameters()
        if "adaptmlp" in n
    }


def classifier_state(learner, states: bool = True) -> dict[str, torch.Tensor]:
    """The classifier after a task: APER's prototype rows, RanPAC's W_o, sigma and, with
    ``states``, G and Q."""
    net = learner._network
    out = {"fc.weight": net.fc.weight.detach().clone(), "fc.sigma": net.fc.sigma.detach().clone()}
    for name in ("G", "Q") if states else ():
        if hasattr(learner, name):
            out[name] = getattr(learner, name).detach().clone()
    return out


if __name__ == "__main__":
    mode, spec_path, out_path = sys.argv[1:4]
    spec = json.loads(open(spec_path).read())
    if mode == "run":
        open(out_path, "w").write(json.dumps(run(spec)))
    else:
        torch.save(step(spec), out_path)
