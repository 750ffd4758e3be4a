"""The two facts that name a result file: the record schema's version and the hash of
the config that changes a run's numbers (the file name's second half)."""

from __future__ import annotations

import hashlib
import json

SCHEMA_VERSION = 1


def config_hash(config: dict) -> str:
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]
