"""Result files: one JSON per method x scenario x seed, written atomically.

Path: ``<out>/runs/<scenario>/<method>/<seed>-<confighash>.json``; the hash
covers everything that changes the numbers (resolved method and scenario
settings, backbone and weights), so a changed setting is a new run and the
same command finds its finished runs and skips them.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

SCHEMA_VERSION = 1


def config_hash(config: dict) -> str:
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def run_path(out: Path, scenario: str, method: str, seed: int, config: dict) -> Path:
    return Path(out) / "runs" / scenario / method / f"{seed}-{config_hash(config)}.json"


def is_done(path: Path) -> bool:
    """True when a complete result exists (a torn or foreign file is not done)."""
    try:
        return json.loads(Path(path).read_text()).get("status") == "done"
    except (OSError, ValueError):
        return False


def write_atomic(path: Path, data: dict) -> None:
    """Write JSON so that readers see the old file or the whole new one, never a
    partial one: temp file in the same folder, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def find(out: Path) -> list[Path]:
    return sorted((Path(out) / "runs").glob("*/*/*.json"))
