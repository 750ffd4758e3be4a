"""What is read back from results: reports, plots, status, run summaries."""
