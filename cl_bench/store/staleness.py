"""Whether a finished result is stale: made by other code or other package versions
than those this cl-bench runs now.

A record's ``code`` (:func:`cl_bench.source_identity.code_block`) names every source file
its run executed with its digest; the record is current when each of those files has the
same digest now and every package of ``env.packages`` has the version installed now. A
record without ``code`` (written before results carried one) is stale. A stale result is
never reused: ``run`` computes it again, ``status`` shows it as stale with what changed,
``report`` leaves it out unless asked for and marks it, and ``check`` compares only
results of the code that runs now.
"""

from __future__ import annotations

from collections.abc import Mapping

from cl_bench.packages import dependency_versions, recorded
from cl_bench.source_identity import changes

NO_IDENTITY = "it records no code identity (written by an older cl-bench)"
SHOWN = 3  # files named in a reason


def stale_reasons(record: Mapping) -> list[str]:
    """What differs between the code and packages that made ``record`` (a valid record)
    and those installed now; [] when the result is current."""
    code = record.get("code")
    if not isinstance(code, Mapping):
        return [NO_IDENTITY]
    out = []
    edited = changes(code["modules"])
    if edited:
        more = f" and {len(edited) - SHOWN} more" if len(edited) > SHOWN else ""
        out.append(f"code changed: {', '.join(edited[:SHOWN])}{more}")
    then, now = recorded(record.get("env") or {}), dependency_versions()
    moved = [
        f"{name} {then[name]} -> {now[name]}"
        for name in sorted(set(then) & set(now))
        if then[name] != now[name]
    ]
    if moved:
        out.append(f"packages changed: {', '.join(moved)}")
    return out
