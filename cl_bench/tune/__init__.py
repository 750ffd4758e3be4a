"""Hyper-parameter search without the test set: ``cl-bench tune`` (:mod:`.search`), its
record (:mod:`.record`) and the settings a search chose, for ``run --tuned`` (:mod:`.use`)."""
