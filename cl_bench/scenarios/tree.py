"""What a split folder in PILOT's layout holds, and what in it is not what it seems.

``<split>/<class>/<image>``: a class is a folder (or a link to one), an image a
file with an image suffix (or a link to one). A link whose target is gone, a
link that loops, or an image name that is not a regular file (a folder, a FIFO)
would otherwise be dropped without a word, and a run would succeed on fewer
images than the archive holds; so they are listed here, for ``data check`` to
report and for a run to refuse.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from torchvision.datasets.folder import IMG_EXTENSIONS


@dataclass
class Split:
    """``classes``: class folder name -> sorted image paths; ``broken``: one
    ``"<path>: <what is wrong>"`` per entry that looks like data and is not."""

    classes: dict[str, list[str]] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)


def what_is_wrong(path: str) -> str:
    """Why ``path``, which should be a regular file or a folder, is neither."""
    if not os.path.islink(path):
        return "not a regular file"
    target = os.readlink(path)
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"a symlink loop (-> {target})"
        if e.errno == errno.ENOENT:
            return f"a dangling symlink: its target {target} does not exist"
        return f"a symlink to {target} that cannot be followed ({e.strerror})"
    return f"a symlink to {target}, which is not a regular file"


def followed(entry: os.DirEntry, kind: str) -> bool:
    """``entry.is_file()`` / ``is_dir()``, False where the link cannot be followed (a
    loop raises there, unlike ``Path.is_file``; :func:`what_is_wrong` says why)."""
    try:
        return entry.is_file() if kind == "file" else entry.is_dir()
    except OSError:
        return False


def entries(folder: Path, split: Split) -> list[os.DirEntry]:
    """The folder's entries, sorted by name; a folder that cannot be listed is broken."""
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as e:
        split.broken.append(f"{folder}: cannot be listed ({e.strerror})")
        return []


def images(folder: Path, split: Split) -> list[str]:
    """The image files of a class folder; an image name that is no file is broken."""
    out = []
    for entry in entries(folder, split):
        if os.path.splitext(entry.name)[1].lower() not in IMG_EXTENSIONS:
            continue  # not an image by its name (as torchvision's ImageFolder decides)
        if followed(entry, "file"):
            out.append(entry.path)
        else:
            split.broken.append(f"{entry.path}: {what_is_wrong(entry.path)}")
    return out


def scan(root: Path, split_name: str) -> Split:
    """The split's classes and images, and every broken entry: a link among the class
    folders that leads nowhere, an image name in a class folder that is no file."""
    split = Split()
    for entry in entries(root / split_name, split):
        if followed(entry, "dir"):
            split.classes[entry.name] = images(Path(entry.path), split)
        elif entry.is_symlink() and not os.path.exists(entry.path):
            split.broken.append(f"{entry.path}: {what_is_wrong(entry.path)}")
    return split
