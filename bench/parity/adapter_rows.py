"""What the adapter parity rows share (bench/parity/methods/ease/row.py, mos.py, tuna.py): the
inputs, the patches of the scratch LAMDA-PILOT copy, cl-bench's side of the step
check, the reference's side through bench/parity/drivers/pilot_adapters.py (TUNA:
methods/tuna/reference.py, which reuses it), and the paired seeds (the step check's
machinery for all three tasks at ``TRAIN``, so one seed fixes the same randomness on
both sides: :func:`paired_seed`). A row that is not
PILOT's EASE or MOS passes its own card settings, trainable tensors, test outputs,
reference config and driver to the functions below.

Setting: six Fashion-MNIST classes of bench/parity/make_tree.py's tree (40 training,
30 test images each; the pairs trouser/sneaker, T-shirt/ankle boot, dress/bag, so
that a randomly initialised ViT-Tiny with trained adapters learns every task), in
three tasks of two classes, one fixed class order (the folders' order); the
``--weights random`` ViT-Tiny of export_weights.py at 64 px (4 x 4 patches: PILOT's
test transform resizes only above 32 px, and at 64 px its resize, int(64 * 256 / 224)
= 73, is cl-bench's); epochs, lr and batch in ``TRAIN`` (the official lr 0.025 / 0.03
are for 20 epochs on a pretrained ViT-B), the rest the cards' defaults, which are the
official configs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from bench.parity.methods import ParityError

REFERENCE_REPO = "sun-hailong/LAMDA-PILOT"
REFERENCE_COMMIT = "264745534fc2233f5a50b020e50a3472c47eb756"
ROOT = Path(__file__).resolve().parents[2]
PEER_PYTHON = ROOT / "bench" / ".venv-avalanche" / "bin" / "python"
DRIVER = ROOT / "bench" / "parity" / "drivers" / "pilot_adapters.py"

FMNIST_CLASSES = [1, 7, 0, 9, 3, 8]  # trouser, sneaker, T-shirt, ankle boot, dress, bag
SIZE = 64
# end to end, per method: epochs per task, lr, batch. EASE's prototypes on a random
# ViT already tell these pairs apart; only many large steps move its adapters enough
# to change a prediction (at 3 epochs, lr 0.1, batch 48 every seed gave the untrained
# curve on both sides). MOS's first task is decided by its linear head (trained at lr
# x 0.1), which needs many large steps on the random ViT's features: at 3 epochs, lr
# 0.1 (and at 5 epochs, lr 0.5) its first task stayed near 50 %; at 8 epochs, lr 1.0
# both sides trained unstably (PILOT's first-task loss 1.7 -> 7.2 -> 1.2). At 10
# epochs, lr 0.3 every seed learnt every task on both sides (task 1 78-100 %, task 2
# 93-97 %, task 3 62-65 % of its images among the six classes, chance 17 %). TUNA's
# cosine classifier (s 20, rows of norm ~0.3 at init: a large step on their direction)
# learnt the first task only on some seeds at 10 epochs, lr 0.01 (probe on task 1 alone,
# seeds 1-4: cl-bench 96.7, 60.0, 50.0, 48.3 %, the reference 51.7, 75.0, 83.3, 51.7 %)
# and lr 0.005 (cl-bench seed 4: 51.7 %); at lr 0.002 cl-bench learnt it on all four
# (95 %).
TRAIN = {
    "ease": {"epochs": 5, "lr": 0.5, "batch": 16},
    "mos": {"epochs": 10, "lr": 0.3, "batch": 16},
    "tuna": {"epochs": 10, "lr": 0.002, "batch": 16},
    "care": {"epochs": 10, "lr": 0.01, "batch": 16},
}
STEP = {"epochs": 2, "lr": 0.1, "batch": 48}  # the step check (TUNA's at lr 0.05)
STEP_EPOCHS, STEP_TASKS = STEP["epochs"], 2
CLASS_ORDER = list(range(len(FMNIST_CLASSES)))
SEEDS = list(range(1, 11))
BACKBONE = "vit_tiny_patch16_224"
AFTER = ["step 1", "task 1", "task 2"]


PAIRED_WHY = (
    "one seed fixes the same randomness on both sides: the paired seeds run the "
    "step check's machinery for all three tasks, so cl-bench's initial tensors "
    "(drawn after seed_everything(seed)) go into the reference at each task "
    "start, both sides read one batch order per task drawn from the seed, seed "
    "the generator alike before every training forward (the same dropout masks) "
    "and before each alignment (the same Gaussian draws), with augmentation off"
)
PAIRED_NOTE = (
    "per_seed.*.learnt: top-1 on the newest task's test images right after "
    "training on it, predicted among all seen classes (chance 1/2, 1/4, 1/6 after "
    "tasks 1, 2, 3); per_seed.*.max_abs_logit: the largest difference of the test "
    "outputs over the three tasks. The two sides train the same model, so equal "
    "curves are expected up to a round-off flip of a prediction; a larger gap "
    "would be a bug."
)


def setting(method: str, step: dict = STEP) -> dict:
    return {
        "tree": "bench/parity/make_tree.py, 40 train / 30 test per class, Fashion-MNIST "
        f"classes {FMNIST_CLASSES} as classes 0-5",
        "backbone": BACKBONE,
        "weights": "export_weights.py (--weights random), 64 px",
        "image_size": SIZE,
        "tasks": "3 x 2 classes",
        **TRAIN[method],
        "augmentation": "off on both sides (the step check's machinery)",
        "method": f"methods/{method}.yaml defaults otherwise",
        "step_check": f"{step['epochs']} epochs per task, lr {step['lr']}, batch "
        f"{step['batch']}, {STEP_TASKS} tasks, no augmentation",
    }


def inputs(work: Path) -> tuple[Path, Path]:
    """The six-class tree and the 32 px weights under ``work`` (made once)."""
    from bench.parity.export_weights import export
    from bench.parity.make_tree import write_tree

    tree, weights = work / "tree6", work / f"vit_tiny_{SIZE}.pth"
    if not (tree / "test").is_dir():
        with tempfile.TemporaryDirectory(dir=work) as full:
            write_tree(Path(full), 40, 30)
            staged = work / "tree6.partial"
            shutil.rmtree(staged, ignore_errors=True)
            for split in ("train", "test"):
                for k, c in enumerate(FMNIST_CLASSES):
                    shutil.copytree(
                        Path(full) / split / f"class_{c:02d}",
                        staged / split / f"k{k}_fmnist{c:02d}",
                    )
            staged.rename(tree)
    if not weights.exists():
        export(weights, SIZE, BACKBONE)
    return tree, weights


def prepare(copy: Path) -> None:
    """patch_pilot.py, then patch_pilot_ease_mos.py (EASE and MOS as ViT-Tiny, the merge switch)."""
    from bench.parity import patch_pilot, patch_pilot_ease_mos

    try:
        patch_pilot.patch(copy)
        patch_pilot_ease_mos.patch(copy)
    except SystemExit as error:
        raise ParityError(f"patching {copy}: {error}") from None


def one_thread() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


# ----------------------------------------------------------------- reference side


def pilot_args(copy: Path, method: str, seed: int, train: dict) -> dict:
    """PILOT's config (bench/parity/methods/<method>/parity_<method>.json) with
    ``train``'s epochs, lr and batch."""
    args = json.loads((copy / "exps" / f"parity_{method}.json").read_text())
    epochs, lr = train["epochs"], train["lr"]
    args.update(seed=seed, shuffle=False, batch_size=train["batch"])
    if method == "ease":
        args.update(init_epochs=epochs, later_epochs=epochs, init_lr=lr, later_lr=lr)
    else:
        args.update(tuned_epoch=epochs, init_lr=lr)
    return args


