"""Patch a scratch LAMDA-PILOT checkout (after patch_pilot.py) for the RanPAC and
APER (adapter) parity runs of bench/parity.md. PILOT's adapter ViT is a ViT-B/16
built by its own ``backbone/vit_adapter.py`` from timm's pretrained download, with
the width 768 written into the code; here a backbone name ``parity_vit_tiny_adapter``
builds the same class as a ViT-Tiny (width 192, 12 blocks, 3 heads) at
PARITY_IMG_SIZE and fills it from PARITY_WEIGHTS, converted as PILOT converts
timm's tensors (qkv split into q/k/v, ``mlp.fc*`` renamed); the adapters keep PILOT's
own init. Every edit is anchored on one line of PILOT's source and refuses to apply
when the anchor is missing or repeated.

    python bench/parity/patch_pilot_adapter_vit.py /work/scratch/pilot-pa

Switches read at run time (all off when unset; used for the rows of bench/parity.md
that name them):

* PARITY_WRAND: a .pt file holding RanPAC's random projection (192 x M), used
  instead of PILOT's own ``torch.randn`` draw (written by cl-bench's run under the
  parity trace, methods/ranpac/trace/sitecustomize.py), so both sides project with the same matrix;
* PARITY_RIDGES: the lambda of every task, comma-separated, used instead of the one
  PILOT chooses on its own shuffled split (PILOT still prints its choice first);
* PARITY_FLOAT64=1: the projected features, G, Q, the lambda search and the solve in
  float64 (cl-bench's precision; PILOT: float32); W_o is stored back in float32;
* PARITY_FP16=1: RanPAC's backbone features rounded through fp16, as cl-bench's
  feature store keeps them;
* PARITY_RANPAC_LINEAR=1: RanPAC's logits ``h W_o^T`` as in the official RanPAC code,
  instead of PILOT's cosine between h and the rows of W_o.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from bench.parity.patch_pilot import apply_edits

HERE = Path(__file__).resolve().parent
CONFIGS = ("parity_ranpac.json", "parity_ranpac_noadapt.json", "parity_aper.json")

STORE_WO = (
    "        self._network.fc.weight.data = Wo[0:self._network.fc.weight.shape[0],:]"
    ".to(self._device)\n"
)
RP_FORWARD = (
    "    def extract_vector(self, x):\n        return self.backbone(x)\n\n"
    "    def forward(self, x):\n        x = self.backbone(x)\n"
    "        if self.W_rand is not None:\n"
)
EDITS = [
    # 1. the adapter ViT-Tiny, filled from PARITY_WEIGHTS (strict except the adapters)
    (
        "utils/inc_net.py",
        "    elif '_adapter' in name:\n",
        """    elif name == "parity_vit_tiny_adapter":
        from functools import partial as _partial
        from types import SimpleNamespace as _NS
        from backbone import vit_adapter
        tuning_config = _NS(ffn_adapt=True, ffn_option="parallel",
                            ffn_adapter_layernorm_option="none",
                            ffn_adapter_init_option="lora", ffn_adapter_scalar="0.1",
                            ffn_num=args["ffn_num"], d_model=192, vpt_on=False, vpt_num=0)
        model = vit_adapter.VisionTransformer(
            img_size=int(_parity_os.environ.get("PARITY_IMG_SIZE", 224)), patch_size=16,
            embed_dim=192, depth=12, num_heads=3, mlp_ratio=4, qkv_bias=True,
            norm_layer=_partial(nn.LayerNorm, eps=1e-6), num_classes=0, global_pool=False,
            drop_path_rate=0.0, tuning_config=tuning_config)
        state = torch.load(_parity_os.environ["PARITY_WEIGHTS"], map_location="cpu",
                           weights_only=True)
        for key in list(state):
            for part in ("weight", "bias"):
                if key.endswith("qkv." + part):
                    q, k, v = state.pop(key).chunk(3)
                    for n, t in zip("qkv", (q, k, v)):
                        state[key.replace("qkv." + part, n + "_proj." + part)] = t
            if "mlp.fc" in key:
                state[key.replace("mlp.", "")] = state.pop(key)
        msg = model.load_state_dict(state, strict=False)
        assert not msg.unexpected_keys, msg.unexpected_keys
        assert all("adaptmlp" in k for k in msg.missing_keys), msg.missing_keys
        for n, p in model.named_parameters():
            p.requires_grad = n in msg.missing_keys
        model.out_dim = 192
        return model.eval()
    elif '_adapter' in name:
