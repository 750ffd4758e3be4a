"""The parity layer (see tests/__init__.py)."""
