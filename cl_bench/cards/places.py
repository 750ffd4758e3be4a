"""Where the built-in cards are (the checkout's ``methods/``, ``benchmarks/`` and
``results/baselines/``, or their copies inside an installed wheel) and how a card
file is read."""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import yaml

from cl_bench.cards import sources
from cl_bench.errors import UserError

ROOT = Path(__file__).resolve().parents[2]  # cl_bench/cards/config.py -> the checkout
_PACKAGED = sources.packaged()
CHECKOUT: Path | None = None if _PACKAGED else ROOT  # git provenance; writable baselines
METHODS_DIR = (_PACKAGED or ROOT) / "methods"
BENCHMARKS_DIR = (_PACKAGED or ROOT) / "benchmarks"
BASELINES_DIR = _PACKAGED / "baselines" if _PACKAGED else ROOT / "results" / "baselines"


@lru_cache(maxsize=256)
def _parsed(text: str) -> object:
    """``yaml.safe_load(text)``, by libyaml where PyYAML has it. A card is read many
    times in one process (every lookup of a card's kind and needs reads its file); the
    parse is kept per text, so an edited file is parsed again. A text libyaml refuses
    is parsed again by PyYAML's own parser, whose error (and its message) is raised."""
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is not None:
        try:
            return yaml.load(text, Loader=loader)  # noqa: S506 -- a safe loader
        except yaml.YAMLError:
            pass
    return yaml.safe_load(text)


def read_yaml(path: Path) -> dict:
    """Parse a YAML mapping, turning syntax errors into a one-paragraph error. The
    caller gets its own copy: it may change what it gets."""
    try:
        data = copy.deepcopy(_parsed(path.read_text(encoding="utf-8")))
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
            f"{e.start}). Save the card as UTF-8 and run again."
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(
            f"{path} is not valid YAML{where}: {problem}. Fix the file "
            "(for example with a YAML linter) and run again."
        ) from None
    except OSError as e:
        raise UserError(f"Cannot read {path}: {e.strerror}.") from None
    if not isinstance(data, dict):
        raise UserError(
            f"{path} must hold a YAML mapping (key: value lines), not {type(data).__name__}."
        )
    return data
