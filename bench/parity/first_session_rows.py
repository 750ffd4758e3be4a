"""What the SimpleCIL, APER and RanPAC parity rows share (methods/simplecil/row.py, aper.py,
ranpac.py): the inputs, LAMDA-PILOT's side run through
``bench/parity/drivers/pilot_first_session.py`` with the reference's interpreter, and
cl-bench's side of the end-to-end runs (``cl_bench.run``) and of the step check
(cl-bench's own ``AperNet`` / ``RanpacNet``, optimizer and ``fit`` on fixed inputs).

Setting: the parity tree of make_tree.py (Fashion-MNIST, 40 train / 30 test images per
class), cl-bench's seeded random ViT-Tiny at 64 px (export_weights.py), 2 + 2 x 4
classes in one fixed order. The order pairs classes that the frozen random features
separate (prototype accuracy of each pair >= 86.7 % on the test images), so that every
task is learnt well above chance right after it is trained on both sides.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml
from PIL import Image
from torchvision import transforms

from bench.parity.methods import ParityError

REPO = Path(__file__).resolve().parents[2]
PEER = REPO / "bench" / ".venv-avalanche" / "bin" / "python"
DRIVER = REPO / "bench" / "parity" / "drivers" / "pilot_first_session.py"
PILOT = {"repo": "sun-hailong/LAMDA-PILOT", "commit": "264745534fc2233f5a50b020e50a3472c47eb756"}

SIZE = 64
BACKBONE = "vit_tiny_patch16_224"
CLASS_ORDER = [2, 3, 0, 1, 4, 9, 5, 6, 7, 8]
SEEDS = list(range(1993, 2003))
INIT_CLS = INCREMENT = 2
EPOCHS = 3  # the first-session adaptation (card default 20): the row's cost
STEP_EPOCHS = 2
STEP_SEED = 0

SETTING = {
    "tree": "bench/parity/make_tree.py: Fashion-MNIST, 40 train / 30 test images per class, PNG",
    "backbone": f"{BACKBONE}, cl-bench's seeded random init (export_weights.py), {SIZE} px",
    "tasks": f"{INIT_CLS} + {INCREMENT} x 4 classes",
    "precision": "fp32, CPU, one thread",
}


def cl_settings(method: str) -> dict:
    """cl-bench's --set values of the end-to-end runs (besides the scenario)."""
    return {
        "ranpac": {"ranpac.epochs": EPOCHS, "ranpac.M": 2000},
        "aper": {"aper.epochs": EPOCHS},
        "simplecil": {},
    }[method]


def pilot_args(method: str) -> dict:
    """PILOT's config of the end-to-end runs: its own exps file for the method with the
    parity dataset (bench/parity/methods/<method>/parity_*.json) and the same overrides."""
    name = {
        "ranpac": "parity_ranpac.json",
        "aper": "parity_aper.json",
        "simplecil": "parity_simplecil.json",
    }[method]
    args = json.loads((REPO / "bench" / "parity" / "methods" / method / name).read_text())
    if method != "simplecil":
        args["tuned_epoch"] = EPOCHS
    return args


def inputs(work: Path) -> tuple[Path, Path]:
    """The parity tree and the ViT-Tiny weights at SIZE px, made once under ``work``."""
    from bench.parity.export_weights import export
    from bench.parity.make_tree import write_tree

    tree, weights = work / "tree", work / f"vit_tiny_{SIZE}.pth"
    if not (tree / "test" / "class_09").is_dir():
        write_tree(tree, 40, 30)
    if not weights.is_file():
        export(weights, SIZE)
    return tree, weights


def prepare(copy: Path) -> None:
    """patch_pilot.py then patch_pilot_adapter_vit.py on the scratch copy (anchored edits)."""
    from bench.parity import patch_pilot, patch_pilot_adapter_vit

    try:
        patch_pilot.patch(copy)
        patch_pilot_adapter_vit.patch(copy)
    except SystemExit as e:
        raise ParityError(str(e)) from None
    if not PEER.is_file():
        raise ParityError(f"{PEER} is missing: make the peer venv (bench/peer_venv.py).")


