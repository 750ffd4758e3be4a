"""Helpers shared between test files, one subject a module: the CLI and its refusals
(cli), card variants (cards), image trees on disk (trees), small streams and data
(streams), strategies on a random-weight ViT (strategies), runs in a fresh process
(processes), the `probe` method for grids (probe), feature-store stand-ins (features),
GPUs faked on a machine without one (gpus) and the checkout's paths (paths). Fixtures
stay in the conftest.py files."""
