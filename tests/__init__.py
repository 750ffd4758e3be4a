"""cl-bench's tests, in layers: unit/ (pure functions and small tensors, under a minute:
`make test-fast`), integration/ (the CLI, processes, end-to-end runs, feature extraction),
parity/ (the parity harness, bench/parity) and slurm/ (a one-node SLURM cluster); each
test carries its layer's marker (conftest.py). Helpers shared between test files are in
helpers/, fixtures in the conftest.py files."""
