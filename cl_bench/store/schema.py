"""The two facts that name a result file: the record schema's version and the hash of
the config that changes a run's numbers (the file name's second half).

Version 2 records a method's protocol settings as it declares them (settings,
meanings, label: :mod:`cl_bench.store.protocol_block`); version 1 recorded four fixed
keys and is still read (:func:`cl_bench.store.protocol_block.upgraded`)."""

from __future__ import annotations

import hashlib
import json

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)  # a record of an older version is read as this one


def config_hash(config: dict) -> str:
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]
