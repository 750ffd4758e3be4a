"""The integration layer (see tests/__init__.py)."""
