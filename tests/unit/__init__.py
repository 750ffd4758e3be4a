"""The unit layer (see tests/__init__.py)."""
