"""How far apart are the frozen features of the two toolboxes' timm versions?

Runs in either environment (only torch, torchvision and timm): the final-norm
[CLS] of timm's `vit_tiny_patch16_224` with the parity weights, on the first N
test images of the tree under the test transform both toolboxes use. Run it
once in each environment, then once more with --compare to print the largest
absolute and relative difference.

    $PY bench/parity/feature_gap.py TREE WEIGHTS OUT.pt [N]
    python bench/parity/feature_gap.py --compare A.pt B.pt
"""

from __future__ import annotations

import sys

import timm
import torch
from torchvision import transforms as T
from torchvision.datasets import ImageFolder


def features(tree: str, weights: str, n: int) -> torch.Tensor:
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0).eval()
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    tf = T.Compose(
        [T.Resize(256, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(224), T.ToTensor()]
    )
    data = ImageFolder(f"{tree}/test", transform=tf)
    x = torch.stack([data[i][0] for i in range(0, len(data), max(1, len(data) // n))][:n])
    with torch.no_grad():
        return model(x)


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        a, b = torch.load(sys.argv[2]), torch.load(sys.argv[3])
        gap = (a - b).abs()
        print(
            f"{len(a)} images: max |a - b| = {gap.max():.3e}, max |a| = {a.abs().max():.3e}, "
            f"relative {gap.max() / a.abs().max():.3e}; cosine of normalised rows >= "
            f"{torch.nn.functional.cosine_similarity(a, b).min():.9f}"
        )
    else:
        torch.save(
            features(sys.argv[1], sys.argv[2], int(sys.argv[4]) if len(sys.argv) > 4 else 20),
            sys.argv[3],
        )
