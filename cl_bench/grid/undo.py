"""Writes undone after a refusal that promises nothing was written.

A SLURM submission writes before sbatch answers: the grid's record and submitit's
pickles and batch file. When sbatch refuses the array, :meth:`Before.undo` makes the
refusal's "nothing was submitted or written" true: the files added since the
snapshot directly in the named folders are removed, then the folders created since,
once empty. Files that were there before stay, and so does whatever sits in a
subfolder (a submitted job's folder): both belong to earlier submissions.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _entries(folder: Path) -> set[str]:
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


class Before:
    """What ``folders`` (inside ``out``) and their parents up to ``out`` hold now."""

    def __init__(self, out: Path, folders: list[Path]) -> None:
        self.folders = folders
        self.made = {
            parent
            for folder in folders
            for parent in (folder, *folder.parents)
            if parent == out or out in parent.parents
        }
        self.existed = {folder for folder in self.made if os.path.lexists(folder)}
        self.entries = {folder: _entries(folder) for folder in folders}

    def undo(self) -> None:
        """Remove the files added since directly in the folders, then the folders
        created since, deepest first, where empty."""
        for folder in self.folders:
            for name in _entries(folder) - self.entries[folder]:
                path = folder / name
                if path.is_symlink() or path.is_file():
                    path.unlink(missing_ok=True)
        for folder in sorted(self.made - self.existed, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()
