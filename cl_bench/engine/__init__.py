"""What runs: planning, one run of a method over a stream, features, checkpoints."""
