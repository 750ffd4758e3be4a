#!/usr/bin/env bash
# cl-bench side of the parity runs (bench/parity.md). Usage:
#   [PARITY_SIZE=64] bench/parity/run_ours.sh METHOD SEEDS [more cl-bench options]
# Reads the tree written by make_tree.py and the weights written by export_weights.py
# (vit_tiny_random.pth at 224 px, vit_tiny_random_<size>.pth at another size).
set -euo pipefail
DATA=${PARITY_DATA:-/work/scratch/parity-data}
PY=${PY:-/work/main/.venv/bin/python}
SIZE=${PARITY_SIZE:-224}
if [ "$SIZE" = 224 ]; then weights=$DATA/vit_tiny_random.pth
else weights=$DATA/vit_tiny_random_$SIZE.pth; fi
method=$1; seeds=$2; shift 2
exec nice -n 10 "$PY" -m cl_bench run --methods "$method" --scenario imagefolder \
  --data-root "$DATA/fmnist-png" --backbone vit_tiny_patch16_224 --image-size "$SIZE" \
  --weights "$weights" --precision fp32 --device cpu \
  --set scenario.init_cls=2 --set scenario.increment=2 \
  --seeds "$seeds" --out "$DATA/results-ours-$SIZE" --no-progress "$@"
