"""What the loader of images on disk delivers per worker process, on an ImageNet-R-sized
JPEG tree: does decoding keep a GPU busy, and with how many workers.

    .venv/bin/python -m bench.loader_throughput                  # 24,000 images
    .venv/bin/python -m bench.loader_throughput --images 2000 --no-record   # a quick check
    .venv/bin/python -m bench.loader_throughput --root DIR       # the tree in DIR

The tree (made once, reused when its ``tree.json`` says it is the same): 200 classes
in cl-bench's ImageFolder layout (``train/<class>/``, ``test/<class>/``, one image in
five a test image), 500 x 375 JPEGs at quality 90 whose content compresses like a
photo's (a smooth colour field, flat shapes with sharp edges, film grain: ~55 KB each,
ImageNet-R's files are of that order). It goes to a folder under the system's temp
folder unless ``--root`` names one.

Measured, each over the same images (read once before, so every row times decoding
and not the disk): images/s of the training transform (RandomResizedCrop + flip) and
of the test transform (Resize(256, bicubic) + CenterCrop(224)), through a DataLoader
with the settings a run uses (:class:`cl_bench.contract.Loading`), with one worker
process and with every usable CPU as a worker; the decode-once pass of the test
images (:mod:`cl_bench.scenarios.decoded_tests`); and what JPEG draft mode
(``Image.draft``, decoding at 1/2, 1/4 or 1/8 scale) would change in the test
transform's output, on the tree's images and on images twice their size. A table is
printed and the figures are recorded as ``bench/results/loader-throughput-DATE-CPU.json``
(:func:`bench.measurements.write`; not with ``--no-record``).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms.functional import to_tensor

from cl_bench.contract import Loading, usable_cpus
from cl_bench.scenarios.decoded_tests import crop_pipeline, decode_files
from cl_bench.scenarios.folders import imagefolder
from cl_bench.scenarios.image_data import FileList
from cl_bench.scenarios.transforms import FileTransform
from cl_bench.text_table import text_table

TREE_VERSION = 1
WIDTH, HEIGHT, QUALITY = 500, 375, 90
# grain shared by every image up to twice the tree's size (a random window of it each):
# drawing fresh Gaussian noise per image costs more than encoding the image
GRAIN = np.random.default_rng(12345).normal(0, 5, (4 * HEIGHT, 4 * WIDTH, 1)).astype(np.int16)


def photo(seed: int, width: int = WIDTH, height: int = HEIGHT) -> Image.Image:
    """A photo-like RGB image: a smooth colour field with finer detail, flat ellipses
    and rectangles (sharp edges), and film grain; the same for the same seed."""
    rng = np.random.default_rng(seed)

    def field(rows: int, cols: int) -> Image.Image:
        cells = rng.integers(0, 256, (rows, cols, 3), dtype=np.uint8)
        return Image.fromarray(cells).resize((width, height), Image.BICUBIC)

    img = Image.blend(field(4, 5), field(24, 32), 0.3)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(4, 12))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1 = x0 + int(rng.integers(10, width // 2))
        y1 = y0 + int(rng.integers(10, height // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=colour)
    oy, ox = int(rng.integers(0, height)), int(rng.integers(0, width))
    pixels = np.asarray(img, np.int16) + GRAIN[oy : oy + height, ox : ox + width]
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


def _write(job: tuple[str, int]) -> int:
    path, seed = job
    photo(seed).save(path, "JPEG", quality=QUALITY)
    return Path(path).stat().st_size


def tree_plan(images: int, classes: int) -> tuple[int, int, int]:
    """(classes, training and test images per class) for about ``images`` images: one
    in five a test image, at least one of each per class."""
    classes = max(1, min(classes, images // 2))
    per_class = max(2, images // classes)
    test = max(1, round(per_class / 5))
    return classes, per_class - test, test


def make_tree(root: Path, images: int, classes: int = 200) -> dict:
    """The JPEG tree in ``root`` (made in parallel, or reused when its ``tree.json``
    matches); returns what ``tree.json`` holds."""
    n_classes, n_train, n_test = tree_plan(images, classes)
    spec = {
        "version": TREE_VERSION,
        "classes": n_classes,
        "train_per_class": n_train,
        "test_per_class": n_test,
        "width": WIDTH,
        "height": HEIGHT,
        "quality": QUALITY,
    }
    marker = root / "tree.json"
    if marker.is_file():
        found = json.loads(marker.read_text())
        if {k: found.get(k) for k in spec} == spec:
            return found
    jobs = []
    for c in range(n_classes):
        for split, count in (("train", n_train), ("test", n_test)):
            folder = root / split / f"class{c:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            jobs += [(str(folder / f"{i:04d}.jpg"), len(jobs) + i) for i in range(count)]
    with ProcessPoolExecutor(max_workers=usable_cpus()) as pool:
        sizes = list(pool.map(_write, jobs, chunksize=64))
    made = {**spec, "images": len(jobs), "mean_file_kb": sum(sizes) / len(sizes) / 1e3}
    marker.write_text(json.dumps(made, indent=1) + "\n")
    return made


class _Transformed(Dataset):
    def __init__(self, files: FileList, transform) -> None:
        self.files, self.transform = files, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(self.files[i])


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (loader workers
    are counted once they are joined)."""
    return sum(
        sum(resource.getrusage(who)[:2]) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )


