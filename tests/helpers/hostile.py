"""The hostile setting values of the settings-space tests (tests/unit and
tests/integration/test_settings_property.py): the spellings, the settings they go into,
and how a value reaches a setting through ``--set``."""

from __future__ import annotations

from cl_bench.cards.catalogue import load_method, method_names

BACKBONE = "vit_tiny_patch16_224"
SCENARIO_KEYS = (
    "init_cls",
    "increment",
    "test_shuffle",
    "dataset_args.n_classes",
    "dataset_args.train_per_class",
    "dataset_args.test_per_class",
    "dataset_args.size",
    "dataset_args.seed",
)
HOSTILE = {
    "non-finite": [".inf", "-.inf", "+.INF", ".nan", ".NaN", "1.0e+999", "-1e999", "inf", "nan"],
    "zero": ["0", "0.0", "-0.0", "0x0"],
    "negative": ["-1", "-1.5", "-1e-300", "-9223372036854775809"],
    "huge": [
        "1000000000",
        "9223372036854775808",
        "1e30",
        "1.0e+300",
        "100000000000000000000000000000",
    ],
    "tiny": ["1e-320", "5e-324"],
    "wrong type": [
        "abc",
        "''",
        "true",
        "no",
        "null",
        "~",
        "[]",
        "[1, 2]",
        "{}",
        "{a: .nan}",
        "[.inf]",
    ],
    "yaml spelling": ["0x7fffffffffffffff", "0o777", "1_000_000", "190:20:30", "+12", ".5"],
}
SPELLINGS = [text for texts in HOSTILE.values() for text in texts]


def method_settings() -> list[tuple[str, str]]:
    """(method, key) for every setting of every built-in method card."""
    return [(name, key) for name in method_names() for key in load_method(name).params]


def set_value(key: str, text: str) -> tuple[str, str]:
    """(setting, value text) putting ``text`` into ``key``: a dotted scenario key is one
    key of the mapping it belongs to, which ``--set`` merges."""
    head, dot, sub = key.partition(".")
    return (head, f"{{{sub}: {text}}}") if dot else (key, text)


def runnable_method(owner: str) -> str:
    return "simplecil" if owner == "scenario" else owner


CASES = [*method_settings(), *(("scenario", key) for key in SCENARIO_KEYS)]
