"""bench/loader_throughput.py on a tiny tree: the tree is in cl-bench's ImageFolder
layout and reused, and every measured row counts the images it was asked to read."""

from __future__ import annotations

import json

from bench import loader_throughput as bench
from cl_bench.scenarios.folders import imagefolder


def test_tree_in_the_imagefolder_layout_and_reused(tmp_path):
    made = bench.make_tree(tmp_path, images=10, classes=2)
    assert (made["classes"], made["train_per_class"], made["test_per_class"]) == (2, 4, 1)
    assert made["images"] == 10 and made["mean_file_kb"] > 1
    data = imagefolder(tmp_path, name="tiny")
    assert data.class_names == ["class000", "class001"]
    assert (len(data.train_x), len(data.test_x)) == (8, 2)
    first = data.train_x.paths[0]
    mtime = (tmp_path / "tree.json").stat().st_mtime_ns, (tmp_path / first).stat().st_mtime_ns
    assert bench.make_tree(tmp_path, images=10, classes=2) == json.loads(
        (tmp_path / "tree.json").read_text()
    )
    assert (
        (tmp_path / "tree.json").stat().st_mtime_ns,
        (tmp_path / first).stat().st_mtime_ns,
    ) == mtime  # not written again


def test_measure_counts_every_image_of_every_row(tmp_path):
    bench.make_tree(tmp_path, images=10, classes=2)
    result = bench.measure(tmp_path, size=32, workers=2, draft_images=2)
    assert result["tree"] | {"root": None} == {
        "root": None,
        "classes": 2,
        "train_images": 8,
        "test_images": 2,
    }
    assert [(r["transform"], r["workers"], r["images"]) for r in result["rates"]] == [
        ("train", 1, 8),
        ("train", 2, 8),
        ("test", 1, 2),
        ("test", 2, 2),
    ]
    assert [r["id"] for r in result["rates"]] == ["rrc32-scale0.05-flip-sampleseed"] * 2 + [
        "resize37-bicubic-crop32"
    ] * 2
    assert [(r["workers"], r["images"]) for r in result["decode_once"]] == [(1, 2), (2, 2)]
    for r in result["rates"] + result["decode_once"]:
        assert r["images_per_s"] > 0 and r["images_per_cpu_s"] > 0
        assert r["images_per_s_per_worker"] == r["images_per_s"] / r["workers"]
    draft = result["draft"]
    assert set(draft) == {"tree", "1000x750"}
    assert draft["tree"]["images"] == draft["1000x750"]["images"] == 2
    # at 32 px the resize needs a 37 px short side: draft mode decodes 500 x 375 at 1/8
    # scale (at 224 px it needs 256 and cannot go below full scale), and the output moves
    assert draft["tree"]["decoded_smaller"] == 2 and draft["tree"]["largest_abs_diff"] > 0
    assert bench.table(result)[0].split()[:2] == ["transform", "workers"]
