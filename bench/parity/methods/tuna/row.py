"""Parity row of TUNA (cl_bench/strategies/tuna.py) against the authors' code
(github Ngahoang2005/ICCV2025-TUNA at its root commit 8e1c3ec: ``models/tuna.py``,
``backbone/vit_tuna.py``), driven by bench/parity/methods/tuna/reference.py with the
reference's interpreter. The inputs, cl-bench's side of the step check, the comparison
and the end-to-end runs are bench/parity/adapter_rows.py's, given TUNA's card
settings, tensors, test outputs, config and driver.

Setting: adapter_rows.py's (six Fashion-MNIST classes in three tasks of two, one fixed
class order, the ``--weights random`` ViT-Tiny at 64 px) with ``adapter_rows.TRAIN``'s
epochs, lr and batch for TUNA, the rest the card's defaults (the authors'
exps/tuna_imgr.json), with the three switches that reproduce the authors' code
(``--protocol paper``: the live adapter as the universal one, the orthogonality loss
training the stored up-projections, the alignment's decay from the negative task
size), since that code is what runs on the other side.

Patches of the scratch copy (anchored, bench/parity/patch_pilot.py's ``apply_edits``):
the dataset ``parity`` (the tree, PILOT's ImageFolder transforms) and the input size
from ``PARITY_IMG_SIZE``, the same edits patch_pilot.py makes to LAMDA-PILOT's
identical ``utils/data.py`` and ``utils/data_manager.py``. Everything else (the
ViT-Tiny backbone, CPU, no loader workers, top-1 only) the driver sets up.

End to end: the step check's machinery (below) at the setting's epochs, lr and batch
for all three tasks, so one seed fixes the same randomness on both sides (paired). The
earlier comparison of the two sides left to their own randomness is in ``NOTES``.

Step check (2 tasks, 2 epochs each at lr 0.05, batch 48, no augmentation): cl-bench's
initial adapters and classifier blocks are exported into the reference, both sides see
the same batches in the same order and seed the generator alike before every training
forward (the same adapter dropout masks) and before the classifier alignment (the same
Gaussian draws). The reference is run twice: as published, against cl-bench with the
paper switches (the numbers reported), and reading the merged adapter at test time,
against cl-bench's default ``universal: merged`` (reported under ``kept``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench.parity import adapter_rows as shared
from bench.parity.methods import ParityError

METHOD = "tuna"
REFERENCE = {
    "repo": "Ngahoang2005/ICCV2025-TUNA",
    "commit": "8e1c3ec2a0ba6903a34cd8e1c44203b7504eca32",
    "what": "models/tuna.py Learner on backbone/vit_tuna.py as ViT-Tiny "
    "(bench/parity/methods/tuna/reference.py)",
}
PAIRING = "paired"
PAIRING_WHY = (
    "one seed fixes the same randomness on both sides: the end-to-end runs use "
    "the step check's machinery, so cl-bench's initial adapters and classifier "
    "blocks (drawn after seed_everything(seed)) go into the authors' code, both "
    "sides read one batch order per task drawn from the seed, seed the generator "
    "alike before every training forward (the same dropout masks) and before "
    "each alignment (the same Gaussian draws), with augmentation off"
)
DRIVER = Path(__file__).resolve().parent / "reference.py"
STEP = {**shared.STEP, "lr": 0.05}
PAPER_SWITCHES = {"universal": "last", "orth_old_grad": True, "decay_bug": True}
CLASS_ORDER = shared.CLASS_ORDER
SEEDS = shared.SEEDS
TASKS = 3
SETTING = {
    **shared.setting(METHOD, STEP),
    "method": "methods/tuna.yaml defaults (exps/tuna_imgr.json) with "
    f"{PAPER_SWITCHES} (--protocol paper)",
}
NOTES = [
    "per_seed.*.learnt: top-1 on the newest task's test images right after training on it, "
    "predicted among all seen classes (chance 1/2, 1/4, 1/6 after tasks 1, 2, 3)",
    "the end-to-end runs are the step check's machinery at the setting's epochs, lr and "
    "batch for all three tasks: equal curves are expected and any gap is a bug",
    "each side left to its own randomness (augmentation on; each code base's own draws of "
    "the initial tensors, batch order, crops, flips, dropout and alignment samples), the "
    "same 10 seeds, Welch: last -0.44 [-1.49, +0.60], average +1.35 [-0.62, +3.33], 3.95 "
    "points wide (this file at commit 6328363). The average leans toward cl-bench through "
    "the first task, whose accuracy varies more on the authors' side (94.2 +- 2.4 % on "
    "cl-bench's side, 89.3 +- 8.0 % on the authors', F test p = 0.001). With the draws "
    "shared and augmentation off (above) the two sides train the same model, so that "
    "spread lies in how each side draws its random streams or in its augmentation "
    "pipeline (the same transforms and parameters on both sides, applied by different "
    "code), not in what the method computes; which of these it is was not isolated",
]
BOUND = 1e-5
BOUND_WHY = (
    "float32 round-off: the same functions through different kernels and "
    "summation orders (timm 1.0's fused attention on one qkv matrix vs the "
    "authors' split q/k/v and bmm; F.cross_entropy vs the authors' exp/log "
    "CosFace; a float64 Cholesky factor vs a float32 MultivariateNormal), "
    "through 2 x 4 SGD steps at lr 0.05 with momentum, 30 alignment epochs "
    "and the scale 20 of the softmaxes)"
)


def prepare(copy: Path) -> None:
    """The dataset and input-size edits of patch_pilot.py (module docstring)."""
    from bench.parity.patch_pilot import EDITS, apply_edits

    edits = [e for e in EDITS if e[0] in ("utils/data.py", "utils/data_manager.py")]
    try:
        apply_edits(copy, edits)
    except SystemExit as error:
        raise ParityError(f"patching {copy}: {error}") from None


def card_settings(train: dict, merged: bool = False) -> dict:
    """cl-bench's card settings at ``train``'s epochs, lr and batch, with the paper
    switches (``merged``: the default universal adapter instead of the live one)."""
    switches = dict(PAPER_SWITCHES, universal="merged") if merged else PAPER_SWITCHES
    return {
        "epochs": train["epochs"],
        "lr": train["lr"],
        "batch_size": train["batch"],
        "eval_batch_size": train["batch"],
        **switches,
    }


def reference_args(copy: Path, seed: int, train: dict) -> dict:
    """The authors' exps/tuna_imgr.json at ``train``'s epochs, lr and batch."""
    args = json.loads((copy / "exps" / "tuna_imgr.json").read_text())
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


def trainable(model) -> dict[str, torch.Tensor]:
    """cl-bench's tensors under the driver's names: the live adapters, every classifier
    block, the stored sets' up-projections (the authors' optimizer moves them)."""
    out = {}
    for block, adapter in model.sets[-1].adapters.items():
        for part in ("down", "up"):
            layer = getattr(adapter, part)
            out[f"adapter.{block}.{part}.weight"] = layer.weight.detach().clone()
            out[f"adapter.{block}.{part}.bias"] = layer.bias.detach().clone()
    for k, block in enumerate(model.head):
        out[f"head.{k}"] = block.detach().clone()
    for k in range(model.task):
        for block, adapter in model.sets[k].adapters.items():
            out[f"old.{k}.{block}.up.weight"] = adapter.up.weight.detach().clone()
    return out


def initial(task: int, now: dict) -> dict:
    """Exported at the start of a task: everything at task 0, later the new block."""
    return now if task == 0 else {f"head.{task}": now[f"head.{task}"]}


@torch.no_grad()
def test_outputs(model, experience) -> tuple[torch.Tensor, torch.Tensor]:
    """What the authors' ``_eval_cnn`` ranks, on the seen test images in stored order:
    after one task the cosine logits under adapter 0 (``_eval_cnn1``; cl-bench's
    output there, p_0 + p_0, has the same argmax), later the combined output."""
    from torch.utils.data import DataLoader

    model.eval()
    order, outs, labels = model.order, [], []
    for x, y, *_ in DataLoader(experience.dataset.eval(), batch_size=STEP["batch"]):
        if len(model.sets) == 1:
            outs.append(model.cosine(model.cls(model.normalize(x), model.sets[0])))
        else:
            outs.append(model(x)[:, order])
        labels.append(y)
    return torch.cat(outs), torch.cat(labels)


# ----------------------------------------------------------------- the step check


def ours_step(work: Path, seed: int, merged: bool) -> dict:
    return shared.ours_step(
        METHOD, work, seed, card_settings(STEP, merged), trainable, initial, test_outputs
    )


def reference_step(copy: Path, work: Path, seed: int, ours: dict, merged: bool) -> dict:
    name = "merged" if merged else "official"
    spec = shared.step_specs(
        copy, METHOD, work, seed, ours, reference_args(copy, seed, STEP), f"tuna_{name}"
    )
    return shared.run_pilot(
        copy, work, {**spec, "merged": merged}, f"tuna_step_{name}", driver=DRIVER
    )


def described(diff: dict) -> str:
    return "; ".join(
        f"{point}: param {param:.2g}, loss {loss:.2g}, logit {logit:.2g}"
        for point, param, loss, logit in zip(
            diff["after"],
            diff["max_abs_param"],
            diff["max_abs_loss"],
            diff["max_abs_logit"],
            strict=True,
        )
    )


def step(copy: Path, work: Path) -> dict:
    """The step check, kept in ``work`` under a digest of the code it ran (this row,
    adapter_rows.py, the drivers, cl-bench's strategy and card), so a re-run of the row
    reuses it."""
    import hashlib

    root = shared.ROOT
    sources = [
        Path(__file__),
        Path(shared.__file__),
        DRIVER,
        shared.DRIVER,
        root / "cl_bench" / "strategies" / "tuna.py",
        root / "methods" / "tuna.yaml",
    ]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    kept = work / f"step_{digest}.json"
    if kept.exists():
        return json.loads(kept.read_text())
    result = check_steps(copy, work)
    kept.write_text(json.dumps(result))
    return result


def check_steps(copy: Path, work: Path) -> dict:
    seed = SEEDS[0]
    ours = ours_step(work, seed, merged=False)
    official = shared.differences(ours, reference_step(copy, work, seed, ours, merged=False))
    ours_merged = ours_step(work, seed, merged=True)
    merged = shared.differences(
        ours_merged, reference_step(copy, work, seed, ours_merged, merged=True)
    )
    kept = [
        "The authors' code reads the live adapter (the newest task's) where the paper's "
        "universal adapter belongs: tuna.universal=last reproduces it (checked above); "
        "cl-bench's default universal: merged against the authors' code made to read its "
        f"merged adapter (adapter_id cur_task + 2): {described(merged)}",
        "The authors' optimizer holds the stored adapters, so their up-projections move "
        "under the orthogonality loss and weight decay: tuna.orth_old_grad=true "
        "reproduces it (checked above); the default trains the current set only.",
        "The authors' alignment decays class means by floor(class / (known - total)), a "
        "negative task size: tuna.decay_bug=true reproduces it (checked above); the "
        "default uses each class's task.",
        "After the first task the authors rank adapter 0's cosine logits, cl-bench p_0 + "
        "p_0 (same argmax): the check compares cl-bench's cosine logits there.",
    ]
    return {**official, "bound": BOUND, "bound_why": BOUND_WHY, "kept": kept}


# ----------------------------------------------------------------- end to end


def run_seed(copy: Path, work: Path, seed: int) -> dict:
    """Both sides on the step check's machinery at the setting, all three tasks (the
    module docstring): the same randomness on both sides."""
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
        spec={"merged": False},
        tasks=TASKS,
    )
