"""Patch a scratch checkout of LAMDA-PILOT (never this repository) for the parity
runs of bench/parity.md: CPU, the parity image tree as a dataset, cl-bench's
random ViT-Tiny weights from a file, no DataLoader workers, top-5 clipped to the
classes seen. Every edit is anchored on a line of PILOT's source and fails loudly
when the anchor is gone (a newer PILOT), so a silent half-patch cannot happen.

    python bench/parity/patch_pilot.py /work/scratch/pilot

At run time PILOT then reads PARITY_TREE (the folder with train/ and test/) and
PARITY_WEIGHTS (the .pth of export_weights.py) and, when set, PARITY_IMG_SIZE
(the input size; the ViT's position table and the transforms follow it). The
configs it runs are copied to PILOT/exps/parity_*.json from bench/parity/methods/*/.
Apply it to a fresh checkout (an edited file is not patched twice only where the
edit is unchanged).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (file, anchor, replacement): the anchor must occur exactly once
EDITS = [
    # 1. a dataset "parity": the image tree in PILOT's ImageFolder layout, with the
    #    transforms PILOT uses for every ImageFolder dataset (build_transform)
    (
        "utils/data.py",
        "class iCIFAR224(iData):",
        """class iParity(iData):
    use_path = True
    train_trsf = build_transform(True, None)
    test_trsf = build_transform(False, None)
    common_trsf = []
    class_order = np.arange(10).tolist()

    def download_data(self):
        import os
        root = os.environ["PARITY_TREE"]
        train_dset = datasets.ImageFolder(os.path.join(root, "train"))
        test_dset = datasets.ImageFolder(os.path.join(root, "test"))
        self.train_data, self.train_targets = split_images_labels(train_dset.imgs)
        self.test_data, self.test_targets = split_images_labels(test_dset.imgs)


class iCIFAR224(iData):""",
    ),
    (
        "utils/data_manager.py",
        '    elif name == "vtab":',
        '    elif name == "parity":\n        from utils.data import iParity\n'
        '        return iParity()\n    elif name == "vtab":',
    ),
    # 2. every timm model PILOT builds gets cl-bench's weights (strict except for
    #    the keys the method adds: head, prompts, keys)
    (
        "utils/inc_net.py",
        "import timm\n",
        """import timm
import os as _parity_os

_parity_timm_create = timm.create_model


def _parity_create_model(name, *args, **kwargs):
    if _parity_os.environ.get("PARITY_IMG_SIZE"):
        kwargs.setdefault("img_size", int(_parity_os.environ["PARITY_IMG_SIZE"]))
    model = _parity_timm_create(name, *args, **kwargs)
    path = _parity_os.environ.get("PARITY_WEIGHTS")
    if path:
        state = torch.load(path, map_location="cpu", weights_only=True)
        extra = model.pos_embed.shape[1] - state["pos_embed"].shape[1]
        if extra > 0:  # L2P's table: the [CLS] entry copied for every prompt token
            pos = state["pos_embed"]
            state["pos_embed"] = torch.cat([pos[:, :1].expand(-1, 1 + extra, -1), pos[:, 1:]], 1)
        missing, unexpected = model.load_state_dict(state, strict=False)
        assert not unexpected, f"parity weights do not fit {name}: {unexpected}"
        logging.info(f"parity weights loaded into {name}; left at init: {missing}")
    return model


timm.create_model = _parity_create_model
""",
    ),
    # 3. a SimpleCIL backbone name for the random ViT-Tiny
    (
        "utils/inc_net.py",
        '    elif name == "pretrained_vit_b16_224_in21k" or',
        """    elif name == "parity_vit_tiny":
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0)
        model.out_dim = 192
        return model.eval()
    elif name == "pretrained_vit_b16_224_in21k" or""",
    ),
    # 4. the input size from PARITY_IMG_SIZE (PILOT fixes 224)
    (
        "utils/data.py",
        "    input_size = 224\n",
        '    input_size = int(__import__("os").environ.get("PARITY_IMG_SIZE", 224))\n',
    ),
    # 5. top-5 accuracy when fewer than 5 classes are seen (PILOT crashes there)
    *[
        (f, "outputs, k=self.topk, dim=1", "outputs, k=min(self.topk, outputs.shape[1]), dim=1")
        for f in (
            "models/base.py",
            "models/l2p.py",
            "models/dualprompt.py",
            "models/coda_prompt.py",
        )
    ],
    ("models/base.py", "np.tile(y_true, (self.topk, 1))", "np.tile(y_true, (y_pred.shape[1], 1))"),
]
# 6. no DataLoader worker processes on a 2-core machine (same batches, same order)
WORKERS = ["models/simplecil.py", "models/l2p.py", "models/dualprompt.py", "models/coda_prompt.py"]


def apply_edits(root: Path, edits: list[tuple[str, str, str]]) -> None:
    """Each (file, anchor, replacement) once: skipped when the replacement is there
    already, refused unless the anchor occurs exactly once (the patch_*.py scripts)."""
    for rel, anchor, new in edits:
        path = root / rel
        text = path.read_text()
        if new in text:
            continue  # already patched
        if text.count(anchor) != 1:
            raise SystemExit(
                f"{path}: anchor {anchor!r} found {text.count(anchor)} times, "
                "expected once; this PILOT differs from the one of bench/parity.md"
            )
        path.write_text(text.replace(anchor, new))


def patch(root: Path) -> None:
    apply_edits(root, EDITS + [(f, "num_workers = 8\n", "num_workers = 0\n") for f in WORKERS])
    for config in sorted((HERE / "methods").glob("*/parity_*.json")):
        shutil.copy(config, root / "exps" / config.name)


if __name__ == "__main__":
    patch(Path(sys.argv[1]))
    print(f"patched {sys.argv[1]}")