def pilot(copy: Path, work: Path, mode: str, spec: dict, out: Path, env: dict) -> None:
    """The driver in ``mode`` with ``spec``, PILOT's interpreter, one thread, nice 10."""
    tree, weights = inputs(work)
    spec_path = out.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec))
    full = {
        **os.environ,
        "PARITY_TREE": str(tree),
        "PARITY_WEIGHTS": str(weights),
        "PARITY_IMG_SIZE": str(SIZE),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONPATH": str(copy),
        **env,
    }
    done = subprocess.run(
        ["nice", "-n", "10", str(PEER), str(DRIVER), mode, str(spec_path), str(out)],
        cwd=copy,
        env=full,
        capture_output=True,
        text=True,
    )
    log = out.with_suffix(".log")
    log.write_text(done.stdout + done.stderr)
    if done.returncode:
        raise ParityError(f"PILOT's side failed ({log}):\n{done.stderr[-2000:]}")


def pilot_run(method: str, copy: Path, work: Path, seed: int, env: dict | None = None) -> dict:
    """PILOT end to end, one seed, at CLASS_ORDER: {"curve", "acc_matrix"}."""
    out = work / f"pilot-{method}-{seed}.json"
    pilot(
        copy,
        work,
        "run",
        {"args": pilot_args(method), "seed": seed, "order": CLASS_ORDER},
        out,
        env or {},
    )
    return json.loads(out.read_text())


@contextlib.contextmanager
def cards(work: Path):
    """A scenario card ``parity_order``: the tree at CLASS_ORDER (a list cannot be given
    with --set scenario.class_order: the card's default is text), found through
    CL_BENCH_CARDS; the feature cache under ``work``; one thread."""
    folder = work / "cards"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "parity_order.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "parity_order",
                "title": "parity tree, one class order",
                "description": "bench/parity/methods/_first_session/row.py",
                "dataset": "imagefolder",
                "dataset_args": {},
                "init_cls": INIT_CLS,
                "increment": INCREMENT,
                "class_order": CLASS_ORDER,
                "test_shuffle": True,
                "normalize": "none",
            }
        )
    )
    saved = {k: os.environ.get(k) for k in ("CL_BENCH_CARDS", "CL_BENCH_CACHE")}
    os.environ.update(CL_BENCH_CARDS=str(folder), CL_BENCH_CACHE=str(work / "cache"))
    torch.set_num_threads(1)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def ours_run(
    method: str, work: Path, seed: int, settings: dict | None = None, tag: str = ""
) -> dict:
    """cl-bench end to end, one seed: {"curve", "acc_matrix"}."""
    import cl_bench

    tree, weights = inputs(work)
    with cards(work):
        result = cl_bench.run(
            method,
            scenario="parity_order",
            seeds=[seed],
            out=work / f"ours{tag}",
            backbone=BACKBONE,
            weights=str(weights),
            image_size=SIZE,
            data_root=tree,
            device="cpu",
            precision="fp32",
            settings={**cl_settings(method), **(settings or {})},
            echo=None,
        )[0]
    return {"curve": list(result.acc_seen), "acc_matrix": result.acc_matrix}


def learnt(curve: dict) -> list[float]:
    """Accuracy on each task's test images right after it is trained (the diagonal)."""
    return [row[t] for t, row in enumerate(curve["acc_matrix"])]


# ---- the step check -------------------------------------------------------------

EVAL = transforms.Compose(
    [
        transforms.Resize(round(SIZE / 0.875), interpolation=transforms.InterpolationMode.BICUBIC),
        transforms.CenterCrop(SIZE),
        transforms.ToTensor(),
    ]
)


def tag_of(seed: int, tasks: int) -> str:
    """The file-name tag of a run of the step machinery: empty for the step check (the
    step seed, two tasks), else the seed and the number of tasks."""
    return "" if (seed, tasks) == (STEP_SEED, 2) else f"-seed{seed}-tasks{tasks}"


def step_inputs(
    work: Path, epochs: int = STEP_EPOCHS, seed: int = STEP_SEED, tasks: int = 2
) -> Path:
    """The first ``tasks`` tasks as fixed tensors (eval transform: no augmentation),
    labels in CLASS_ORDER's numbering, the first task's batch order of every one of
    ``epochs`` epochs, and the order of each task's classifier pass (RanPAC's lambda
    split in cl-bench's order for ``seed``, ``split_order``, applied on both sides); the
    batch orders are drawn from ``seed`` too."""
    from cl_bench.strategies.ranpac import split_order

    out = work / f"step-inputs{tag_of(seed, tasks)}-epochs{epochs}.pt"
    if out.is_file():
        return out
    tree, _ = inputs(work)
    data: dict[str, torch.Tensor] = {}
    for task in range(tasks):
        classes = CLASS_ORDER[task * INCREMENT : (task + 1) * INCREMENT]
        for split, seen in (("train", classes), ("test", CLASS_ORDER[: (task + 1) * INCREMENT])):
            xs, ys = [], []
            for c in seen:
                for path in sorted((tree / split / f"class_{c:02d}").glob("*.png")):
                    xs.append(EVAL(Image.open(path).convert("RGB")))
                    ys.append(CLASS_ORDER.index(c))
            data[f"{split}_x{task}"], data[f"{split}_y{task}"] = torch.stack(xs), torch.tensor(ys)
        n = len(data[f"train_y{task}"])
        data[f"fit_order{task}"] = split_order(n, seed, task)
    g = torch.Generator().manual_seed(seed)
    n = len(data["train_y0"])
    data["batches"] = torch.stack([torch.randperm(n, generator=g) for _ in range(epochs)])
    torch.save(data, out)
    return out


