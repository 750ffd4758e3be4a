"""Patch a scratch LAMDA-PILOT checkout (after patch_pilot.py) for the EASE and
MOS parity runs of bench/parity.md: their own ViTs (backbone/vit_ease.py,
backbone/vit_mos.py, a re-implemented ViT with split q/k/v) built as ViT-Tiny
(embed 192, 12 blocks, 3 heads) at PARITY_IMG_SIZE, loading PARITY_WEIGHTS the
way PILOT loads its pretrained ViT-B (the timm model's state dict with q/k/v
split and the MLP keys renamed; the adapters keep PILOT's own init), and the
places where PILOT hard-codes the ViT-B width 768. Every edit is anchored on
PILOT's source and refuses to apply when the anchor is missing or repeated.

    python bench/parity/patch_pilot.py /work/scratch/pilot
    python bench/parity/patch_pilot_ease_mos.py /work/scratch/pilot

MOS's merge rule: with PARITY_MOS_MERGE=paper at run time, PILOT's adapters are
not re-merged inside every forward (the official in-place drift, methods/mos.yaml)
but only once after every optimizer step, cl-bench's rule; unset, PILOT runs as
published.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.parity.patch_pilot import apply_edits

HERE = Path(__file__).resolve().parent

# a builder per ViT file: PILOT's own loading recipe (vit_base_patch16_224_ease /
# _mos) with the width read from the weights instead of the literal 768
BUILDER = '''def parity_vit_tiny_{method}(pretrained=False, **kwargs):
    """ViT-Tiny (192, 12 blocks, 3 heads) at PARITY_IMG_SIZE with PARITY_WEIGHTS."""
    size = int(os.environ.get("PARITY_IMG_SIZE", 224))
    kwargs["tuning_config"].d_model = 192
    model = VisionTransformer(img_size=size, patch_size=16, embed_dim=192, depth=12, num_heads=3,
        mlp_ratio=4, qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6), **kwargs)
    # timm.create_model is patch_pilot.py's wrapper: img_size and PARITY_WEIGHTS
    source = timm.create_model("vit_tiny_patch16_224", pretrained=False,
                               num_classes=kwargs["num_classes"])
    state_dict = source.state_dict()
    for key in list(state_dict.keys()):
        if "qkv." in key:
            q, k, v = state_dict.pop(key).chunk(3, dim=0)
            for name, part in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
                state_dict[key.replace("qkv", name)] = part
    for key in list(state_dict.keys()):
        if "mlp.fc" in key:
            state_dict[key.replace("mlp.", "")] = state_dict.pop(key)
    msg = model.load_state_dict(state_dict, strict=False)
    assert not msg.unexpected_keys, msg.unexpected_keys
    assert all("adapter" in k for k in msg.missing_keys), msg.missing_keys
    for name, p in model.named_parameters():
        p.requires_grad = {trainable}
    model.out_dim = 192
    return model


'''

# the paper's merge rule for MOS (PARITY_MOS_MERGE=paper): no merge inside forward
PAPER_MERGE = """    def reweight_adapter(self, adapter, idx, merge_step=False):
        if os.environ.get("PARITY_MOS_MERGE") == "paper" and not merge_step:
            return adapter
        return self._official_reweight_adapter(adapter, idx)

    def _official_reweight_adapter(self, adapter, idx):
