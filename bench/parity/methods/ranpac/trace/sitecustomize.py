"""Parity instrumentation for cl-bench's RanPAC (bench/parity.md): with this folder on
PYTHONPATH and PARITY_TRACE=FILE in the environment, every Python process (the run's
spawned workers included) wraps ``RanPAC.fit`` so that after each task the lambdas
chosen so far go to FILE (JSON) and the random projection W_rand to FILE.wrand.pt.
PILOT's PARITY_RIDGES and PARITY_WRAND switches (patch_pilot_adapter_vit.py) then replay them.
Nothing of cl-bench changes; without PARITY_TRACE this file does nothing."""

import os

if os.environ.get("PARITY_TRACE"):
    import json
    from pathlib import Path

    import torch

    from cl_bench.strategies import ranpac

    _fit = ranpac.RanPAC.fit

    def _traced_fit(self, x, y):
        _fit(self, x, y)
        out = Path(os.environ["PARITY_TRACE"])
        torch.save(self.model.W_rand.detach().cpu().clone(), f"{out}.wrand.pt")
        out.write_text(json.dumps({"ridges": self.ridges}))

    ranpac.RanPAC.fit = _traced_fit
