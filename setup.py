"""The packages of the wheel (everything else is in pyproject.toml).

A checkout's ``methods/``, ``benchmarks/`` and ``results/baselines/`` stay where they
are, the one copy of the cards; the wheel carries them as ``cl_bench/_cards/...``
(package data, read through importlib.resources by :mod:`cl_bench.cards.sources`), so an
installed cl-bench finds its cards from any folder. setuptools can map a package to
another folder only for packages it is told by name, hence this file instead of
``[tool.setuptools.packages.find]``: the library's packages are still found, the three
card folders are added by name.
"""

from setuptools import find_packages, setup

CARDS = {
    "cl_bench._cards.methods": "methods",
    "cl_bench._cards.benchmarks": "benchmarks",
    "cl_bench._cards.baselines": "results/baselines",
}

setup(
    packages=[*find_packages(include=["cl_bench", "cl_bench.*"]), *CARDS],
    package_dir=CARDS,
    package_data={
        "cl_bench": ["data/*"],
        "cl_bench._cards.methods": ["*.yaml"],
        "cl_bench._cards.benchmarks": ["*.yaml"],
        "cl_bench._cards.baselines": ["*.json"],
    },
)
