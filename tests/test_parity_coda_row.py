"""bench/parity/rows/coda_prompt.py: the step check's arithmetic on constructed
driver outputs (no reference, no training) and the PILOT patch on a toy file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.parity import patch_coda
from bench.parity.rows import coda_prompt as row

AFTER = ("step 1", "task 1", "task 2")


def side(shift: float, ortho: float) -> dict:
    params = {"p": torch.zeros(2, 4, 2, 3), "k": torch.zeros(2, 4, 3), "head.bias": torch.zeros(5)}
    out = {"after": {k: {"params": {n: t + shift * (i + 1) for n, t in params.items()},
                         "logits": torch.full((3, 2), shift)} for i, k in enumerate(AFTER)},
           "losses": [[1.0, 0.5], [0.7, 0.6 + shift]], "ortho": [[ortho, ortho], [ortho, 0.0]]}
    return out


def test_differences_per_point():
    diff = row._differences(side(0.0, 0.2), side(1e-3, 0.2))
    assert diff["after"] == list(AFTER)
    assert diff["max_abs_param"] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert diff["max_abs_loss"] == pytest.approx([0.0, 0.0, 1e-3])
    assert diff["max_abs_logit"] == pytest.approx([1e-3] * 3)
    assert diff["ortho_term"] == {"largest": 0.2, "max_abs_diff": 0.0}


def test_gram_schmidt_matches_row_signs_and_measures_orthogonality():
    q = torch.linalg.qr(torch.randn(6, 4, generator=torch.Generator().manual_seed(0))).Q.T
    init = [{n: q[None].clone() for n in ("p", "k", "a")} for _ in range(2)]
    flipped = q * torch.tensor([[1.0], [-1.0], [1.0], [-1.0]])
    ref = {"gram_schmidt": [{n: flipped[None, :2] for n in ("p", "k", "a")},
                            {n: flipped[None, 2:] for n in ("p", "k", "a")}]}
    gs = row._gram_schmidt({"init": init}, ref)
    assert gs[0]["sign_flipped"] == pytest.approx(0.5)
    assert gs[0]["max_abs_after_sign"] < 1e-6 and gs[1]["max_abs_after_sign"] < 1e-6
    assert gs[1]["max_cos_old_ours"] < 1e-6 and gs[1]["max_cos_old_reference"] < 1e-6


def test_patch_coda_applies_once_and_refuses_an_unknown_file(tmp_path: Path):
    data = tmp_path / "utils" / "data.py"
    data.parent.mkdir()
    text = ("def build_transform(is_train, args):\n    input_size = 224\n"
            "    resize_im = input_size > 32\n    if resize_im:\n"
            "        size = int((256 / 224) * input_size)\n\n" + patch_coda.ANCHOR)
    data.write_text(text)
    patch_coda.patch(tmp_path)
    once = data.read_text()
    assert "PARITY_CLASS_ORDER" in once and "PARITY_TEST_RESIZE" in once
    patch_coda.patch(tmp_path)
    assert data.read_text() == once
    data.write_text("nothing to patch\n")
    with pytest.raises(SystemExit, match="anchor"):
        patch_coda.patch(tmp_path)


def test_pilot_log_parsed_with_numpy_scalars():
    log = "\n".join([
        "=> CNN: {'total': np.float64(100.0), '00-01': np.float64(100.0), 'old': 0, "
        "'new': np.float64(100.0)}",
        "=> CNN top1 curve: [np.float64(100.0)]",
        "=> CNN: {'total': np.float64(67.5), 'old': np.float64(40.0), 'new': np.float64(95.0)}",
        "=> CNN top1 curve: [np.float64(100.0), np.float64(67.5)]",
        "=> CNN: {'total': 45.83, 'old': 67.5, 'new': 2.5}",
        "=> CNN top1 curve: [100.0, 67.5, 45.83]"])
    assert row._parse(log) == {"curve": [100.0, 67.5, 45.83], "just_learnt": [100.0, 95.0, 2.5]}
    assert row._parse(log.rsplit("\n", 2)[0]) is None  # a run cut short
