"""Parity row of CaRE (cl_bench/strategies/care.py) against the authors' code (github
LMMMEng/CaRE at d90800a: ``models/care.py``, ``backbone/vit_brmoe.py``), driven by
bench/parity/methods/care/reference.py with the reference's interpreter. The inputs,
cl-bench's side of the step check, the comparison and the end-to-end runs are
bench/parity/adapter_rows.py's, given CaRE's card settings, tensors, test outputs,
config and driver.

Setting: adapter_rows.py's (six Fashion-MNIST classes in three tasks of two, one fixed
class order, the ``--weights random`` ViT-Tiny at 64 px) with ``adapter_rows.TRAIN``'s
epochs, lr and batch for CaRE, the rest the card's defaults (the authors'
exps/imagenet_a/care_ina_inc20.json) with ``decay_bug: true`` (``--protocol paper``),
since that code is what runs on the other side.

Patches of the scratch copy (anchored, bench/parity/patch_pilot.py's ``apply_edits``):
the dataset ``parity`` (the tree, PILOT's ImageFolder transforms) and the input size
from ``PARITY_IMG_SIZE``, the same edits patch_pilot.py makes to LAMDA-PILOT's
identical ``utils/data.py`` and ``utils/data_manager.py``. The driver builds the
ViT-Tiny backbone and stands in for the two packages the authors' code imports and the
reference's environment lacks (its docstring).

Step check (2 tasks, 2 epochs each at lr 0.05, batch 48, no augmentation; the second
task trains 1 epoch, aligns the classifier, then 1 more): cl-bench's initial tensors
are exported into the reference, both sides see the same batches in the same order and
seed the generator alike before every training forward (the same adapter dropout
masks) and before every classifier alignment (the same Gaussian draws).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from bench.parity import adapter_rows as shared
from bench.parity.methods import ParityError

METHOD = "care"
REFERENCE = {
    "repo": "LMMMEng/CaRE",
    "commit": "d90800a019aaa300db3f5d1e03660dac1050f2c3",
    "what": "models/care.py Learner on backbone/vit_brmoe.py as ViT-Tiny "
    "(bench/parity/methods/care/reference.py)",
}
PAIRING = "paired"
PAIRING_WHY = shared.PAIRED_WHY
DRIVER = Path(__file__).resolve().parent / "reference.py"
STEP = {**shared.STEP, "lr": 0.05}
PAPER_SWITCHES = {"decay_bug": True}
CLASS_ORDER = shared.CLASS_ORDER
SEEDS = shared.SEEDS
TASKS = 3
SETTING = {
    **shared.setting(METHOD, STEP),
    "method": "methods/care.yaml defaults (exps/imagenet_a/care_ina_inc20.json) with "
    f"{PAPER_SWITCHES} (--protocol paper)",
}
NOTES = [shared.PAIRED_NOTE]
BOUND = 1e-5
BOUND_WHY = (
    "float32 round-off: the same functions through different kernels and summation "
    "orders (timm 1.0's fused attention on one qkv matrix vs the authors' split q/k/v "
    "and bmm; F.cross_entropy vs the authors' exp/log CosFace; a float64 Cholesky "
    "factor vs a float32 MultivariateNormal), through 2 x 2 SGD steps with momentum, "
    "two classifier alignments and the scale 20 of the softmaxes"
)


def prepare(copy: Path) -> None:
    """The dataset and input-size edits of patch_pilot.py (module docstring)."""
    from bench.parity.patch_pilot import EDITS, apply_edits

    edits = [e for e in EDITS if e[0] in ("utils/data.py", "utils/data_manager.py")]
    try:
        apply_edits(copy, edits)
    except SystemExit as error:
        raise ParityError(f"patching {copy}: {error}") from None


def card_settings(train: dict) -> dict:
    """cl-bench's card settings at ``train``'s epochs, lr and batch, with the paper
    switch."""
    return {
        "epochs": train["epochs"],
        "lr": train["lr"],
        "batch_size": train["batch"],
        "eval_batch_size": train["batch"],
        **PAPER_SWITCHES,
    }


def reference_args(copy: Path, seed: int, train: dict) -> dict:
    """The authors' exps/imagenet_a/care_ina_inc20.json at ``train``'s epochs, lr and batch."""
    args = json.loads((copy / "exps" / "imagenet_a" / "care_ina_inc20.json").read_text())
    args.update(
        dataset="parity",
        shuffle=False,
        init_cls=2,
        increment=2,
        seed=seed,
        tuned_epoch=train["epochs"],
        init_lr=train["lr"],
        batch_size=train["batch"],
    )
    return args


# ----------------------------------------------------------------- cl-bench side


def adapter_tensors(prefix: str, adapter) -> dict[str, torch.Tensor]:
    out = {f"{prefix}.scale": adapter.scale.detach().clone()}
    for part in ("down", "up", "norm"):
        layer = getattr(adapter, part)
        out[f"{prefix}.{part}.weight"] = layer.weight.detach().clone()
        out[f"{prefix}.{part}.bias"] = layer.bias.detach().clone()
    return out


def trainable(model) -> dict[str, torch.Tensor]:
    """cl-bench's tensors under the driver's names: every block's shared adapter and the
    current task's expert, router and perceptor, and every classifier block."""
    out, task = {}, max(model.task, 0)
    for block, layer in model.moe.layers.items():
        out.update(adapter_tensors(f"shared.{block}", layer.shared))
        out.update(adapter_tensors(f"expert.{block}", layer.experts[task]))
        for name, t in layer.routers[task].state_dict().items():
            out[f"router.{block}.{name}"] = t.detach().clone()
        for name, t in layer.perceptors[task].state_dict().items():
            out[f"perceptor.{block}.{name}"] = t.detach().clone()
    for k, block in enumerate(model.head):
        out[f"head.{k}"] = block.detach().clone()
    return out


