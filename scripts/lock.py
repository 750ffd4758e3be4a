"""The locked environment: every package of cl-bench's dependency tree at one version.

``requirements/lock.txt`` pins the whole tree (torch, timm, avalanche-lib, numpy and all
they pull in, plus the dev tools) as resolved on the day it was refreshed. ``make run``
and ``make test`` install through it as a pip constraints file, so a result measured
today can be measured again with the same code next year. A constraints file, not a
requirements file: packages that one platform does not need (CUDA wheels on a Mac) are
simply not installed, and ``make run`` does not install the dev tools.

Usage::

    python scripts/lock.py verify    # the running environment is exactly the lock
    python scripts/lock.py refresh   # re-resolve in a fresh venv, rewrite the lock

``verify`` fails when a package installed in the environment is missing from the lock
or has another version: a dependency added to pyproject.toml without refreshing the lock
would otherwise float. ``refresh`` resolves ``.[dev]`` from the registry without the old
lock (the newest releases the project's own bounds allow), then writes the freeze; run
the tests and ``cl-bench check --suite ci`` on the new lock before committing it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "lock.txt"
# the installer's own packages and the project itself are not part of the locked tree
UNLOCKED = {"pip", "setuptools", "wheel", "cl-bench"}


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def read_lock(path: Path = LOCK) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line of the lock."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonical(name)] = version.strip()
    return pins


def installed() -> dict[str, str]:
    return {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}


def verify() -> int:
    if not LOCK.is_file():
        print(
            f"{LOCK} is missing: restore it from git (`git checkout -- "
            f"{LOCK.relative_to(ROOT)}`) or write it with `python scripts/lock.py refresh`.",
            file=sys.stderr,
        )
        return 1
    pins, have = read_lock(), installed()
    wrong = [
        f"{name} {version} (lock: {pins.get(name, 'absent')})"
        for name, version in sorted(have.items())
        if name not in UNLOCKED and pins.get(name) != version
    ]
    if wrong:
        print(
            f"This environment differs from {LOCK.relative_to(ROOT)} in {len(wrong)} "
            f"package(s): {', '.join(wrong)}. Recreate it (rm -rf .venv && make test) or, "
            "if pyproject.toml's dependencies changed on purpose, refresh the lock with "
            "`python scripts/lock.py refresh`.",
            file=sys.stderr,
        )
        return 1
    print(f"environment matches {LOCK.relative_to(ROOT)} ({len(have)} packages)")
    return 0


def refresh() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        subprocess.run([*pip, "install", "--quiet", f"{ROOT}[dev]"], check=True)
        frozen = subprocess.run(
            [*pip, "freeze", "--all"], check=True, capture_output=True, text=True
        ).stdout.splitlines()
    pins = sorted(
        (
            line
            for line in frozen
            if "==" in line and canonical(line.split("==")[0]) not in UNLOCKED
        ),
        key=str.lower,
    )
    header = [
        f"# cl-bench's whole dependency tree (.[dev]), resolved {time.strftime('%Y-%m-%d')}",
        f"# with Python {sys.version.split()[0]} on {sys.platform}. Installed as a pip "
        "constraints file by `make run` / `make test`.",
        "# Refresh: python scripts/lock.py refresh (docs/getting-started.md).",
    ]
    LOCK.parent.mkdir(exist_ok=True)
    LOCK.write_text("\n".join(header + pins) + "\n", encoding="utf-8")
    print(f"wrote {LOCK.relative_to(ROOT)}: {len(pins)} packages")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["verify", "refresh"])
    return {"verify": verify, "refresh": refresh}[parser.parse_args().command]()


if __name__ == "__main__":
    sys.exit(main())
