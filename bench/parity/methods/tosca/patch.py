"""Patch a scratch copy of the official TOSCA code (github ladka6/tosca-eval, root
commit 176f123, the public copy of muratonuryildirim/tosca; never this repository)
for the parity row bench/parity/methods/tosca/row.py:

1. the parity image tree as a dataset ``parity`` and the input size from
   ``PARITY_IMG_SIZE``: patch_pilot.py's own edits (the official code's
   ``utils/data.py`` / ``data_manager.py`` are PILOT's, with the same anchors);
2. ``utils/inc_net.py``: a backbone name ``parity_vit_tiny``: timm's
   ``vit_tiny_patch16_224`` at ``PARITY_IMG_SIZE`` holding the state dict of
   ``PARITY_WEIGHTS`` (strict), wrapped in the official ``ToscaViT`` as the
   official ViT-B/16 branches wrap theirs, ``out_dim`` 192;
3. ``backbone/vit_tosca.py``: with ``PARITY_FP16_FEATURES=1`` the final [CLS] feature
   is rounded through fp16 before the LuCA module, as cl-bench's feature store keeps
   every frozen feature (cl_bench/engine/features.py); unset, the official code;
4. ``models/tosca.py``: no DataLoader workers (``num_workers`` 10 -> 0: same batches
   on a 2-core machine), top-5 clipped to the seen classes (a first task of 2 classes
   crashes ``torch.topk``; top-1 is unchanged), and after every optimizer step a
   call ``self.parity_after_step(loss)`` when the driver set one (the step check's
   hook; nothing else changes);
5. ``models/base.py``: top-5 clipped as in 4.

    python bench/parity/methods/tosca/patch.py /work/scratch/tosca-copy
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.parity.patch_pilot import EDITS as PILOT_EDITS
from bench.parity.patch_pilot import apply_edits

# patch_pilot.py's edits that fit the official TOSCA code unchanged (dataset, input
# size, top-5 in models/base.py)
SHARED = {
    ("utils/data.py", "class iCIFAR224(iData):"),
    ("utils/data_manager.py", '    elif name == "vtab":'),
    ("utils/data.py", "    input_size = 224\n"),
    ("models/base.py", "outputs, k=self.topk, dim=1"),
    ("models/base.py", "np.tile(y_true, (self.topk, 1))"),
}

EDITS = [
    (
        "utils/inc_net.py",
        '    elif name == "pretrained_vit_b16_224_in21k" or',
        """    elif name == "parity_vit_tiny":
        import os
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0,
                                  img_size=int(os.environ.get("PARITY_IMG_SIZE", 224)))
        model.load_state_dict(torch.load(os.environ["PARITY_WEIGHTS"], map_location="cpu",
                                         weights_only=True))
        from backbone import vit_tosca
        model = vit_tosca.ToscaViT(model, args["mlp_ratio"], args["se_ratio"], args["flow"])
        model.out_dim = 192
        return model.eval()
    elif name == "pretrained_vit_b16_224_in21k" or""",
    ),
    (
        "backbone/vit_tosca.py",
        "        x = self.vit.fc_norm(x)\n",
        """        x = self.vit.fc_norm(x)
        if __import__("os").environ.get("PARITY_FP16_FEATURES") == "1":
            x = x.half().float()
""",
    ),
    ("models/tosca.py", "num_workers = 10\n", "num_workers = 0\n"),
    (
        "models/tosca.py",
        "outputs, k=self.topk, dim=1",
        "outputs, k=min(self.topk, outputs.shape[1]), dim=1",
    ),
    (
        "models/tosca.py",
        "                optimizer.step()\n",
        """                optimizer.step()
                getattr(self, "parity_after_step", lambda loss: None)(loss)
""",
    ),
]


def patch(root: Path) -> None:
    """Apply every edit once; SystemExit names an anchor that is missing or repeated."""
    shared = [e for e in PILOT_EDITS if (e[0], e[1]) in SHARED]
    if len(shared) != len(SHARED):
        raise SystemExit(
            "bench/parity/patch_pilot.py no longer has the edits methods/tosca/patch.py "
            f"reuses: {sorted(SHARED - {(e[0], e[1]) for e in shared})}"
        )
    apply_edits(root, shared + EDITS)


if __name__ == "__main__":
    patch(Path(sys.argv[1]))
    print(f"patched {sys.argv[1]}")
