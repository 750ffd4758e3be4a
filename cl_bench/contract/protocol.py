"""A method's protocol settings: the card settings that decide how it is evaluated, which
every result records (its ``protocol`` block) and every report names, so that runs that
differ in them are never read as one.

A method declares the ones it has in its :class:`~cl_bench.contract.MethodSpec`
(``protocol=(...)``); the engine, the records and the reports only iterate over that
declaration and never name a setting themselves. The two settings more than one
method has are declared here; a setting of one method lives in its module (TOSCA's
``selection``) or building block (the prompt methods' ``batchwise``).
"""

from __future__ import annotations

from dataclasses import dataclass

Label = str | tuple[tuple[object, str], ...] | None


@dataclass(frozen=True)
class ProtocolSetting:
    """One protocol setting: ``key`` in the card, ``meaning`` (one line, the reports'
    legend), ``label`` (how a report's row label names a value: a format of ``key`` and
    ``value``, a tuple of (value, text) pairs, or None for a setting the label leaves to
    the config), ``per_batch`` (the values under which a prediction depends on the other
    images of its test batch) and ``batch_size`` (whether the setting is the test batch
    size, which a label names only when such a value makes it matter)."""

    key: str
    meaning: str
    label: Label = "{key}={value}"
    per_batch: tuple[object, ...] = ()
    batch_size: bool = False

    def __post_init__(self) -> None:
        if not (
            isinstance(self.key, str)
            and self.key
            and isinstance(self.meaning, str)
            and self.meaning
            and "\n" not in self.meaning
        ):
            raise TypeError(
                f"ProtocolSetting takes a card key and a one-line meaning, not "
                f"{self.key!r}, {self.meaning!r}"
            )

    def shown(self, value: object) -> str | None:
        """The part of a report label that names ``value`` (None: the label says nothing)."""
        if value is None or self.label is None:
            return None
        if isinstance(self.label, str):
            return self.label.format(key=self.key, value=value)
        return next((text for v, text in self.label if v == value and type(v) is type(value)), None)

    def is_per_batch(self, value: object) -> bool:
        """Whether ``value`` makes a prediction depend on the rest of its test batch."""
        return any(v == value and type(v) is type(value) for v in self.per_batch)


EVAL_BATCH_SIZE = ProtocolSetting(
    "eval_batch_size",
    "the test mini-batch size; a label names it (batches of N) only when "
    "a per-batch rule makes it matter",
    label="batches of {value}",
    batch_size=True,
)
AUGMENT_VIEWS = ProtocolSetting(
    "augment_views",
    "K > 0: a features method trains epoch e on cached augmented view e mod K "
    "of each training image (K backbone passes per image); 0: on the test-transform features",
    label=None,
)
