"""Results on disk: paths, atomic writes, locks, validation, typed records."""
