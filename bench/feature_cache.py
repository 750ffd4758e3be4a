"""Figure feature-cache: a second invocation of TOSCA + SimpleCIL on the same backbone and data vs
the first: the first extracts the frozen features, the second reads them from
the on-disk cache. Both run in this process with fresh result folders."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.common import timed


def main() -> dict:
    import os

    import cl_bench

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CL_BENCH_CACHE"] = str(Path(tmp) / "cache")

        def invocation(name: str):
            return lambda: cl_bench.run(["tosca", "simplecil"], out=Path(tmp) / name, echo=None)

        first = timed(invocation("first"))
        second = timed(invocation("second"))
    return {"first_s": first, "second_s": second, "ratio": first / second}


if __name__ == "__main__":
    import json

    from bench.run import record

    result = main()
    print(json.dumps(result))
    record("feature-cache", result, ["-m", "bench.feature_cache"])
