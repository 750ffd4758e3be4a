"""The slurm layer (see tests/__init__.py)."""
