"""Datasets on disk as researchers have them: PILOT's ImageFolder layout and
torchvision's CIFAR-100.

ImageFolder layout (PILOT / APER pre-sampled archives)::

    DATA_ROOT/<folder>/train/<class>/<image>
    DATA_ROOT/<folder>/test/<class>/<image>

Class index = position of the class folder name in sorted order (as
torchvision's ImageFolder), the same in train and test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torchvision.datasets.folder import IMG_EXTENSIONS

from cl_bench.errors import UserError
from cl_bench.scenarios.image_data import FileList, ImageData
from cl_bench.scenarios.tree import scan

ARCHIVES = (
    "the pre-sampled archives linked from LAMDA-PILOT's README "
    "(https://github.com/LAMDA-CL/LAMDA-PILOT#datasets)"
)


def expected_tree(root: Path) -> str:
    return (
        f"{root}/train/<class>/<image>.jpg and {root}/test/<class>/<image>.jpg, with the "
        "same class folders in both"
    )


def need_root(data_root: Path | None, folder: str | None, name: str) -> Path:
    """The dataset folder, or the one-paragraph error that says where to put it."""
    if data_root is None:
        sub = f"DIR/{folder}" if folder else "DIR"
        raise UserError(
            f"Scenario {name} reads its images from disk, and no data root was given. Pass "
            f"--data-root DIR (or set CL_BENCH_DATA=DIR) where {expected_tree(Path(sub))}; "
            f"PILOT's layout, as in {ARCHIVES}. `cl-bench data check --scenario {name} "
            "--data-root DIR` checks a tree before a run."
        )
    root = Path(data_root) / folder if folder else Path(data_root)
    missing = [s for s in ("train", "test") if not (root / s).is_dir()]
    if missing:
        raise UserError(
            f"Scenario {name}: {' and '.join(str(root / s) for s in missing)} not found. "
            f"Expected {expected_tree(root)} (PILOT's layout; {ARCHIVES}). Point --data-root "
            "at the folder that holds it."
        )
    return root


def list_split(root: Path, split: str, name: str) -> dict[str, list[str]]:
    """class folder -> sorted image paths; a link or image name that leads to no file
    is refused (dropped, it would make a run succeed on fewer images than it should)."""
    found = scan(root, split)
    if found.broken:
        raise UserError(
            f"Scenario {name}: in {root / split}, {len(found.broken)} "
            f"{'entry leads' if len(found.broken) == 1 else 'entries lead'} "
            "to no image or class folder: "
            f"{'; '.join(found.broken[:5])}{' ...' if len(found.broken) > 5 else ''}. Restore "
            "the targets from the archive or delete the entries, so that the run reads the "
            f"data you think it reads (`cl-bench data check --scenario {name}` lists every one)."
        )
    return found.classes


def imagefolder(
    data_root: Path | None,
    folder: str | None = None,
    n_classes: int | None = None,
    name: str = "imagefolder",
    **_: object,
) -> ImageData:
    """Image files in PILOT's layout; ``n_classes`` (when given) must match the disk."""
    root = need_root(data_root, folder, name)
    train, test = list_split(root, "train", name), list_split(root, "test", name)
    for split, classes in (("train", train), ("test", test)):
        if not classes:
            raise UserError(
                f"Scenario {name}: {root / split} holds no class folders. Expected "
                f"{expected_tree(root)} (PILOT's layout; {ARCHIVES}): each class's "
                "images in a folder named after the class."
            )
    if sorted(train) != sorted(test):
        only = sorted(set(train) ^ set(test))
        raise UserError(
            f"Scenario {name}: train and test of {root} have different class "
            f"folders (only on one side: {', '.join(only[:5])}"
            f"{' ...' if len(only) > 5 else ''}). Both splits need the same classes."
        )
    if n_classes is not None and len(train) != n_classes:
        raise UserError(
            f"Scenario {name}: found {len(train)} class folders in {root / 'train'}, "
            f"expected {n_classes}. Check that --data-root points at the complete "
            f"{folder or name} tree ({ARCHIVES})."
        )
    for split, classes in (("train", train), ("test", test)):
        empty = [c for c, files in classes.items() if not files]
        if empty:
            raise UserError(
                f"Scenario {name}: class folder(s) {', '.join(empty[:5])} in "
                f"{root / split} hold no images ({', '.join(sorted(IMG_EXTENSIONS))})."
                " Restore them from the archive or remove the class from both splits."
            )
    names = sorted(train)

    def flat(classes: dict[str, list[str]]) -> tuple[FileList, torch.Tensor]:
        paths = [p for c in names for p in classes[c]]
        y = torch.tensor([i for i, c in enumerate(names) for _ in classes[c]], dtype=torch.long)
        return FileList(paths), y

    (train_x, train_y), (test_x, test_y) = flat(train), flat(test)
    return ImageData(
        name=name, train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y, class_names=names
    )


def cifar_root(data_root: Path | None, download: bool) -> None:
    """A data root is given, and holds the archive's folder unless it may be fetched
    (what the loader needs before torchvision reads it, checked without reading it)."""
    if data_root is None:
        raise UserError(
            "Scenario cifar100 needs --data-root DIR (or CL_BENCH_DATA) with "
            "torchvision's DIR/cifar-100-python/; add --download to fetch it there "
            "(about 170 MB)."
        )
    if not download and not (Path(data_root) / "cifar-100-python").is_dir():
        raise UserError(
            f"CIFAR-100 not found in {data_root}: expected torchvision's "
            f"{Path(data_root) / 'cifar-100-python'}/{{train,test,meta}}. Run again "
            "with --download to fetch it, or extract cifar-100-python.tar.gz there."
        )


def cifar100(
    data_root: Path | None, download: bool = False, name: str = "cifar100", **_: object
) -> ImageData:
    """CIFAR-100 through torchvision from the data root; downloads only when asked."""
    from torchvision.datasets import CIFAR100

    cifar_root(data_root, download)
    try:
        sets = [CIFAR100(str(data_root), train=t, download=download) for t in (True, False)]
    except RuntimeError as e:
        raise UserError(
            f"CIFAR-100 not found in {data_root} ({e}). Expected torchvision's "
            f"{Path(data_root) / 'cifar-100-python'}/{{train,test,meta}}; run again "
            "with --download to fetch it, or extract cifar-100-python.tar.gz there."
        ) from None

    def tensors(ds) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)))
        return x, torch.tensor(ds.targets, dtype=torch.long)

    (train_x, train_y), (test_x, test_y) = tensors(sets[0]), tensors(sets[1])
    return ImageData(
        name=name,
        train_x=train_x,
        train_y=train_y,
        test_x=test_x,
        test_y=test_y,
        class_names=list(sets[0].classes),
    )
