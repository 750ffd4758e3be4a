"""One prepared check for a GPU machine: ``python -m bench.gpu_check``.

Sized to fit a short loan of one GPU, from a fresh clone (after ``make setup``), it writes
one JSON (``bench/results/gpu-check-<date>-<gpu>.json``, a measurement of figure
``gpu-check``) and prints a table of:

* the machine: GPU, driver, architecture, torch's CUDA, what ``--precision auto`` and
  ``--device auto`` decide here (:mod:`bench.gpu_check.machine`);
* frozen ViT-B/16 (random weights) extraction in bf16 and fp32, images/s and their
  share of this GPU's matrix-multiply peak, measured in the same process
  (:mod:`bench.gpu_check.extraction`);
* one task each of L2P, CODA-Prompt, EWC and MOS on a generated JPEG tree, through
  ``cl-bench run``'s own code path: step time, peak memory and the share of training
  time spent waiting for data (:mod:`bench.gpu_check.methods`);
* CPU against CUDA in fp32: the largest feature difference on the embedded default, and
  SimpleCIL's and TOSCA's accuracies within a stated tolerance
  (:mod:`bench.gpu_check.agreement`);
* the same seed twice under ``--deterministic strict`` (bitwise equal) and ``fast``
  (the difference), and what strict costs (:mod:`bench.gpu_check.determinism`).

Without a GPU it refuses in one paragraph. ``--cpu-dry-run`` runs every part on the CPU
at toy sizes (what the test suite does) to check the script itself, not a GPU.
"""
