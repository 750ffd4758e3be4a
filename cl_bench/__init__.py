"""cl-bench: continual-learning benchmark suite for pretrained vision models.

The Python API (:mod:`cl_bench.api`, :mod:`cl_bench.store.records`)::

    import cl_bench
    done = cl_bench.run(["tosca"], scenario="fmnist", settings={"tosca.epochs": 5})
    runs = cl_bench.load_results("results")
    cl_bench.report("results", out="reports/latest")
    grid = cl_bench.run_grid(["tosca", "l2p"], launcher="local", jobs=2)
    gate = cl_bench.check("ci")

Its names load on first use (PEP 562), so ``import cl_bench``, done by every CLI call,
imports neither torch nor Avalanche.
"""

import importlib
import warnings

__version__ = "0.1.0"

# Avalanche imports qpsolvers (for GEM, which cl-bench does not use), which warns at
# import time that no QP solver is installed: noise in every cl-bench command.
warnings.filterwarnings("ignore", message="no QP solver found", category=UserWarning)

# public name -> (module, attribute)
_LAZY = {
    "run": ("cl_bench.api", "run"),
    "load_results": ("cl_bench.api", "load_results"),
    "report": ("cl_bench.api", "report"),
    "run_grid": ("cl_bench.api", "run_grid"),
    "check": ("cl_bench.api", "check"),
    "sweep": ("cl_bench.api", "sweep"),
    "load_config": ("cl_bench.api", "load_config"),
    "Result": ("cl_bench.store.records", "Result"),
    "scenario": ("cl_bench.scenarios.avalanche", "scenario"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'cl_bench' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        raise ImportError(
            f"cl_bench.{name} needs the module {module_name}, which this "
            "cl-bench does not have; use a cl-bench version that has it.",
            name=module_name,
        ) from None
    return module if attr is None else getattr(module, attr)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
