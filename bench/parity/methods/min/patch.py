"""Patch a scratch copy of the authors' MiN code (github thuwng/MiN-NeurIPS2025 at
292d883; never this repository) for the parity row bench/parity/methods/min/row.py:

1. ``MiN/backbones/ViT_MiN.py``: the fixed noise matrices on the CPU (official:
   ``cuda:0``) and the noise at the ViT's width (official: 768 whatever
   ``embed_dim``, which only fits ViT-B);
2. ``MiN/backbones/pretrained_backbone.py``: a backbone name ``parity_vit_tiny_min``:
   the authors' ``VisionTransformer`` at ViT-Tiny's shape (192 wide, 12 blocks, 3
   heads) and ``PARITY_IMG_SIZE`` px holding the state dict of ``PARITY_WEIGHTS``
   (bench/parity/export_weights.py; official: timm's pretrained ViT-B/16 IN21K, which
   needs the network), loaded as the official branch loads it (``strict=False``: the
   noise is not in it) but refused when any other tensor is missing or left over;
3. ``MiN/models/MiN.py``: after every optimizer step a call
   ``self.parity_after_step(loss)`` when the driver set one (the step check's hook;
   nothing else changes).

    python bench/parity/methods/min/patch.py /work/scratch/min-copy
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.parity.patch_pilot import apply_edits

EDITS = [
    (
        "MiN/backbones/ViT_MiN.py",
        'device = torch.device("cuda:{}".format(0))',
        'device = torch.device("cpu")',
    ),
    (
        "MiN/backbones/ViT_MiN.py",
        "PiNoise(768, 768, args['hidden_dim'])",
        "PiNoise(embed_dim, embed_dim, args['hidden_dim'])",
    ),
    (
        "MiN/backbones/pretrained_backbone.py",
        "    else:\n        raise",
        """    elif name == "parity_vit_tiny_min":
        import os
        model = VisionTransformer(img_size=int(os.environ["PARITY_IMG_SIZE"]), embed_dim=192,
                                  depth=12, num_heads=3, num_classes=0, weight_init='skip',
                                  args=args)
        state = torch.load(os.environ["PARITY_WEIGHTS"], map_location="cpu", weights_only=True)
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or any(not k.startswith("noise_maker.") for k in missing):
            raise RuntimeError(f"parity weights: missing {missing}, unexpected {unexpected}")
        model.out_dim = 192
        model.layer_num = 12
    else:
        raise""",
    ),
    (
        "MiN/models/MiN.py",
        "                optimizer.step()\n",
        """                optimizer.step()
                getattr(self, "parity_after_step", lambda loss: None)(loss)
""",
    ),
]


def patch(root: Path) -> None:
    """Apply every edit once; SystemExit names an anchor that is missing or repeated."""
    apply_edits(root, EDITS)


if __name__ == "__main__":
    patch(Path(sys.argv[1]))
    print(f"patched {sys.argv[1]}")
