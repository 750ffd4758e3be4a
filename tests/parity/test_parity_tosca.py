"""The TOSCA parity row's own pieces that need neither the official code nor a backbone:
the shared batch order and the LuCA names between the two sides."""

from __future__ import annotations

from PIL import Image

from bench.parity.methods.tosca import row as tosca
from bench.parity.methods.tosca.reference import FixedBatches, ours, theirs
from cl_bench.strategies.blocks.luca import LuCA


def test_fixed_batches_follow_each_epochs_order_in_chunks():
    batches = FixedBatches([[4, 2, 0, 1, 3], [0, 1, 2, 3, 4]], 2)
    assert len(batches) == 3
    assert list(batches) == [[4, 2], [0, 1], [3]]
    assert list(batches) == [[0, 1], [2, 3], [4]]


def test_batch_orders_permute_each_tasks_images_per_epoch_and_seed(tmp_path):
    for c in range(10):
        folder = tmp_path / "train" / f"class_{c:02d}"
        folder.mkdir(parents=True)
        for k in range(3):
            Image.new("L", (4, 4)).save(folder / f"{k:04d}.png")
    orders = tosca.batch_orders(tmp_path, tosca.CLASS_ORDER)
    assert len(orders) == 2 and all(len(t) == tosca.HYPER["epochs"] for t in orders)
    for t, classes in enumerate((tosca.CLASS_ORDER[:5], tosca.CLASS_ORDER[5:])):
        want = sorted(f"train/class_{c:02d}/{k:04d}.png" for c in classes for k in range(3))
        assert all(sorted(epoch) == want for epoch in orders[t])
    assert orders[0][0] != orders[0][1]  # a fresh permutation per epoch
    assert orders == tosca.batch_orders(tmp_path, tosca.CLASS_ORDER)
    assert orders != tosca.batch_orders(tmp_path, tosca.CLASS_ORDER, seed=1994)  # per seed


def test_luca_names_map_both_ways_onto_every_tensor():
    names = list(LuCA(192).state_dict())
    assert len(names) == 8
    for name in names:
        assert ours("backbone.tosca." + theirs(name)) == name
    assert theirs("adapter.0.weight") == "mlp.0.weight"
    assert theirs("calibrator.2.weight") == "se.2.weight"
