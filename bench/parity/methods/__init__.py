"""One folder per method: ``bench/parity/methods/<method>/`` (``coda-prompt`` ->
``coda_prompt/``) holds its parity row ``row.py``, run by ``python -m bench.parity METHOD
--reference DIR``, and what only that row uses (its drivers ``ours.py`` and
``reference.py``, its reference configs ``parity_*.json``, its ``patch.py``).

``bench/parity/__main__.py`` checks that DIR is a checkout of the row's reference at
its pinned commit, copies that commit's files into a scratch folder outside the
repository, and calls the row. A row module defines:

``METHOD``      the cl-bench method name (``"coda-prompt"``).
``REFERENCE``   ``{"repo": "owner/name", "commit": "<40 hex digits>", "what": "..."}``;
                ``what`` names what is run there (``"models/l2p.py Learner"``).
``PAIRING``     ``"paired"`` when one seed fixes the same randomness on both sides
                (then the 95 % interval is a paired t interval over seeds), else
                ``"welch"``; ``PAIRING_WHY`` says which randomness is or is not shared.
``SETTING``     a JSON-able dict describing the end-to-end setting (tree, backbone,
                weights, image size, tasks, epochs, lr, batch) written into the results.
``CLASS_ORDER`` the one fixed class order of the paired runs (a list of ints).
``SEEDS``       the training seeds (at least 10).

``prepare(copy: Path) -> None``
    Patch the scratch copy of the reference (data tree, backbone size, CPU, the hooks
    the step check needs). Every edit is anchored on one line of the reference and
    raises ``ParityError`` when that line is missing or repeated.
``step(copy: Path, work: Path) -> dict``
    The step-level check: same initial trainable tensors on both sides (exported from
    cl-bench into the reference), same batch order, augmentation off, fp32, one thread.
    Returns ``{"after": ["step 1", "task 1", "task 2"], "max_abs_param": [3 floats],
    "max_abs_loss": [3], "max_abs_logit": [3], "bound": float, "bound_why": str,
    "kept": [str, ...]}`` where each list is aligned with ``after``; ``kept`` names every
    difference the check found and kept (with the card switch that reproduces the
    reference's behaviour), empty when none. ``None`` for a method that trains nothing
    (``"step": null`` in the results, with ``STEP_NONE_WHY``).
``run_seed(copy: Path, work: Path, seed: int) -> dict``
    Both sides end to end at ``CLASS_ORDER`` with this training seed:
    ``{"ours": {"curve": [...]}, "reference": {"curve": [...]}}``; a curve is the
    top-1 accuracy over all seen classes after each task, in percent.

Optional: ``STEP_NONE_WHY`` (why ``step`` is None), ``DIFFERS_WHY`` (the reason written
when the verdict is "differs"; a "differs" without one is refused), ``NOTES`` (a list of
lines for bench/parity.md), ``reference_commit(dir) -> str`` (when DIR is not a git
checkout of the reference, e.g. an installed package's repository) and
``copy_reference(dir, copy)`` (instead of ``git archive`` of the pinned commit),
``extra(per_seed) -> dict`` (more keys of the results file computed from the finished
seeds, e.g. a comparison with a baseline run beside each seed; a key the runner writes
itself is never replaced).

``work`` is a scratch folder for the row (tree, weights, logs), kept between calls so
a re-run reuses what is there. Everything a row runs uses one thread and fp32.
"""

from __future__ import annotations


class ParityError(RuntimeError):
    """A parity row cannot run: the message names what is wrong and the fix."""