def run_pilot(
    copy: Path, work: Path, spec: dict, name: str, env: dict | None = None, driver: Path = DRIVER
) -> dict:
    """``driver`` on ``spec`` in ``copy`` with the reference's interpreter."""
    tree, weights = inputs(work)
    if not PEER_PYTHON.exists():
        raise ParityError(
            f"{PEER_PYTHON} is missing: make bench/.venv-avalanche first (bench/peer_venv.py)"
        )
    spec_path, out = work / f"{name}.json", work / f"{name}.pt"
    spec_path.write_text(json.dumps(spec))
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PARITY_")}
    full_env.update(
        PARITY_TREE=str(tree),
        PARITY_WEIGHTS=str(weights),
        PARITY_IMG_SIZE=str(SIZE),
        OMP_NUM_THREADS="1",
        **(env or {}),
    )
    done = subprocess.run(
        ["nice", "-n", "10", str(PEER_PYTHON), str(driver), str(spec_path), str(out)],
        cwd=copy,
        env=full_env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise ParityError(f"the reference driver failed ({name}):\n{done.stderr[-3000:]}")
    return torch.load(out, weights_only=False)


# ----------------------------------------------------------------- cl-bench side


def ours_trainable(method: str, model) -> dict[str, torch.Tensor]:
    """cl-bench's trainable tensors under the row's names (the driver's)."""
    out = {}
    for block, adapter in model.sets[-1].adapters.items():
        for part in ("down", "up"):
            layer = getattr(adapter, part)
            out[f"adapter.{block}.{part}.weight"] = layer.weight.detach().clone()
            out[f"adapter.{block}.{part}.bias"] = layer.bias.detach().clone()
    if method == "ease" and model.proxy is not None:
        out["proxy.weight"] = model.proxy.weight.detach().clone()
        out["proxy.sigma"] = model.proxy.sigma.detach().clone()
    if method == "mos":
        out["head.weight"] = model.head.weight.detach().clone()
        out["head.bias"] = model.head.bias.detach().clone()
    return out


def pilot_initial(method: str, task: int, now: dict) -> dict | None:
    """The tensors of task ``task`` exported into PILOT: EASE every task's new adapters
    and proxy, MOS the adapters and head at task 0 (later tasks start from them)."""
    return now if method == "ease" or task == 0 else None


def make_probe(trainable, initial, perms: dict, seed: int, record: dict):
    """An Avalanche plugin that feeds cl-bench's strategy as the driver feeds the
    reference's learner (task t's images in the order ``perms[t]``, the generator seeded
    with ``seed + k`` before the k-th training forward) and writes into ``record``:
    ``initial(task, trainable(model))`` at the start of each task (``init``, the tensors
    exported; None: none), the batches, the tensors and loss after the first step and
    at the end of each task."""
    from avalanche.core import SupervisedPlugin

    class Probe(SupervisedPlugin):
        forwards = 0

        def after_train_dataset_adaptation(self, strategy, **kwargs):
            perm = perms[str(strategy.experience.current_experience)].tolist()
            strategy.adapted_dataset = strategy.adapted_dataset.subset(perm)

        def before_training_exp(self, strategy, **kwargs):
            task = strategy.experience.current_experience
            exported = initial(task, trainable(strategy.model))
            if exported is not None:
                record["init"][str(task)] = exported

        def before_forward(self, strategy, **kwargs):
            if strategy.is_training:
                torch.manual_seed(seed + self.forwards)
                self.forwards += 1
                record["batch_sums"].append(strategy.mb_x.sum(dim=(1, 2, 3)).double())
                record["batch_labels"].append(strategy.mb_y.clone())

        def after_update(self, strategy, **kwargs):
            record["loss"] = float(strategy.loss.detach())
            if "step 1" not in record["points"]:
                record["points"]["step 1"] = {
                    "params": trainable(strategy.model),
                    "loss": record["loss"],
                }

        def after_training_epoch(self, strategy, **kwargs):
            record["params"] = trainable(strategy.model)

        def after_training_exp(self, strategy, **kwargs):
            record["params"].update(trainable(strategy.model))

    return Probe()


@torch.no_grad()
def test_logits(model, experience) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's logits over the seen classes on the seen test images, in stored
    (class by class) order, and the labels."""
    from torch.utils.data import DataLoader

    model.eval()
    logits, labels = [], []
    for x, y, *_ in DataLoader(experience.dataset.eval(), batch_size=48):
        logits.append(model(x)[:, model.seen])
        labels.append(y)
    return torch.cat(logits), torch.cat(labels)


def ours_step(
    method: str,
    work: Path,
    seed: int,
    params: dict | None = None,
    trainable=None,
    initial=None,
    outputs=test_logits,
    tasks: int = STEP_TASKS,
) -> dict:
    """cl-bench's side of the step check (module docstring of the driver): the card's
    ``params`` (default: ``STEP``'s epochs, lr and batch), the tensors ``trainable(model)``
    compared (default :func:`ours_trainable`), those ``initial(task, tensors)`` exported
    (default :func:`pilot_initial`), ``outputs(model, experience)`` the test outputs and
    labels, ``tasks`` the number of tasks run. The strategy module's
    ``align_classifier``, where it has one, starts from ``torch.manual_seed(seed)``, as
    the driver's alignment does."""
    import importlib

    from cl_bench.backbones import load_backbone
    from cl_bench.cards.catalogue import load_method, load_scenario, strategy_of
    from cl_bench.cards.resolve import resolve_for_backbone
    from cl_bench.engine.environment import seed_everything
    from cl_bench.engine.runner import quiet_evaluator
    from cl_bench.scenarios import load_data
    from cl_bench.scenarios.order import task_split
    from cl_bench.scenarios.stream import build_stream
    from cl_bench.scenarios.transforms import eval_transform

    one_thread()
    tree, weights = inputs(work)
    seed_everything(seed)
    backbone = load_backbone(BACKBONE, str(weights), SIZE)
    backbone.precision = "fp32"
    data = load_data(load_scenario("imagefolder"), tree)
    plain = eval_transform(data.on_disk, SIZE)
    stream = build_stream(
        data.train_x,
        data.train_y,
        data.test_x,
        data.test_y,
        CLASS_ORDER,
        task_split(data.n_classes, 2, 2),
        test_shuffle=False,
        seed=seed,
        train_transform=plain,
        eval_transform=plain,
    )
    perms = {
        str(t): torch.from_numpy(
            np.random.RandomState(seed + t).permutation(len(stream.train[t].dataset))
        )
        for t in range(tasks)
    }
    card = load_method(method)
    card.params.update(
        params or {"epochs": STEP["epochs"], "lr": STEP["lr"], "batch_size": STEP["batch"]}
    )
    resolve_for_backbone(card, backbone)
    record = {
        "init": {},
        "points": {},
        "batch_sums": [],
        "batch_labels": [],
        "params": {},
        "loss": None,
    }
    trainable = trainable or (lambda model: ours_trainable(method, model))
    initial = initial or (lambda task, now: pilot_initial(method, task, now))
    cls = strategy_of(card)
    strategy = cls(
        params=card.params,
        backbone=backbone,
        n_classes=data.n_classes,
        device=torch.device("cpu"),
        plugins=[make_probe(trainable, initial, perms, seed, record)],
        evaluator=quiet_evaluator(),
    )
    module = importlib.import_module(cls.__module__)
    real_align = getattr(module, "align_classifier", None)

    def align(*args, **kwargs):  # the same Gaussian draws as the driver's
        torch.manual_seed(seed)
        return real_align(*args, **kwargs)

    if real_align is not None:
        module.align_classifier = align
    try:
        test_labels = []
        for t in range(tasks):
            strategy.train(stream.train[t], eval_streams=[], shuffle=False)
            logits, labels = outputs(strategy.model, stream.seen_test[t])
            record["points"][f"task {t + 1}"] = {
                "params": record["params"],
                "loss": record["loss"],
                "logits": logits,
            }
            record["params"] = {}
            test_labels.append(labels)
    finally:
        if real_align is not None:
            module.align_classifier = real_align
    record["test_labels"], record["perms"] = test_labels, perms
    return record


# ----------------------------------------------------------------- the step check


def max_abs(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    if set(a) != set(b):
        raise ParityError(f"trainable tensors differ in name: {sorted(set(a) ^ set(b))}")
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def same_inputs(ours: dict, ref: dict, epochs: int = STEP_EPOCHS) -> None:
    """Refuse a comparison whose batches or test images are not the same on both sides
    (``epochs`` passes over each task's images)."""
    mine = torch.cat(ours["batch_sums"])
    theirs = torch.cat(ref["batch_sums"])
    labels = torch.cat(ours["batch_labels"])
    if mine.shape != theirs.shape or not torch.allclose(mine, theirs, atol=1e-3):
        raise ParityError("the training batches differ between the two sides")
    expected = torch.cat([t.repeat(epochs) for t in ref["train_labels"]])
    if not torch.equal(labels, expected.to(labels)):
        raise ParityError("the training labels differ between the two sides")
    for a, b in zip(ours["test_labels"], ref["test_labels"], strict=True):
        if not torch.equal(a, b.to(a)):
            raise ParityError("the test images differ between the two sides")


def differences(ours: dict, ref: dict) -> dict:
    """Largest absolute differences per point of AFTER (no logits after step 1: 0)."""
    same_inputs(ours, ref)
    out = {"after": AFTER, "max_abs_param": [], "max_abs_loss": [], "max_abs_logit": []}
    for point in AFTER:
        a, b = ours["points"][point], ref["points"][point]
        out["max_abs_param"].append(max_abs(a["params"], b["params"]))
        out["max_abs_loss"].append(abs(a["loss"] - b["loss"]))
        out["max_abs_logit"].append(
            float((a["logits"].double() - b["logits"].double()).abs().max())
            if "logits" in a
            else 0.0
        )
    return out


def step_specs(
    copy: Path,
    method: str,
    work: Path,
    seed: int,
    ours: dict,
    args: dict | None = None,
    name: str | None = None,
    tasks: int = STEP_TASKS,
) -> dict:
    """The driver's step spec for the tensors and orders of cl-bench's side; ``args``
    the reference's config (default: PILOT's at ``STEP``), ``name`` the files' stem,
    ``tasks`` the number of tasks run."""
    name = name or method
    torch.save(ours["init"], work / f"{name}_init.pt")
    torch.save(ours["perms"], work / f"{name}_perm.pt")
    return {
        "args": args or pilot_args(copy, method, seed, STEP),
        "order": CLASS_ORDER,
        "step": {
            "init": str(work / f"{name}_init.pt"),
            "perm": str(work / f"{name}_perm.pt"),
            "seed": seed,
            "tasks": tasks,
        },
    }


# ----------------------------------------------------------------- end to end


def accuracies(run: dict, labels: list[torch.Tensor]) -> tuple[list[float], list[float]]:
    """From a step-check record (``run["points"]["task t"]["logits"]``, columns in class
    id order) and each task's seen test labels: top-1 over the seen classes after each
    task, and on the newest task's two classes right after training on it, in percent."""
    curve, learnt = [], []
    for t, y in enumerate(labels):
        hit = run["points"][f"task {t + 1}"]["logits"].argmax(1).cpu() == y
        curve.append(100.0 * float(hit.float().mean()))
        learnt.append(100.0 * float(hit[y >= 2 * t].float().mean()))
    return curve, learnt


def paired_seed(
    method: str,
    copy: Path,
    work: Path,
    seed: int,
    params: dict | None = None,
    args: dict | None = None,
    trainable=None,
    initial=None,
    outputs=test_logits,
    env: dict | None = None,
    driver: Path = DRIVER,
    spec: dict | None = None,
    tasks: int = 3,
) -> dict:
    """Both sides on the step check's machinery for ``tasks`` tasks at ``TRAIN[method]``
    with the seed's draws shared (cl-bench's initial tensors exported, one batch order per
    task, the generator seeded alike before every training forward and each alignment,
    no augmentation); each side's curve and newest-task accuracies from its own test
    outputs, and the largest difference of those outputs. ``params`` (default: TRAIN's
    epochs, lr and batch), ``args`` (default: PILOT's config at TRAIN), ``trainable``,
    ``initial`` and ``outputs`` as in :func:`ours_step`; ``env``, ``driver`` and extra
    ``spec`` entries for the reference's run."""
    train = TRAIN[method]
    params = params or {"epochs": train["epochs"], "lr": train["lr"], "batch_size": train["batch"]}
    ours = ours_step(method, work, seed, params, trainable, initial, outputs, tasks=tasks)
    name = f"{method}_seed_{seed}"
    specs = step_specs(
        copy,
        method,
        work,
        seed,
        ours,
        args or pilot_args(copy, method, seed, train),
        name,
        tasks=tasks,
    )
    ref = run_pilot(copy, work, {**specs, **(spec or {})}, name, env, driver)
    same_inputs(ours, ref, epochs=train["epochs"])
    out = {}
    for side, run in (("ours", ours), ("reference", ref)):
        curve, learnt = accuracies(run, ours["test_labels"])
        out[side] = {"curve": curve, "learnt": learnt}
    out["max_abs_logit"] = max(
        float(
            (ours["points"][k]["logits"].double() - ref["points"][k]["logits"].double()).abs().max()
        )
        for k in (f"task {t + 1}" for t in range(tasks))
    )
    return out
