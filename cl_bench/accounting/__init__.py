"""Parameters and FLOPs: counting, and `cl-bench account` without data."""
