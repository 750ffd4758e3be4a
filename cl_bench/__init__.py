"""cl-bench: continual-learning benchmark suite for pretrained vision models."""

import warnings

__version__ = "0.1.0"

# Avalanche imports qpsolvers (for GEM, which cl-bench does not use), which warns at
# import time that no QP solver is installed: noise in every cl-bench command.
warnings.filterwarnings("ignore", message="no QP solver found", category=UserWarning)
