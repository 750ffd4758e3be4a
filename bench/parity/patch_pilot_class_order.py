"""One more edit to a scratch LAMDA-PILOT checkout, after patch_pilot.py, for the
rows that run PILOT's ``main.py`` on a six-class tree (bench/parity/prompted.py):

    python bench/parity/patch_pilot_class_order.py /work/scratch/pilot

The ``parity`` dataset of patch_pilot.py lists the classes 0-9 in their natural order,
which PILOT uses when a config says ``shuffle: false``. With the environment variable
PARITY_CLASS_ORDER (class indices, comma-separated) that list is read from it: a fixed
class order over a tree of any number of classes. Unset: 0-9 as before.

Anchored as the other patch_*.py edits: refused unless the anchor occurs exactly once.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.parity.patch_pilot import apply_edits

ANCHOR = (
    "    common_trsf = []\n    class_order = np.arange(10).tolist()\n\n"
    "    def download_data(self):\n        import os\n"
    '        root = os.environ["PARITY_TREE"]\n'
)
EDITS = [
    (
        "utils/data.py",
        ANCHOR,
        ANCHOR.replace(
            "class_order = np.arange(10).tolist()",
            'class_order = [int(c) for c in __import__("os").environ.get(\n'
            '        "PARITY_CLASS_ORDER", "0,1,2,3,4,5,6,7,8,9").split(",")]',
        ),
    ),
]


def patch(root: Path) -> None:
    apply_edits(root, EDITS)


if __name__ == "__main__":
    patch(Path(sys.argv[1]))
    print(f"patched {sys.argv[1]}")
