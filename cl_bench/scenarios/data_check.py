"""``cl-bench data check``: is a scenario's data where and what it should be?

Counts classes and images per split against the card's expectations and
decodes every image file, listing the unreadable ones; missing data is the
same one-paragraph error a run gives (expected tree, where the archives are).
"""

from __future__ import annotations

from pathlib import Path

from cl_bench.cards.card import Card
from cl_bench.scenarios.decode_check import undecodable
from cl_bench.scenarios.folders import need_root
from cl_bench.scenarios.tree import scan


def check_data(card: Card, data_root: Path | None, progress: bool = True) -> tuple[list[str], bool]:
    """(report lines, everything as expected)."""
    from cl_bench.scenarios import load_data

    params = card.params
    expected = params.get("expected") or {}
    if params["dataset"] != "imagefolder":
        data = load_data(card, data_root)
        lines = [
            f"{card.name}: {data.n_classes} classes, {len(data.train_y)} train / "
            f"{len(data.test_y)} test images (in memory; decoded at load)"
        ]
        ok = True
        for split, n in (("train", len(data.train_y)), ("test", len(data.test_y))):
            want = expected.get(f"{split}_images")
            if want is not None and want != n:
                lines.append(f"  {split}: {n} images, expected {want}")
                ok = False
        return lines, ok
    args = params.get("dataset_args") or {}
    root = need_root(data_root, args.get("folder"), card.name)
    scans = {s: scan(root, s) for s in ("train", "test")}
    splits = {s: found.classes for s, found in scans.items()}
    want_classes = args.get("n_classes")
    lines, ok = [f"{card.name}: {root}"], True
    for split, classes in splits.items():
        n_img = sum(len(v) for v in classes.values())
        want_img = expected.get(f"{split}_images")
        status = []
        if want_classes is not None and len(classes) != want_classes:
            status.append(f"expected {want_classes} classes")
        if want_img is not None and n_img != want_img:
            status.append(f"expected {want_img} images")
        empty = [c for c, files in classes.items() if not files]
        if empty:
            status.append(f"empty classes: {', '.join(empty[:5])}")
        ok &= not status
        lines.append(
            f"  {split:5s} {len(classes):4d} classes {n_img:7d} images  "
            f"{'ok' if not status else 'PROBLEM: ' + '; '.join(status)}"
        )
    only = sorted(set(splits["train"]) ^ set(splits["test"]))
    if only:
        ok = False
        lines.append(f"  class folders only in one split: {', '.join(only[:10])}")
    broken = [entry for found in scans.values() for entry in found.broken]
    if broken:
        ok = False
        lines.append(
            f"  {len(broken)} {'entry leads' if len(broken) == 1 else 'entries lead'}"
            " to no image or class folder (a run refuses them):"
        )
        lines += [f"    {entry}" for entry in broken]
    paths = [p for classes in splits.values() for files in classes.values() for p in files]
    bad = undecodable(paths, progress)
    if bad:
        ok = False
        lines.append(f"  {len(bad)} unreadable file(s):")
        lines += [f"    {p}" for p in bad]
    else:
        lines.append(f"  all {len(paths)} images decode")
    return lines, ok
