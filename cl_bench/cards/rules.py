"""The keys every card of a kind has, and the rules every scenario card keeps under
its own (:meth:`cl_bench.cards.card.Card.rules`)."""

METHOD_KEYS = ("strategy", "defaults")
SCENARIO_KEYS = ("dataset", "init_cls", "increment", "test_shuffle")
SCENARIO_RULES: dict = {
    "bounds": {
        "init_cls": [1, None],
        "increment": [1, None],
        "dataset_args.n_classes": [1, None],
        "expected.train_images": [1, None],
        "expected.test_images": [1, None],
    },
    "choices": {"test_shuffle": [True, False], "normalize": ["none", "backbone"]},
    "types": {"class_order": ["text", "list"]},  # "seed", "natural" or a list of class ids
}
