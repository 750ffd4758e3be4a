"""Every image of a dataset on disk decodes: checked before a run writes anything.

A corrupt, truncated or unreadable image met mid-run would fail that run after the
grid's files were written (exit 1, a ``.failed`` record), where bad input should
stop the command with one paragraph, exit 2 and nothing written. So before the
first run every image is decoded once, and a dataset that passed is remembered by
its fingerprint (file names, sizes and modification times: the feature cache's
key, so a replaced file is checked again) in a marker file: the check costs one
pass over the images per version of the dataset, not one per command.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cl_bench.errors import UserError
from cl_bench.progress import bar
from cl_bench.scenarios.image_data import ImageData
from cl_bench.scenarios.transforms import decode_problem


def undecodable(paths: list[str], progress: bool) -> list[str]:
    """``"<path> (<why>)"`` for every file that does not decode, in the given order.
    Threads: PIL decodes outside the GIL, and a dataset is tens of thousands of files."""
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        problems = list(
            bar(
                pool.map(decode_problem, paths),
                total=len(paths),
                unit="img",
                desc="decoding",
                enabled=progress,
            )
        )
    return [f"{path} ({why})" for path, why in zip(paths, problems, strict=True) if why]


def check_decodes(data: ImageData, marks: Path | None, progress: bool) -> None:
    """Refuse a dataset on disk with an image that does not decode; ``marks``: the
    folder of markers of datasets that passed (None: check every time)."""
    if not data.on_disk:
        return  # decoded when it was loaded
    marker = marks / data.fingerprint if marks is not None else None
    if marker is not None and marker.is_file():
        return
    paths = [*data.train_x.paths, *data.test_x.paths]
    bad = undecodable(paths, progress)
    if bad:
        raise UserError(
            f"{len(bad)} image file(s) of scenario {data.name} do not decode: "
            f"{'; '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}. Replace them from the "
            f"archive or delete them (`cl-bench data check --scenario {data.name}` lists "
            "every one); nothing was run or written."
        )
    if marker is not None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(f"{len(paths)} images decode\n")
        except OSError:
            pass  # a cache that cannot be written: the check runs again next time
