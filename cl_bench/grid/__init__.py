"""A grid of runs (methods x scenarios x seeds) as separate jobs: options, plan, worker
processes on this machine or a SLURM job array (:func:`cl_bench.grid.launch.launch`), and
the dry-run plan (:mod:`cl_bench.grid.dry_run`)."""
