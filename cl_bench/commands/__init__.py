"""The command line: the Typer app, parallel and SLURM launches, the CI gate."""
