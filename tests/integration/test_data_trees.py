"""Data trees tell the truth: links that lead nowhere and image names that are no file
are reported by `data check` and refused by `run`; an image that does not decode stops
a run before anything is written (checked once per dataset fingerprint); the dry run
checks the data root and the class order without loading data."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cl_bench.cards import catalogue
from cl_bench.cards.catalogue import load_scenario
from cl_bench.errors import UserError
from cl_bench.scenarios import decode_check, load_data, transforms
from tests.helpers.cards import card_variant
from tests.helpers.cli import TREE as VALIDATION_TREE
from tests.helpers.cli import invoke, refused
from tests.helpers.trees import image_tree, one_image_classes

TREE = [*VALIDATION_TREE, "--precision", "fp32"]


def check(root: Path):
    return invoke(
        "data", "check", "--scenario", "imagefolder", "--data-root", str(root), "--no-progress"
    )


def run(root: Path, out: Path, *args: str):
    return invoke("run", "--out", str(out), "--data-root", str(root), *TREE, *args)


def spoil_dangling(root: Path) -> tuple[Path, str]:
    link = root / "train" / "a" / "gone.png"
    link.symlink_to(root / "nowhere.png")
    return link, f"a dangling symlink: its target {root / 'nowhere.png'} does not exist"


def spoil_loop(root: Path) -> tuple[Path, str]:
    link = root / "test" / "b" / "loop.jpg"
    link.symlink_to("loop.jpg")
    return link, "a symlink loop (-> loop.jpg)"


def spoil_class_link(root: Path) -> tuple[Path, str]:
    link = root / "train" / "c"
    link.symlink_to(root / "elsewhere" / "c")
    return link, f"a dangling symlink: its target {root / 'elsewhere' / 'c'} does not exist"


def spoil_folder(root: Path) -> tuple[Path, str]:
    folder = root / "train" / "b" / "album.jpg"
    folder.mkdir()
    return folder, "not a regular file"


def spoil_fifo(root: Path) -> tuple[Path, str]:
    fifo = root / "test" / "a" / "pipe.png"
    os.mkfifo(fifo)
    return fifo, "not a regular file"


@pytest.mark.parametrize(
    "spoil",
    [spoil_dangling, spoil_loop, spoil_class_link, spoil_folder, spoil_fifo],
    ids=lambda f: f.__name__,
)
def test_entries_that_lead_nowhere_are_reported_and_refused(spoil, tmp_path):
    root = image_tree(tmp_path / "data")
    where, why = spoil(root)
    checked = check(root)
    assert checked.exit_code == 1, checked.output
    assert "  1 entry leads to no image or class folder (a run refuses them):" in checked.stdout
    assert f"    {where}: {why}" in checked.stdout.splitlines()
    assert "all 8 images decode" in checked.stdout  # the 8 real ones: nothing else counted

    out = tmp_path / "out"
    refused(
        run(root, out), f"to no image or class folder: {where}: {why}. Restore the targets", out
    )


def test_links_that_resolve_are_data(tmp_path):
    """A link to an image, and a class folder that is a link, count like the real thing."""
    root = image_tree(tmp_path / "data")
    (root / "train" / "a" / "linked.png").symlink_to(root / "train" / "b" / "0.png")
    elsewhere = image_tree(tmp_path / "other")
    for split in ("train", "test"):
        (root / split / "c").symlink_to(elsewhere / split / "a", target_is_directory=True)
    card = load_scenario("imagefolder")
    data = load_data(card, root)
    assert data.class_names == ["a", "b", "c"]
    assert data.train_y.tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert data.train_x.paths[2] == str(root / "train" / "a" / "linked.png")
    checked = check(root)
    assert checked.exit_code == 0, checked.output
    assert "all 13 images decode" in checked.stdout


def truncated_jpeg(path: Path) -> str:
    buffer = path.with_suffix(".full")
    noise = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(buffer, format="JPEG")
    whole = buffer.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    buffer.unlink()
    return "OSError: image file is truncated ("


def garbage(path: Path) -> str:
    path.write_bytes(b"not a png at all")
    return f"UnidentifiedImageError: cannot identify image file '{path}')"


@pytest.mark.parametrize("spoil", [garbage, truncated_jpeg], ids=lambda f: f.__name__)
def test_image_that_does_not_decode_stops_the_run_before_anything_is_written(spoil, tmp_path):
    root = image_tree(tmp_path / "data")
    bad = root / "train" / "b" / "1.jpg"
    why = spoil(bad)
    out = tmp_path / "out"
    refused(
        run(root, out, "--seeds", "1,2"),
        f"1 image file(s) of scenario imagefolder do not decode: {bad} ({why}",
        out,
    )
    checked = check(root)
    assert checked.exit_code == 1
    assert "  1 unreadable file(s):" in checked.stdout
    assert any(ln.startswith(f"    {bad} ({why}") for ln in checked.stdout.splitlines())


def test_unreadable_image_stops_the_run(tmp_path, monkeypatch):
    root = image_tree(tmp_path / "data")
    bad = root / "test" / "a" / "0.png"
    bad.chmod(0)
    if os.geteuid() == 0:  # root reads files whatever their mode: refuse as the kernel would
        decode = transforms.decode

        def refusing(path: str):
            if path == str(bad):
                raise PermissionError(13, "Permission denied")
            return decode(path)

        monkeypatch.setattr(transforms, "decode", refusing)
    out = tmp_path / "out"
    refused(
        run(root, out), f"do not decode: {bad} (PermissionError: [Errno 13] Permission denied", out
    )


def test_decode_check_costs_once_per_dataset_version(tmp_path, monkeypatch):
    root = image_tree(tmp_path / "data")
    decoded: list[str] = []

    def counting(path: str) -> str | None:
        decoded.append(path)
        return None

    monkeypatch.setattr(decode_check, "decode_problem", counting)
    card, marks = load_scenario("imagefolder"), tmp_path / "marks"
    decode_check.check_decodes(load_data(card, root), marks, progress=False)
    assert len(decoded) == 8
    data = load_data(card, root)
    assert (marks / data.fingerprint).read_text() == "8 images decode\n"
    decode_check.check_decodes(data, marks, progress=False)
    assert len(decoded) == 8  # remembered: not decoded again
    os.utime(root / "test" / "b" / "1.png", ns=(0, 0))  # a replaced file: a new version
    decode_check.check_decodes(load_data(card, root), marks, progress=False)
    assert len(decoded) == 16
    unwritable = tmp_path / "file"
    unwritable.write_text("")
    decode_check.check_decodes(load_data(card, root), unwritable / "marks", progress=False)
    assert len(decoded) == 24  # a cache that cannot be written: checked, and no error


def test_a_failing_dataset_is_not_remembered(tmp_path):
    root = image_tree(tmp_path / "data")
    garbage(root / "test" / "a" / "1.png")
    marks = tmp_path / "marks"
    data = load_data(load_scenario("imagefolder"), root)
    for _ in range(2):
        with pytest.raises(UserError, match="1 image file"):
            decode_check.check_decodes(data, marks, progress=False)
    assert not marks.exists()


@pytest.mark.parametrize("images", [False, True], ids=["empty splits", "images, no classes"])
def test_a_tree_without_class_folders_is_refused_and_nothing_written(images, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("CL_BENCH_CACHE", str(cache))
    root = tmp_path / "data"
    for split in ("train", "test"):
        (root / split).mkdir(parents=True)
        if images:
            Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(root / split / "0.png")
    out = tmp_path / "out"
    refused(
        run(root, out),
        f"Scenario imagefolder: {root / 'train'} holds no class folders. "
        f"Expected {root}/train/<class>/<image>.jpg",
        out,
    )
    assert not cache.exists()  # no decode memo


def test_a_split_the_tree_cannot_hold_leaves_no_decode_memo(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("CL_BENCH_CACHE", str(cache))
    out = tmp_path / "out"
    refused(
        run(image_tree(tmp_path / "data"), out, "--set", "scenario.init_cls=3"),
        "init_cls = 3 is larger than the 2 classes of the dataset",
        out,
    )
    assert not cache.exists()


def test_dry_run_checks_the_data_root(tmp_path):
    out = tmp_path / "out"
    plan = [
        "run",
        "--methods",
        "simplecil",
        "--scenario",
        "imagenet-a",
        "--dry-run",
        "--weights",
        "random",
        "--out",
        str(out),
    ]
    refused(
        invoke(*plan),
        "Scenario imagenet-a reads its images from disk, and no data root was given",
        out,
    )
    refused(
        invoke(*plan, "--data-root", str(tmp_path / "none")),
        f"Scenario imagenet-a: {tmp_path / 'none' / 'imagenet-a' / 'train'} and "
        f"{tmp_path / 'none' / 'imagenet-a' / 'test'} not found",
        out,
    )
    tree = tmp_path / "data" / "imagenet-a"
    for split in ("train", "test"):
        (tree / split).mkdir(parents=True)
    refused(
        invoke(*plan, "--data-root", str(tmp_path / "data")),  # read as a run reads it
        f"Scenario imagenet-a: {tree / 'train'} holds no class folders",
        out,
    )
    one_image_classes(tree, 200)
    planned = invoke(*plan, "--data-root", str(tmp_path / "data"))
    assert planned.exit_code == 0, planned.output
    refused(
        invoke(*plan, "--data-root", str(tmp_path / "data"), "--set", "scenario.init_cls=201"),
        "init_cls = 201 is larger than the 200 classes of the dataset",
        out,
    )

    for scenario, needle in (
        ("cifar100", f"CIFAR-100 not found in {tmp_path}: expected torchvision's"),
        (
            "fmnist-full",
            "The full Fashion-MNIST files were not found in "
            f"{tmp_path} or {tmp_path / 'fashion-mnist'}",
        ),
    ):
        refused(
            invoke(
                "run",
                "--methods",
                "simplecil",
                "--scenario",
                scenario,
                "--dry-run",
                "--data-root",
                str(tmp_path),
                "--out",
                str(out),
            ),
            needle,
            out,
        )


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_bad_class_order_is_refused_before_anything_is_written(dry, tmp_path):
    out = tmp_path / "out"
    args = [
        "run",
        "--methods",
        "simplecil",
        "--scenario",
        "synthetic",
        "--no-progress",
        "--precision",
        "fp32",
        "--out",
        str(out),
        *(["--dry-run"] if dry else []),
    ]
    refused(
        invoke(*args, "--set", "scenario.class_order=bogus"),
        "Scenario synthetic: class_order 'bogus' is none of \"seed\" (PILOT's seeded "
        'permutation), "natural" or a list of class ids',
        out,
    )
    bad_orders = [
        ([1, 0, 1, 2, 3, 4, 5, 6, 7, 8], "is not a permutation of 0..9"),
        (["a", "b"], "class_order ['a', 'b'] is none of"),
        ([0.5, 1], "class_order [0.5, 1] is none of"),
    ]
    for i, (order, needle) in enumerate(bad_orders):
        (tmp_path / str(i)).mkdir()
        cards = card_variant(
            tmp_path / str(i), catalogue.BENCHMARKS_DIR, "synthetic", "ordered", class_order=order
        )
        refused(
            invoke(*[a if a != "synthetic" else "ordered" for a in args], "--cards", str(cards)),
            needle,
            out,
        )