def timed_pass(workers: int, run) -> dict:
    """Wall time, images/s (in all and per worker) and images per CPU second (of the
    workers and this process together) of ``run()``, which returns its image count.
    Images per CPU second is about what one worker gives on a core of its own: on a
    shared machine, where other processes take turns on the cores, it is the figure
    that moves least with their load (the load average is recorded beside it)."""
    gc.collect()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    images = run()
    gc.collect()  # the loader's workers end and are joined: their CPU time is counted
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    rate = images / seconds
    return {
        "workers": workers,
        "images": images,
        "seconds": seconds,
        "images_per_s": rate,
        "images_per_s_per_worker": rate / max(workers, 1),
        "cpu_s": cpu,
        "images_per_cpu_s": images / cpu,
        "load_average": os.getloadavg()[0],
    }


def loader_rate(files: FileList, transform, workers: int, batch_size: int = 32) -> dict:
    """:func:`timed_pass` of ``transform`` over ``files`` through a DataLoader with a
    run's settings for ``workers`` worker processes (their start included)."""

    def run() -> int:
        loader = DataLoader(
            _Transformed(files, transform),
            batch_size=batch_size,
            generator=torch.Generator().manual_seed(0),
            **Loading(workers=workers).dataloader_kwargs(),
        )
        return sum(len(batch) for batch in loader)

    return timed_pass(workers, run)


def decode_once_rate(files: FileList, size: int, workers: int) -> dict:
    """:func:`timed_pass` of the decode-once pass over ``files`` with ``workers``
    processes (one: in this process)."""
    return timed_pass(
        workers, lambda: len(decode_files(files, size, workers=workers, progress=False))
    )


def transformed_output(jpeg: bytes, size: int, draft: bool) -> tuple[torch.Tensor, bool]:
    """The test transform's output for a JPEG, decoded in full (as a run does) or in
    draft mode at the smallest scale that keeps the resize's short side (size / 0.875)
    whole; and whether draft mode decoded at a smaller scale at all."""
    with Image.open(io.BytesIO(jpeg)) as img:
        full = img.size
        if draft:
            side = round(size / 0.875)
            img.draft("RGB", (side, side))
        smaller = img.size != full
        rgb = img.convert("RGB")
    return to_tensor(crop_pipeline(size)(rgb)), smaller


def draft_difference(jpegs: list[bytes], size: int) -> dict:
    """Largest |difference| of the test transform's output with draft mode against
    without, over ``jpegs``, in [0, 1] units and in 8-bit levels; the images draft
    mode decoded smaller, and the time per image of each."""
    largest, smaller, seconds = 0.0, 0, {False: 0.0, True: 0.0}
    for jpeg in jpegs:
        out = {}
        for draft in (False, True):
            t0 = time.perf_counter()
            out[draft], reduced = transformed_output(jpeg, size, draft)
            seconds[draft] += time.perf_counter() - t0
        largest = max(largest, float((out[True] - out[False]).abs().max()))
        smaller += reduced
    return {
        "images": len(jpegs),
        "decoded_smaller": smaller,
        "largest_abs_diff": largest,
        "largest_diff_levels": round(largest * 255),
        "full_ms": 1e3 * seconds[False] / len(jpegs),
        "draft_ms": 1e3 * seconds[True] / len(jpegs),
    }


def jpeg_bytes(seed: int, width: int, height: int) -> bytes:
    buf = io.BytesIO()
    photo(seed, width, height).save(buf, "JPEG", quality=QUALITY)
    return buf.getvalue()


