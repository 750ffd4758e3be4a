"""Save cl-bench's `--weights random` ViT (seeded init) as a state-dict file, so
that cl-bench (`--weights FILE`) and the patched reference (timm 0.6.13's ViT,
`load_state_dict`) start from the same tensors.

    python -m bench.parity.export_weights /work/scratch/parity-data/vit_tiny_random.pth
    python -m bench.parity.export_weights /work/scratch/parity-data/vit_tiny_random_64.pth 64

The second form builds the ViT at 64 px (a 4 x 4 patch grid, 17 position
entries): the prompt methods train on 2 CPU cores only at that size.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from cl_bench.backbones.vit import vit


def export(path: Path, img_size: int | None = None, name: str = "vit_tiny_patch16_224") -> int:
    model = vit(name, "random", img_size=img_size).model
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return len(state)


if __name__ == "__main__":
    size = int(sys.argv[2]) if len(sys.argv) > 2 else None
    print(f"{export(Path(sys.argv[1]), size)} tensors saved to {sys.argv[1]}")
