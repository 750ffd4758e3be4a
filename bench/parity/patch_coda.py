"""Two more edits to a scratch LAMDA-PILOT checkout, after patch_pilot.py, for the
CODA-Prompt parity row (bench/parity/rows/coda_prompt.py):

    python bench/parity/patch_coda.py /work/scratch/pilot

1. The ``parity`` dataset of patch_pilot.py lists the classes 0-9 in their natural
   order, which PILOT uses when a config says ``shuffle: false``. With the environment
   variable PARITY_CLASS_ORDER (class indices, comma-separated) that list is read from
   it: a fixed class order over a tree of any number of classes. Unset: 0-9 as before.
2. ``build_transform``'s test pipeline with PARITY_TEST_RESIZE=round: Resize(round(size /
   0.875), bicubic) + CenterCrop(size) at every size, cl-bench's pipeline. PILOT resizes
   to int(size * 256 / 224) and, at 32 px and below, not at all (its CIFAR convention:
   the 28 px images would reach a 32 px ViT as they are). At 224 px (PILOT's own size)
   both are Resize(256) + CenterCrop(224). Unset: PILOT's.

Anchored as the other patch_*.py edits: refused unless the anchor occurs exactly once.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.parity.patch_pilot import apply_edits

ANCHOR = ("    common_trsf = []\n    class_order = np.arange(10).tolist()\n\n"
          "    def download_data(self):\n        import os\n"
          '        root = os.environ["PARITY_TREE"]\n')
EDITS = [
    ("utils/data.py", ANCHOR, ANCHOR.replace(
        "class_order = np.arange(10).tolist()",
        "class_order = [int(c) for c in __import__(\"os\").environ.get(\n"
        "        \"PARITY_CLASS_ORDER\", \"0,1,2,3,4,5,6,7,8,9\").split(\",\")]")),
    ("utils/data.py", "    resize_im = input_size > 32\n",
     "    _round = __import__(\"os\").environ.get(\"PARITY_TEST_RESIZE\") == \"round\"\n"
     "    resize_im = input_size > 32 or _round\n"),
    ("utils/data.py", "        size = int((256 / 224) * input_size)\n",
     "        size = round(input_size / 0.875) if _round else int((256 / 224) * input_size)\n"),
]


def patch(root: Path) -> None:
    apply_edits(root, EDITS)


if __name__ == "__main__":
    patch(Path(sys.argv[1]))
    print(f"patched {sys.argv[1]}")
