"""The accuracy regression gate behind ``cl-bench check``: suites, baselines, comparison
(:func:`cl_bench.gate.check.check` runs it)."""