def measure(
    root: Path,
    size: int = 224,
    images: int | None = None,
    workers: int | None = None,
    draft_images: int = 100,
) -> dict:
    """The figures on the tree in ``root``: each rate over ``images`` images of the
    split (default: all) with 1 and ``workers`` (default: every usable CPU) worker
    processes; draft mode on ``draft_images`` test images and as many of twice the
    size."""
    data = imagefolder(root, name="loader-bench")
    everyone = usable_cpus() if workers is None else workers
    counts = sorted({1, everyone})
    rows = []
    for split, files, train in (("train", data.train_x, True), ("test", data.test_x, False)):
        files = files[:images] if images else files
        for path in files.paths:  # into the page cache: the rows time decoding, not the disk
            Path(path).read_bytes()
        transform = FileTransform(size, train=train)
        for n in counts:
            rows.append(
                {"transform": split, "id": transform.id, **loader_rate(files, transform, n)}
            )
    tests = data.test_x[:images] if images else data.test_x
    decode_once = [decode_once_rate(tests, size, n) for n in counts]
    sample = [Path(p).read_bytes() for p in data.test_x.paths[:draft_images]]
    twice = [jpeg_bytes(10**6 + i, 2 * WIDTH, 2 * HEIGHT) for i in range(len(sample))]
    return {
        "size": size,
        "usable_cpus": usable_cpus(),
        "tree": {
            "root": str(root),
            "classes": data.n_classes,
            "train_images": len(data.train_x),
            "test_images": len(data.test_x),
        },
        "rates": rows,
        "decode_once": decode_once,
        "draft": {
            "tree": draft_difference(sample, size),
            f"{2 * WIDTH}x{2 * HEIGHT}": draft_difference(twice, size),
        },
    }


def table(result: dict) -> list[str]:
    rows = [
        [
            "transform",
            "workers",
            "images",
            "seconds",
            "img/s",
            "img/s per worker",
            "img per CPU s",
            "load",
        ]
    ]
    named = [(f"{r['transform']} ({r['id']})", r) for r in result["rates"]]
    named += [("test, decoded once (uint8)", r) for r in result["decode_once"]]
    for name, r in named:
        rows.append(
            [
                name,
                str(r["workers"]),
                str(r["images"]),
                f"{r['seconds']:.1f}",
                f"{r['images_per_s']:.0f}",
                f"{r['images_per_s_per_worker']:.0f}",
                f"{r['images_per_cpu_s']:.0f}",
                f"{r['load_average']:.1f}",
            ]
        )
    lines = text_table(rows, right=(1, 2, 3, 4, 5, 6, 7))
    for where, d in result["draft"].items():
        lines.append(
            f"draft mode, {where}: {d['decoded_smaller']}/{d['images']} decoded "
            f"smaller; largest |difference| {d['largest_abs_diff']:.4f} "
            f"({d['largest_diff_levels']} of 255 levels); {d['full_ms']:.1f} ms "
            f"-> {d['draft_ms']:.1f} ms per image"
        )
    return lines


def headline(result: dict) -> list[tuple[str, str]]:
    """The rows a reader compares: images/s and images per CPU-second of each row, and
    what draft mode changes."""
    named = [(f"{r['transform']} ({r['id']})", r) for r in result["rates"]]
    named += [("test, decoded once (uint8)", r) for r in result["decode_once"]]
    rows = [
        (
            f"{name}, {r['workers']} worker{'s' if r['workers'] > 1 else ''}",
            f"{r['images_per_s']:.0f} img/s, {r['images_per_cpu_s']:.0f} per CPU-second",
        )
        for name, r in named
    ]
    for where, d in result["draft"].items():
        rows.append(
            (
                f"JPEG draft mode, {where}",
                f"{d['decoded_smaller']} of {d['images']} decoded smaller, pixels moved "
                f"by up to {d['largest_diff_levels']} of 255 levels",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m bench.loader_throughput", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--images", type=int, default=24000, help="images in the tree")
    parser.add_argument("--classes", type=int, default=200)
    parser.add_argument("--root", type=Path, help="the tree's folder (default: a temp one)")
    parser.add_argument(
        "--measure",
        type=int,
        default=0,
        help="images per split and row (default: all of the split)",
    )
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="print the table only (a quick check), record nothing",
    )
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.gettempdir()) / f"cl-bench-loader-tree-{args.images}"
    t0 = time.perf_counter()
    tree = make_tree(root, args.images, args.classes)
    made_s = time.perf_counter() - t0
    result = measure(root, args.size, args.measure or None)
    result["tree"] |= {k: tree.get(k) for k in ("width", "height", "quality", "mean_file_kb")}
    result["tree"]["made_or_checked_s"] = made_s
    result["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    print("\n".join(table(result)))
    if not args.no_record:
        from bench.measurements import command_line, write

        given = sys.argv[1:] if argv is None else argv
        path = write(
            "loader-throughput",
            headline(result),
            result,
            "n/a (JPEG decoding)",
            command_line(["-m", "bench.loader_throughput", *given]),
        )
        print(f"recorded in {path}")
    return result


if __name__ == "__main__":
    main()
