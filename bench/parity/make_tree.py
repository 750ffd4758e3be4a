"""Write the parity image tree: the first N train and M test images per class of
the embedded Fashion-MNIST subset as PNG files (lossless, so both toolboxes read
the same bytes) in PILOT's ImageFolder layout, which cl-bench's `imagefolder`
scenario reads too:

    OUT/train/class_00/0000.png ... OUT/test/class_09/0029.png

Class folder k holds Fashion-MNIST class k, so the sorted folder names give the
same class indices (0-9) in both toolboxes.

    python -m bench.parity.make_tree /work/scratch/parity-data/fmnist-png [40 30]
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image

from cl_bench.scenarios.loaders import fmnist


def write_tree(out: Path, train_per_class: int, test_per_class: int) -> int:
    data = fmnist()
    written = 0
    for split, x, y, per_class in (
        ("train", data.train_x, data.train_y, train_per_class),
        ("test", data.test_x, data.test_y, test_per_class),
    ):
        for c in range(len(data.class_names)):
            folder = out / split / f"class_{c:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            idx = (y == c).nonzero().flatten()[:per_class]
            for k, i in enumerate(idx.tolist()):
                Image.fromarray(x[i].numpy(), mode="L").save(folder / f"{k:04d}.png")
                written += 1
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1])
    n_train, n_test = (int(a) for a in sys.argv[2:4]) if len(sys.argv) >= 4 else (40, 30)
    print(f"{write_tree(target, n_train, n_test)} images written under {target}")
