"""The records of an offline W&B run file (``run-<id>.wandb``), read back for the tests:
the file is a 7-byte W&B header, then LevelDB-log records in 32 KiB blocks (a 7-byte
header each: CRC, length, type full/first/middle/last), each a protobuf ``Record``."""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7  # ":W&B", a 2-byte magic, a 1-byte version
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(path: Path) -> list[bytes]:
    data, pos, out, parts = path.read_bytes(), HEADER, [], b""
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            continue
        parts = chunk if kind in (FULL, FIRST) else parts + chunk
        if kind in (FULL, LAST):
            out.append(parts)
    return out


def history_and_config(path: Path) -> tuple[list[dict], dict]:
    """Every ``wandb.log`` call's values (one dict per call) and the run's config."""
    from wandb.proto import wandb_internal_pb2

    history, config = [], {}
    for payload in payloads(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append(
                {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json)
                    for i in record.history.item
                }
            )
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
    return history, config
