"""Further edits to a scratch LAMDA-PILOT checkout for the DualPrompt and
CODA-Prompt parity runs of bench/parity.md; run after patch_pilot.py:

    python bench/parity/patch_pilot_prompts.py /work/scratch/pilot

1. DualPrompt's E-prompt ``reshape`` (LAMDA-PILOT issue 29)
   gets the missing permute of the (key/value, image) axes, but only when the
   environment variable PARITY_RESHAPE_FIX is set to 1: unset, PILOT runs as it
   is. cl-bench's ``dualprompt.reshape_bug`` false is the fixed split.
2. CODA-Prompt's network takes its width from the backbone (PILOT hard-codes
   768 for the head and for the prompt's components and keys), so the ViT-Tiny
   (192) runs; at ViT-B/16 the numbers are unchanged.
3. CODA-Prompt's backbone starts its prompt loss as a leaf tensor that requires
   grad and adds to it in place; on a GPU ``.to(device)`` makes a copy (no
   longer a leaf), on the CPU it returns the leaf itself and PyTorch refuses the
   in-place add. The loss now starts as a plain zero on the input's device:
   the same value and the same gradients.

Every edit is anchored on one line of PILOT's source and refuses to apply when
that line is missing or repeated; a file already carrying the edit is left alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.parity.patch_pilot import apply_edits

RESHAPE = (
    "num_layers, dual, batch_size, top_k, length, num_heads, heads_embed_dim"
    " = batched_prompt_raw.shape\n"
)
FIX = (
    '                if __import__("os").environ.get("PARITY_RESHAPE_FIX") == "1":\n'
    "                    batched_prompt_raw = batched_prompt_raw.permute(0, 2, 1, 3, 4, 5, 6)\n"
)

# (file, anchor, replacement): the anchor must occur exactly once
EDITS = [
    ("backbone/prompt.py", RESHAPE, RESHAPE + FIX),
    (
        "utils/inc_net.py",
        'self.fc = nn.Linear(768, args["nb_classes"])',
        'self.fc = nn.Linear(self.backbone.embed_dim, args["nb_classes"])',
    ),
    (
        "utils/inc_net.py",
        'self.prompt = CodaPrompt(768, args["nb_tasks"], args["prompt_param"])',
        'self.prompt = CodaPrompt(self.backbone.embed_dim, args["nb_tasks"], args["prompt_param"],'
        " key_dim=self.backbone.embed_dim)",
    ),
    (
        "backbone/vit_coda_promtpt.py",
        "prompt_loss = torch.zeros((1,), requires_grad=True).to(device=x.device)",
        "prompt_loss = torch.zeros((1,), device=x.device)",
    ),
]


def patch(root: Path) -> None:
    apply_edits(root, EDITS)


if __name__ == "__main__":
    patch(Path(sys.argv[1]))
    print(f"patched {sys.argv[1]}")
