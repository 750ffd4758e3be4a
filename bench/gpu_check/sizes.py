"""How big each part of the GPU check is: the real check, and the CPU dry run's toy
sizes (the same code, so a dry run checks the script, in seconds)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    backbone: str  # the ViT of the extraction, methods and determinism parts
    image_size: int
    extract_images: int  # per precision
    extract_batch: int
    matmul: int  # side of the square matrices of the peak measurement
    tree_classes: int  # the generated JPEG tree: one task of this many classes
    tree_images: int
    method_batch: int | None  # None: each card's own batch size
    agreement_images: int  # fmnist test images whose CPU and CUDA features are compared
    agreement_runs: bool  # SimpleCIL and TOSCA on the embedded default, CPU and CUDA
    determinism_steps: int
    determinism_batch: int


GPU = Sizes(
    backbone="vit_base_patch16_224",
    image_size=224,
    extract_images=2048,
    extract_batch=128,
    matmul=8192,
    tree_classes=10,
    tree_images=1000,
    method_batch=None,
    agreement_images=1000,
    agreement_runs=True,
    determinism_steps=8,
    determinism_batch=32,
)

DRY = Sizes(
    backbone="vit_tiny_patch16_224",
    image_size=32,
    extract_images=8,
    extract_batch=4,
    matmul=64,
    tree_classes=2,
    tree_images=12,
    method_batch=4,
    agreement_images=8,
    agreement_runs=False,
    determinism_steps=2,
    determinism_batch=2,
)
