"""The ``protocol`` block of a result record, built from the settings a method declares
(:class:`~cl_bench.contract.ProtocolSetting`), and the reader of schema-1 records.

Schema 2 (``protocol``): ``name`` (the named protocol, e.g. fair or paper),
``test_shuffle`` (the scenario's test order), ``settings`` (each declared protocol
setting's value, in declaration order), ``meanings`` (each one's one-line meaning),
``per_batch`` (whether a value makes a prediction depend on the rest of its test batch)
and ``label`` (the parts of a report's row label, in order). The record carries what
a reader needs, so reports name no setting and need no method's code.

Schema 1 recorded four fixed keys (``selection``, ``batchwise``, ``augment_views``,
``eval_batch_size``; null where a method has none) beside ``name`` and
``test_shuffle``; :func:`upgraded` reads such a record as schema 2, with the
declarations those keys had.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from cl_bench.store.schema import SCHEMA_VERSION

if TYPE_CHECKING:  # importing cl_bench.contract loads torch, which a reader does not need
    from cl_bench.contract.protocol import ProtocolSetting

ORDERED_TEST = "ordered test"  # the label part of a class-ordered test stream
FAIR = "fair"  # the protocol of a record that names none


def protocol_block(
    name: str, declared: Iterable[ProtocolSetting], params: dict, test_shuffle: bool | None
) -> dict:
    """The ``protocol`` block of a run under protocol ``name`` of a method that declares
    ``declared``, with card settings ``params``. The label names the rules first, then
    an ordered test stream, then the batch size when a rule works per test batch."""
    declared = tuple(declared)
    values = {s.key: params.get(s.key) for s in declared}
    per_batch = any(s.is_per_batch(values[s.key]) for s in declared)
    parts = [(s.batch_size, s.shown(values[s.key])) for s in declared]
    label = [text for size, text in parts if text is not None and not size]
    label += [ORDERED_TEST] if test_shuffle is False else []
    label += [text for size, text in parts if text is not None and size and per_batch]
    return {
        "name": name,
        "test_shuffle": test_shuffle,
        "settings": values,
        "meanings": {s.key: s.meaning for s in declared},
        "per_batch": per_batch,
        "label": label,
    }


def _schema1_declared() -> tuple[ProtocolSetting, ...]:
    """The four settings schema 1 recorded, in its label's order (imported here, not at
    the top: only an old record needs them, and they load torch)."""
    from cl_bench.contract.protocol import AUGMENT_VIEWS, EVAL_BATCH_SIZE
    from cl_bench.strategies.blocks.luca import SELECTION
    from cl_bench.strategies.blocks.prompt_matching import BATCHWISE

    return SELECTION, BATCHWISE, AUGMENT_VIEWS, EVAL_BATCH_SIZE


def upgraded(record: dict) -> dict:
    """A valid record as this schema has it: a schema-1 record's ``protocol`` rebuilt
    from its four fixed keys (a null one: the method did not have it); a record of
    this schema as it is."""
    if record["schema_version"] == SCHEMA_VERSION:
        return record
    old = record["protocol"]
    declared = [s for s in _schema1_declared() if old.get(s.key) is not None]
    block = protocol_block(old.get("name", FAIR), declared, old, old.get("test_shuffle"))
    return {**record, "schema_version": SCHEMA_VERSION, "protocol": block}
