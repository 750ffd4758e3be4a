"""The validation split: per class a seeded share of the training images, held out of
training and evaluated on in place of the test split."""

from __future__ import annotations

import pytest
import torch

from cl_bench.errors import UserError
from cl_bench.scenarios.image_data import FileList, ImageData
from cl_bench.scenarios.validation import check_fraction, held_out, split_indices


def _data() -> ImageData:
    y = torch.tensor([0] * 10 + [1] * 5 + [2] * 3)
    x = torch.arange(len(y), dtype=torch.uint8).reshape(-1, 1, 1).expand(-1, 2, 2).contiguous()
    test_y = torch.tensor([0, 1, 2])
    test_x = torch.full((3, 2, 2), 255, dtype=torch.uint8)
    return ImageData("toy", x, y, test_x, test_y, ["a", "b", "c"])


def test_each_class_holds_out_its_rounded_share_and_at_least_one():
    y = _data().train_y
    kept, val = split_indices(y, 0.2, seed=0)
    # 10 * 0.2 = 2, 5 * 0.2 = 1, 3 * 0.2 = 0.6 -> 1
    assert torch.bincount(y[val]).tolist() == [2, 1, 1]
    assert sorted([*kept.tolist(), *val.tolist()]) == list(range(len(y)))
    assert kept.tolist() == sorted(kept.tolist()) and val.tolist() == sorted(val.tolist())


def test_the_draw_depends_on_the_seed_alone():
    y = _data().train_y
    assert torch.equal(split_indices(y, 0.3, 0)[1], split_indices(y, 0.3, 0)[1])
    assert not torch.equal(split_indices(y, 0.3, 0)[1], split_indices(y, 0.3, 1)[1])


def test_held_out_replaces_the_test_split_by_training_images():
    data = _data()
    val = held_out(data, 0.2)
    assert len(val.train_y) == 18 - 4 and len(val.test_y) == 4
    # every "test" image is a training image; the real test images (255) are gone
    assert set(val.test_x[:, 0, 0].tolist()) <= set(range(18))
    assert not set(val.test_x[:, 0, 0].tolist()) & set(val.train_x[:, 0, 0].tolist())
    assert val.validation == {"fraction": 0.2, "seed": 0}
    assert val.identity != data.identity and val.fingerprint != data.fingerprint
    assert held_out(data, 0.2).identity == val.identity
    assert held_out(data, 0.0) is data


def test_files_are_split_as_tensors_are():
    data = _data()
    files = FileList([f"/d/{i}.png" for i in range(18)])
    on_disk = ImageData(
        "f", files, data.train_y, data.test_x, data.test_y, data.class_names, "fp", "id"
    )
    val = held_out(on_disk, 0.2)
    _, idx = split_indices(data.train_y, 0.2, 0)
    assert val.test_x.paths == [f"/d/{i}.png" for i in idx.tolist()]


def test_a_class_left_without_training_images_is_refused():
    y = torch.tensor([0, 0, 1])
    with pytest.raises(UserError, match="leaves class 1 no training image"):
        split_indices(y, 0.5, 0)


@pytest.mark.parametrize("bad", [-0.1, 0.6, "0.1", True])
def test_fraction_out_of_range_is_refused(bad):
    with pytest.raises(UserError, match="--validation"):
        check_fraction(bad)
