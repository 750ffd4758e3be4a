"""Checks of a command's input that need no data or backbone: seeds, image size,
and whether the folders it will write to can be written.

They run before anything is written, so that a refused command leaves no grid
file, lock or failure record behind (see :mod:`cl_bench.engine.runner`).
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

from cl_bench.errors import UserError

SEED_MAX = 2**32 - 1  # numpy's RandomState takes seeds in 0..2**32-1


def check_seeds(seeds: list[int]) -> None:
    bad = [s for s in seeds if not 0 <= s <= SEED_MAX]
    if bad:
        raise UserError(
            f"--seeds {', '.join(map(str, bad))}: a seed must be an integer from 0 "
            f"to {SEED_MAX} (numpy's seed range), e.g. --seeds 1993,1994."
        )


def patch_size(backbone: str) -> int | None:
    """The patch size in a ViT's timm name (``vit_base_patch16_224`` -> 16), else None."""
    match = re.search(r"_patch(\d+)_", backbone)
    return int(match.group(1)) if match else None


def check_image_size(backbone: str, kind: str, size: int | None) -> None:
    """``--image-size``: positive for every backbone; for a ViT a multiple of its patch
    size (timm cuts the image into whole patches, so 7 px or 20 px would be cut or fail)."""
    if size is None:
        return
    if size < 1:
        raise UserError(
            f"--image-size {size}: the input resolution must be a positive number "
            "of pixels, e.g. --image-size 224 (omit it for the backbone's own, "
            "224)."
        )
    patch = patch_size(backbone) if kind == "vit" else None
    if patch and size % patch:
        low = max(patch, size // patch * patch)
        raise UserError(
            f"--image-size {size}: {backbone} cuts images into {patch}x{patch} "
            f"patches, so the size must be a multiple of {patch} (e.g. {low} or "
            f"{low + patch})."
        )


RESERVED_BYTES = 255  # for what cl-bench writes below a folder: runs/<scenario>/<method>/...


def check_name_lengths(path: Path, existing: Path, what: str) -> None:
    """Every name in ``path`` within the filesystem's limit (255 bytes on most), and the
    whole path short enough to hold cl-bench's files: a longer one fails only when the
    folder is created, after data and backbone loaded. ``existing``: the nearest folder
    of ``path`` that exists, whose filesystem sets the limits."""

    def limit(name: str, default: int) -> int:
        try:
            return os.pathconf(existing, name)
        except (OSError, ValueError):
            return default

    name_max = limit("PC_NAME_MAX", 255)
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            raise UserError(
                f'{what}: the name "{part[:24]}..." is {size} bytes long, but this '
                f"filesystem allows at most {name_max} bytes per file or folder "
                "name. Choose a shorter name."
            )
    size = len(os.fsencode(os.path.abspath(path)))
    path_max = limit("PC_PATH_MAX", 4096) - RESERVED_BYTES
    if size > path_max:
        raise UserError(
            f"{what}: the path is {size} bytes long, but cl-bench writes files "
            f"below it and needs it within {path_max} bytes (the filesystem's "
            f"limit less {RESERVED_BYTES}). Choose a shorter path."
        )


def nearest_existing(path: Path) -> Path:
    """``path``, or its nearest parent that exists."""
    existing = Path(path)
    while not os.path.exists(existing):  # False, not an error, for a name too long
        if existing.parent == existing:
            break
        existing = existing.parent
    return existing


def write_problem(folder: Path) -> str | None:
    """Why this process cannot create a file in the existing ``folder`` ("read-only",
    "Permission denied"), or None when it can. Probed with a nameless temporary file,
    which leaves nothing behind, because permission bits say nothing for root or on a
    read-only mount."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return "read-only" if e.errno == errno.EROFS else e.strerror or str(e)
    return None


def writable_dir(path: Path, what: str) -> None:
    """Refuse unless ``path`` is a folder this process can create files in, or can be
    created (its nearest existing parent is such a folder): :func:`write_problem`."""
    path = Path(path)
    existing = nearest_existing(path)
    check_name_lengths(path, existing, what)
    if not existing.is_dir():
        where = "is" if existing == path else f"lies under {existing}, which is"
        raise UserError(f"{what} {path} {where} a file, not a folder. Choose another path.")
    reason = write_problem(existing)
    if reason is not None:
        made = "" if existing == path else f" (it would be created in {existing})"
        raise UserError(
            f"{what} {path} cannot be written{made}: {reason}. Choose a folder "
            "you can write to, or fix its permissions."
        )


def cache_folder(path: Path, what: str) -> None:
    """A cache's folder: one that exists is read even where it cannot be written (a
    group's shared copy, mounted read-only), so only one still to be made must be
    creatable (:func:`writable_dir`, which also refuses a name too long)."""
    if not os.path.isdir(path):  # False, not an error, for a name too long
        writable_dir(path, what)
