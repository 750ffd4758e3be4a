"""cl-bench's CLI as it is (``python -m bench.parity.drivers.ours_init run ...`` takes
the arguments of ``python -m cl_bench``), writing the initial trainable tensors of the
method's model to the file named by ``PARITY_INIT_OUT`` when its strategy is built,
before anything trains: the reference then starts from the same tensors
(bench/parity/drivers/pilot_prompted.py ``run``). Nothing of the run changes.
"""

from __future__ import annotations

import functools
import os
import sys

import torch

from cl_bench.commands.cli import main
from cl_bench.strategies.blocks.shared_vit import OnSharedViT

_build = OnSharedViT.__init__


@functools.wraps(_build)  # Avalanche reads the constructors' signatures
def _traced(self, **kwargs) -> None:
    _build(self, **kwargs)
    torch.save(
        {name: p.detach().clone() for name, p in self.model.named_parameters()},
        os.environ["PARITY_INIT_OUT"],
    )


if __name__ == "__main__":
    OnSharedViT.__init__ = _traced
    sys.argv = ["cl-bench", *sys.argv[1:]]
    main()