def batches(data: dict, batch: int) -> list[list[list[int]]]:
    return [[p[i : i + batch].tolist() for i in range(0, len(p), batch)] for p in data["batches"]]


def card_params(method: str, **overrides) -> dict:
    """The method card's defaults (adapt: adapter, the variant on a ViT) with overrides."""
    card = yaml.safe_load((REPO / "methods" / f"{method}.yaml").read_text())
    return {**card["defaults"], "adapt": "adapter", "epochs": STEP_EPOCHS, **overrides}


def pilot_names(net) -> dict[str, str]:
    """cl-bench's trainable tensor names -> PILOT's (its adapter ViT, its CosineLinear)."""
    names = {"adapt_head.weight": "fc.weight", "adapt_head.sigma": "fc.sigma"}
    for block in net.adaptation.set.adapters:
        for ours, theirs in (("down", "down_proj"), ("up", "up_proj")):
            for part in ("weight", "bias"):
                names[f"adaptation.set.adapters.{block}.{ours}.{part}"] = (
                    f"backbone.blocks.{block}.adaptmlp.{theirs}.{part}"
                )
    return names


def ours_step(
    method: str, work: Path, params: dict, seed: int = STEP_SEED, tasks: int = 2
) -> tuple[dict, dict, dict]:
    """cl-bench's side: its net, optimizer, schedule and ``fit`` on the fixed inputs of
    ``tasks`` tasks, its initial tensors drawn after ``torch.manual_seed(seed)``.
    Returns (records, the initial trainable tensors under PILOT's names, the name map)."""
    from cl_bench.backbones.adapters import Adapter
    from cl_bench.backbones.vit import vit
    from cl_bench.contract.optimizer import make_optimizer
    from cl_bench.strategies.aper import Aper, AperNet
    from cl_bench.strategies.blocks.first_session import features_of
    from cl_bench.strategies.blocks.first_session_adapt import adapted_backbone
    from cl_bench.strategies.blocks.ridge import ridge_losses, ridge_losses_float32
    from cl_bench.strategies.ranpac import RanPAC, RanpacNet

    torch.set_num_threads(1)
    data = torch.load(step_inputs(work, params["epochs"], seed, tasks), weights_only=True)
    _, weights = inputs(work)
    torch.manual_seed(seed)
    frozen = replace(vit(BACKBONE, str(weights), img_size=SIZE), mean=None, std=None)
    net = (AperNet if method == "aper" else RanpacNet)(frozen, "adapter", params)
    for m in net.modules():  # adapter dropout off: no random draw to share
        if isinstance(m, Adapter):
            m.dropout = 0.0
    net.adapt_head.grow(INCREMENT)
    names = pilot_names(net)

    def trainable():
        return {
            names[n]: p.detach().clone()
            for n, p in net.named_parameters()
            if p.requires_grad and n in names
        }

    init = trainable()
    if (
        method == "ranpac"
    ):  # the random projection PILOT reads (patch_pilot_adapter_vit.py's PARITY_WRAND)
        torch.save(net.W_rand.clone(), work / f"step-wrand{tag_of(seed, tasks)}.pt")
    opt, sched = make_optimizer(params, net.parameters())
    rec: dict = {"step 1": {}, **{f"task {t + 1}": {} for t in range(tasks)}}
    losses: list[float] = []
    for epoch in batches(data, params["batch_size"]):
        net.train()
        for idx in epoch:
            loss = F.cross_entropy(net(data["train_x0"][idx]), data["train_y0"][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if not rec["step 1"]:
                net.eval()
                with torch.no_grad():
                    logits = net(data["test_x0"])
                rec["step 1"] = {"params": trainable(), "loss": list(losses), "logits": logits}
                net.train()
        sched.step()
    net.eval()
    rec["task 1"]["params"] = trainable()
    net.adapt_head = None
    net.adaptation.requires_grad_(False)
    adapted = adapted_backbone(frozen, "adapter", net.adaptation)
    passes = [frozen, adapted] if method == "aper" else [adapted]
    strategy = (Aper if method == "aper" else RanPAC).__new__(Aper if method == "aper" else RanPAC)
    strategy.model, strategy.ridges, strategy.params = net, [], params
    for task in range(tasks):
        order = data[f"fit_order{task}"]
        x = features_of(passes, data[f"train_x{task}"])
        y = data[f"train_y{task}"]
        search, search32 = [], []
        if method == "ranpac":  # the lambda search on the split fit() uses, both arithmetics
            h = net.project(x)[order]
            onehot = F.one_hot(y[order], (task + 1) * INCREMENT).to(h)
            search, search32 = ridge_losses(h, onehot), ridge_losses_float32(h, onehot)
        type(strategy).fit(strategy, x, y)
        test = features_of(passes, data[f"test_x{task}"])
        with torch.no_grad():
            logits = net(test)
        key = f"task {task + 1}"
        rec[key].update(
            logits=logits,
            ridge_losses=search,
            ridge_losses32=search32,
            loss=losses if task == 0 else [],
            state=ours_state(method, net),
            ridge=strategy.ridges[-1] if strategy.ridges else None,
        )
        if task == 1:
            rec[key]["params"] = {
                names[n]: p.detach().clone() for n, p in net.named_parameters() if n in names
            }
    return rec, init, names


def ours_state(method: str, net) -> dict[str, torch.Tensor]:
    if method == "aper":
        return {"fc.weight": net.classifier.weight.detach().clone()}
    return {"fc.weight": net.W_o.detach().clone(), "G": net.G.clone(), "Q": net.C.clone()}


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    if a.shape != b.shape:
        raise ParityError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    return float((a - b).abs().max()) if a.numel() else 0.0


def step_check(
    method: str,
    copy: Path,
    work: Path,
    env: dict,
    params: dict,
    label: str = "",
    seed: int = STEP_SEED,
    tasks: int = 2,
) -> dict:
    """Both sides on the same inputs and initial tensors (drawn from ``seed``), for
    ``tasks`` tasks: the raw records of both (the step check's differences come from
    :func:`summary`; a paired seed's curves from the test logits)."""
    ours, init, _ = ours_step(method, work, params, seed, tasks)
    return {
        "ours": ours,
        "reference": pilot_step(method, copy, work, env, params, init, label, seed, tasks),
    }


def pilot_step(
    method: str,
    copy: Path,
    work: Path,
    env: dict,
    params: dict,
    init: dict,
    label: str = "",
    seed: int = STEP_SEED,
    tasks: int = 2,
) -> dict:
    """PILOT's side of :func:`step_check` from cl-bench's initial tensors ``init``."""
    tag = tag_of(seed, tasks)
    init_path = work / f"step-init-{method}{tag}.pt"
    torch.save(init, init_path)
    inputs_path = step_inputs(work, params["epochs"], seed, tasks)
    data = torch.load(inputs_path, weights_only=True)
    args = {
        **pilot_args(method),
        "tuned_epoch": params["epochs"],
        "init_lr": params["lr"],
        "batch_size": params["batch_size"],
    }
    spec = {
        "args": args,
        "inputs": str(inputs_path),
        "init": str(init_path),
        "n_classes": len(CLASS_ORDER),
        "increment": INCREMENT,
        "tasks": tasks,
        "states": tasks == 2,
        "batches": batches(data, params["batch_size"]),
    }
    out = work / f"step-pilot-{method}{tag}{label}.pt"
    pilot(copy, work, "step", spec, out, env)
    return torch.load(out, weights_only=False)


KEPT_FP16 = (
    "cl-bench's features pass through fp16 (its feature store keeps them so); PILOT keeps "
    "fp32. The step check and the paired seeds round PILOT's backbone outputs the same way "
    "(a forward hook in the driver). A feature-store format, no card switch."
)

BOUND = 2e-4
BOUND_WHY = (
    "float32 round-off on identical inputs: cl-bench's ViT runs timm 1.0's Block (fused "
    "attention) with hooked adapters, PILOT its own adapter ViT (explicit softmax), "
    "~1e-7 relative per pass; both sides round the backbone's features through fp16 (as "
    "cl-bench's feature store keeps them), so a feature within that round-off of an fp16 "
    "rounding boundary moves by one fp16 unit (2^-10 relative, ~2e-3 at |f| ~ 3), diluted "
    "by the 40-image class mean in a prototype or G: <= ~5e-5 on values up to 3. RanPAC's "
    "ridge search is compared in float64 on both sides (PILOT with PARITY_FLOAT64=1), where "
    "PILOT's direct solve of the rank-64 2000 x 2000 G_val + lambda I for lambda <= 1e-6 "
    "loses about 4 of float64's digits against cl-bench's eigendecomposition: up to 1e-4 "
    "on losses ~0.05. 2e-4 covers both with a factor of 2."
)


def test_loss(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return float(F.cross_entropy(logits.double(), labels))


def summary(method: str, check: dict, work: Path) -> dict:
    """The largest absolute differences per checkpoint: every trained tensor (adapters,
    adaptation head; after task 1 and 2 also the classifier: APER's prototype rows,
    RanPAC's W_o), the losses (training batch losses; the test cross-entropy; RanPAC's
    17 ridge validation losses) and the test logits (PILOT's RanPAC logits carry the
    adaptation head's learnt scale, divided out: cl-bench drops that head)."""
    data = torch.load(step_inputs(work), weights_only=True)
    out = {
        "after": ["step 1", "task 1", "task 2"],
        "max_abs_param": [],
        "max_abs_loss": [],
        "max_abs_logit": [],
    }
    for k, key in enumerate(out["after"]):
        ours, ref = check["ours"][key], check["reference"][key]
        if set(ours["params"]) != set(ref["params"]):
            raise ParityError(
                f"{key}: trained tensors differ: {sorted(set(ours['params']) ^ set(ref['params']))}"
            )
        params = [max_abs(ours["params"][n], ref["params"][n]) for n in ours["params"]]
        ref_logits = ref["logits"]
        if "state" in ref:
            params.append(max_abs(ours["state"]["fc.weight"], ref["state"]["fc.weight"]))
            if method == "ranpac":
                ref_logits = ref_logits / ref["state"]["fc.sigma"]
        labels = data["test_y0" if k < 2 else "test_y1"]
        losses = [abs(test_loss(ours["logits"], labels) - test_loss(ref_logits, labels))]
        if ours["loss"]:
            losses.append(abs(ours["loss"][-1] - ref["loss"][-1]))
        losses += [
            abs(a - b)
            for a, b in zip(ours.get("ridge_losses", []), pilot_ridge_losses(ref, k), strict=True)
        ]
        out["max_abs_param"].append(max(params))
        out["max_abs_loss"].append(max(losses))
        out["max_abs_logit"].append(max_abs(ours["logits"], ref_logits))
    return {**out, "bound": BOUND, "bound_why": BOUND_WHY}


def pilot_ridge_losses(ref: dict, k: int) -> list[float]:
    """PILOT's ridge validation losses on cl-bench's scale: PILOT's one-hot spans all 10
    classes, whose unseen columns are fitted exactly (zero), so its mean is cl-bench's
    (over the seen columns) times seen / 10."""
    seen = (k if k else 1) * INCREMENT
    return [v * len(CLASS_ORDER) / seen for v in ref.get("ridge_losses", [])]


def accuracies(logits: list, labels: list) -> dict:
    """Top-1 over the seen classes after each task (``curve``) and on the newest task's
    classes right after it (``learnt``), in percent; logits columns are class positions
    in CLASS_ORDER."""
    out: dict = {"curve": [], "learnt": []}
    for t, (z, y) in enumerate(zip(logits, labels, strict=True)):
        hit = torch.as_tensor(z).argmax(1) == y
        out["curve"].append(100.0 * float(hit.double().mean()))
        out["learnt"].append(100.0 * float(hit[y >= t * INCREMENT].double().mean()))
    return out


def test_labels(work: Path, epochs: int, seed: int, tasks: int) -> list[torch.Tensor]:
    """Each task's seen test labels of a run of the step machinery."""
    data = torch.load(step_inputs(work, epochs, seed, tasks), weights_only=True)
    return [data[f"test_y{t}"] for t in range(tasks)]


def run_seed(
    method: str,
    copy: Path,
    work: Path,
    seed: int,
    pilot_env: dict | None = None,
    ours_settings: dict | None = None,
) -> dict:
    """Both sides end to end at CLASS_ORDER with this seed; each side's curve, accuracy
    matrix and the accuracy of every task right after it is trained ("learnt")."""
    sides = {
        "ours": ours_run(method, work, seed, ours_settings),
        "reference": pilot_run(method, copy, work, seed, pilot_env),
    }
    return {side: {**run, "learnt": learnt(run)} for side, run in sides.items()}