""",
    ),
    # 2. RanPAC: the random projection from a file (PARITY_WRAND)
    (
        "models/ranpac.py",
        "        self.W_rand = torch.randn(self._network.fc.in_features, M).to(self._device)\n",
        "        self.W_rand = torch.randn(self._network.fc.in_features, M).to(self._device)\n"
        "        if __import__('os').environ.get('PARITY_WRAND'):\n"
        "            self.W_rand = torch.load(__import__('os').environ['PARITY_WRAND'])"
        ".float().to(self._device)\n"
        "            assert self.W_rand.shape == (self._network.fc.in_features, M)\n",
    ),
    # 2a. RanPAC: projection, statistics and solves in float64 when PARITY_FLOAT64=1
    (
        "models/ranpac.py",
        "        Features_h = F.relu(embedding_list @ self.W_rand.cpu())\n",
        "        Features_h = F.relu(embedding_list @ self.W_rand.cpu())\n"
        "        if __import__('os').environ.get('PARITY_FLOAT64') == '1':\n"
        "            Features_h = F.relu(embedding_list.double() @ self.W_rand.cpu().double())\n"
        "            Y = Y.double()\n",
    ),
    ("models/ranpac.py", STORE_WO, STORE_WO.replace(":].to(", ":].float().to(")),
    # 2b. RanPAC: the lambda of each task from PARITY_RIDGES (comma-separated), replayed
    (
        "models/ranpac.py",
        "        ridge = self.optimise_ridge_parameter(Features_h, Y)\n",
        "        ridge = self.optimise_ridge_parameter(Features_h, Y)\n"
        "        if __import__('os').environ.get('PARITY_RIDGES'):\n"
        "            ridge = float(__import__('os').environ['PARITY_RIDGES']"
        ".split(',')[self._cur_task])\n"
        "            print('lambda replayed from PARITY_RIDGES =', ridge)\n",
    ),
    # 3. RanPAC: tuned_epoch 0 (no adaptation) ends _init_train without a NameError
    (
        "models/ranpac.py",
        "        prog_bar = tqdm(range(self.args['tuned_epoch']))\n",
        "        info = 'no adaptation (tuned_epoch 0)'\n"
        "        prog_bar = tqdm(range(self.args['tuned_epoch']))\n",
    ),
    # 4. RanPAC: the official linear logits when PARITY_RANPAC_LINEAR=1
    (
        "utils/inc_net.py",
        "            x = torch.nn.functional.relu(x @ self.W_rand)\n",
        "            x = torch.nn.functional.relu(x @ self.W_rand)\n"
        "            if _parity_os.environ.get('PARITY_RANPAC_LINEAR') == '1':\n"
        "                out = {'logits': self.fc.sigma * (x @ self.fc.weight.T)}\n"
        "                out.update({'features': x})\n"
        "                return out\n",
    ),
    # 4b. RanPAC: the backbone's features rounded through fp16 when PARITY_FP16=1
    (
        "utils/inc_net.py",
        RP_FORWARD,
        RP_FORWARD.replace(
            "return self.backbone(x)\n", "return _parity_fp16(self.backbone(x))\n"
        ).replace("x = self.backbone(x)\n", "x = _parity_fp16(self.backbone(x))\n"),
    ),
    (
        "utils/inc_net.py",
        "class SimpleVitNet(BaseNet):\n",
        "def _parity_fp16(f):\n"
        "    return f.half().float() if _parity_os.environ.get('PARITY_FP16') == '1' else f\n\n\n"
        "class SimpleVitNet(BaseNet):\n",
    ),
    # 5. no DataLoader worker processes
    *[
        (f, "num_workers = 8\n", "num_workers = 0\n")
        for f in ("models/ranpac.py", "models/aper_adapter.py")
    ],
]


def patch(root: Path) -> None:
    if "parity_vit_tiny" not in (root / "utils/inc_net.py").read_text():
        raise SystemExit(f"{root}: run patch_pilot.py first")
    apply_edits(root, EDITS)
    for name in CONFIGS:
        method = "ranpac" if name.startswith("parity_ranpac") else "aper"
        shutil.copy(HERE / "methods" / method / name, root / "exps" / name)


if __name__ == "__main__":
    patch(Path(sys.argv[1]))
    print(f"patched {sys.argv[1]} (RanPAC, APER adapter)")
