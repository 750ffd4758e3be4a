"""The Python API page: mkdocstrings directives for the names ``import cl_bench`` gives
(``cl_bench.__all__``, loaded lazily from their modules) and for the rest of
``cl_bench.api.__all__``, so the page follows what the package exports."""

from __future__ import annotations

PAGE = "api.md"


def public_names() -> list[str]:
    """Dotted paths of the documented objects: the package's own names first, then the
    rest of :mod:`cl_bench.api`'s ``__all__``."""
    import cl_bench
    from cl_bench import api

    paths = [".".join(cl_bench._LAZY[name]) for name in cl_bench.__all__ if name in cl_bench._LAZY]
    paths += [f"cl_bench.api.{name}" for name in api.__all__ if f"cl_bench.api.{name}" not in paths]
    return paths


def api_page() -> dict[str, str]:
    import cl_bench

    lines = [
        "# Python API",
        "",
        f"`import cl_bench` (version {cl_bench.__version__}) gives "
        + ", ".join(f"`cl_bench.{n}`" for n in cl_bench.__all__ if n != "__version__")
        + "; they load on first use, so `import cl_bench` imports neither torch nor "
        "Avalanche. The command line is a layer over these functions: a run started "
        "here and the same `cl-bench run` share their result files.",
        "",
    ]
    for path in public_names():
        lines += [f"::: {path}", ""]
    return {PAGE: "\n".join(lines).rstrip() + "\n"}