def initial(task: int, now: dict) -> dict:
    """Exported at the start of a task: everything at task 0, later the task's expert,
    router, perceptor and classifier block."""
    if task == 0:
        return now
    new = ("expert.", "router.", "perceptor.", f"head.{task}")
    return {k: v for k, v in now.items() if k.startswith(new)}


@torch.no_grad()
def test_outputs(model, experience) -> tuple[torch.Tensor, torch.Tensor]:
    """What the authors' ``_eval_cnn`` ranks, on the seen test images in stored order:
    after one task the routed pass's cosine logits (cl-bench: s times them, the same
    argmax), later the combined output."""
    from torch.utils.data import DataLoader

    model.eval()
    order, outs, labels = model.order, [], []
    for x, y, *_ in DataLoader(experience.dataset.eval(), batch_size=STEP["batch"]):
        if model.task == 0:
            outs.append(model.cosine(model.embed(model.normalize(x), None)[0]))
        else:
            outs.append(model(x)[:, order])
        labels.append(y)
    return torch.cat(outs), torch.cat(labels)


# ----------------------------------------------------------------- the step check


def step(copy: Path, work: Path) -> dict:
    """The step check, kept in ``work`` under a digest of the code it ran (this row,
    adapter_rows.py, the drivers, cl-bench's strategy, block and card), so a re-run of
    the row reuses it."""
    root = shared.ROOT
    sources = [
        Path(__file__),
        Path(shared.__file__),
        DRIVER,
        shared.DRIVER,
        root / "cl_bench" / "strategies" / "care.py",
        root / "cl_bench" / "strategies" / "blocks" / "routed_moe.py",
        root / "methods" / "care.yaml",
    ]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    kept = work / f"step_{digest}.json"
    if kept.exists():
        return json.loads(kept.read_text())
    seed = SEEDS[0]
    ours = shared.ours_step(
        METHOD, work, seed, card_settings(STEP), trainable, initial, test_outputs
    )
    spec = shared.step_specs(
        copy, METHOD, work, seed, ours, reference_args(copy, seed, STEP), "care_step"
    )
    ref = shared.run_pilot(copy, work, spec, "care_step", driver=DRIVER)
    result = {
        **shared.differences(ours, ref),
        "bound": BOUND,
        "bound_why": BOUND_WHY,
        "kept": [
            "The authors' alignment decays class means by floor(class / (known - total)), "
            "a negative task size: care.decay_bug=true reproduces it (checked above); the "
            "default uses each class's task.",
            "After the first task the authors rank the routed pass's cosine logits, "
            "cl-bench s times them (same argmax): the check compares the cosine logits.",
        ],
    }
    kept.write_text(json.dumps(result))
    return result


# ----------------------------------------------------------------- end to end


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    """Both sides on the step check's machinery at the setting, all three tasks: the
    same randomness on both sides."""
    train = shared.TRAIN[METHOD]
    return shared.paired_seed(
        METHOD,
        copy,
        work,
        seed,
        card_settings(train),
        reference_args(copy, seed, train),
        trainable,
        initial,
        test_outputs,
        driver=DRIVER,
        tasks=TASKS,
    )