"""

MOSNET = (
    "        super(MOSNet, self).__init__()\n"
    "        self.backbone = get_backbone(args, pretrained)\n"
)
MERGE_CALL = (
    "            self.cur_adapter = self.reweight_adapter(self.cur_adapter, len(self.adapter_list)"
)

# (file, anchor, replacement): the anchor must occur exactly once
EDITS = [
    # 1. the ViT-Tiny builders, PILOT's own ViT classes and loading recipe
    (
        "backbone/vit_ease.py",
        "def vit_base_patch16_224_ease(pretrained=False, **kwargs):\n",
        BUILDER.format(method="ease", trainable="name in msg.missing_keys")
        + "def vit_base_patch16_224_ease(pretrained=False, **kwargs):\n",
    ),
    (
        "backbone/vit_mos.py",
        "def vit_base_patch16_224_mos(pretrained=False, **kwargs):\n",
        BUILDER.format(method="mos", trainable="'head' in name or 'adapter' in name")
        + "def vit_base_patch16_224_mos(pretrained=False, **kwargs):\n",
    ),
    # 2. backbone names for them in get_backbone
    (
        "utils/inc_net.py",
        '            if name == "vit_base_patch16_224_ease":\n',
        '            if name == "parity_vit_tiny_ease":\n'
        "                model = vit_ease.parity_vit_tiny_ease(num_classes=0,\n"
        "                    global_pool=False, drop_path_rate=0.0, tuning_config=tuning_config)\n"
        '            elif name == "vit_base_patch16_224_ease":\n',
    ),
    (
        "utils/inc_net.py",
        '            if name == "vit_base_patch16_224_mos":\n',
        '            if name == "parity_vit_tiny_mos":\n'
        '                model = vit_mos.parity_vit_tiny_mos(num_classes=args["nb_classes"],\n'
        "                    global_pool=False, drop_path_rate=0.0, tuning_config=tuning_config)\n"
        '            elif name == "vit_base_patch16_224_mos":\n',
    ),
    # 3. the width 768 hard-coded outside the ViTs: MOSNet's out_dim, and EASE's
    #    forward_reweight, whose out_dim defaults to 768 and is not passed
    (
        "utils/inc_net.py",
        MOSNET + "        self.backbone.out_dim = 768\n",
        MOSNET + "        self.backbone.out_dim = self.backbone.embed_dim\n",
    ),
    (
        "utils/inc_net.py",
        "use_init_ptm=self.use_init_ptm, beta=self.beta)",
        "use_init_ptm=self.use_init_ptm, beta=self.beta, out_dim=self.out_dim)",
    ),
    # 4. MOS's merge rule switchable (module docstring); with the paper rule the stored
    #    prefix sums are detached from the live adapter (the official code replaces its
    #    storage in the next forward before any in-place step; without that re-merge the
    #    first optimizer step of the next task would write into the stored A_0)
    ("backbone/vit_mos.py", "    def reweight_adapter(self, adapter, idx):\n", PAPER_MERGE),
    ("backbone/vit_mos.py", MERGE_CALL + ")", MERGE_CALL + ", merge_step=True)"),
    (
        "backbone/vit_mos.py",
        "        self.sum_adapter_param()\n",
        "        self.sum_adapter_param()\n"
        '        if os.environ.get("PARITY_MOS_MERGE") == "paper":\n'
        "            for p in self.cur_adapter.parameters():\n"
        "                p.data = p.data.clone()\n",
    ),
    # 5. top-5 clipped to the seen classes, no DataLoader workers (as patch_pilot.py)
    *[
        (f, "outputs, k=self.topk, dim=1", "outputs, k=min(self.topk, outputs.shape[1]), dim=1")
        for f in ("models/ease.py", "models/mos.py")
    ],
    ("models/ease.py", "num_workers = 8\n", "num_workers = 0\n"),
    ("models/mos.py", "num_workers = 8\n", "num_workers = 0\n"),
    (
        "models/mos.py",
        "batch_size=self.batch_size*3, shuffle=False, num_workers=4",
        "batch_size=self.batch_size*3, shuffle=False, num_workers=0",
    ),
]

# PILOT's EASE and MOS import easydict (not in bench/.venv-avalanche): a stand-in
EASYDICT = '''"""Stand-in for the easydict package (written by cl-bench's parity patches)."""


class EasyDict(dict):
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as error:
            raise AttributeError(name) from error

    def __setattr__(self, name, value):
        self[name] = value
'''


def patch(root: Path) -> None:
    apply_edits(root, EDITS)
    if not (root / "easydict.py").exists():
        (root / "easydict.py").write_text(EASYDICT)


if __name__ == "__main__":
    patch(Path(sys.argv[1]))
    print(f"patched {sys.argv[1]}")
