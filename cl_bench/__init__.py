"""cl-bench: continual-learning benchmark suite for pretrained vision models."""

__version__ = "0.1.0"
