"""The gate's comparison: one row per run and metric, the baseline's value beside the one
measured now, each side's CPU capability (or GPU) and precision, the tolerance and the
verdict (ok, DROP, IMPROVED, NEW, MISSING); and the notes on why values may differ
besides the code."""

from __future__ import annotations

from dataclasses import dataclass

from cl_bench.gate.suite import METRICS, Measured
from cl_bench.text_table import text_table


@dataclass
class Row:
    key: str
    metric: str
    baseline: float | None
    now: float | None
    tolerance: float
    base_in: str = "?"  # "<cpu capability>/<precision>" the baseline value was measured in
    now_in: str = "?"

    @property
    def ran_in(self) -> str:
        """Where each side ran: one ``AVX2/fp32`` when both agree."""
        if self.base_in == self.now_in or self.baseline is None or self.now is None:
            return self.now_in if self.now is not None else self.base_in
        return f"{self.base_in} -> {self.now_in}"

    @property
    def elsewhere(self) -> bool:
        """The baseline value was measured under another CPU capability or precision."""
        return self.baseline is not None and self.now is not None and self.base_in != self.now_in

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.now is None:
            return None
        return self.now - self.baseline

    @property
    def status(self) -> str:
        if self.now is None:
            return "MISSING"
        if self.baseline is None:
            return "NEW"
        if self.delta < -self.tolerance:
            return "DROP"
        if self.delta > self.tolerance:
            return "IMPROVED"
        return "ok"


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels dispatch to ("AVX2", "AVX512", ...). Full
    fine-tuning gives the same numbers on every CPU of one capability, not across them
    (the reduction order of the kernels differs), so a baseline may hold a value per
    capability (``by_cpu``) beside the value of the CPU that made it."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def expected(base: dict, cpu: str, made_on: str) -> tuple[float, str]:
    """A baseline metric's value for a CPU of capability ``cpu``, and the capability it
    was measured on (``made_on``: that of the baseline's main values)."""
    by_cpu = base.get("by_cpu", {})
    return (by_cpu[cpu], cpu) if cpu in by_cpu else (base["value"], made_on)


def provenance(baseline: dict) -> dict:
    """The baseline's provenance; an absent or malformed one says nothing (it only
    annotates the comparison, never decides it)."""
    found = baseline.get("provenance")
    return found if isinstance(found, dict) else {}


def baseline_precision(baseline: dict, key: str, suite: dict | None) -> str:
    """The precision a baseline key was measured in: recorded in its provenance since
    baselines record it, else the one its suite entry pins (``auto`` tells nothing)."""
    recorded = provenance(baseline).get("precision")
    if isinstance(recorded, dict) and isinstance(recorded.get(key), str):
        return recorded[key]
    entry = next((e for e in (suite or {}).get("runs", []) if key.startswith(f"{e['name']}/")), {})
    pinned = entry.get("precision", "auto")
    return pinned if isinstance(pinned, str) and pinned != "auto" else "?"


def compare(
    baseline: dict,
    measured: dict[str, dict[str, float]] | Measured,
    tolerance: float | None,
    cpu: str | None = None,
    suite: dict | None = None,
) -> list[Row]:
    """One row per run and metric; ``cpu`` (default: this machine's capability) picks a
    metric's ``by_cpu`` value where the baseline has one. Each row says where each side
    ran (capability/precision): a value from another capability or precision is still
    compared with the tolerance, and the table shows that it was."""
    cpu = cpu or cpu_capability()
    if not isinstance(measured, Measured):
        measured = Measured(values=measured)
    made_on = str(provenance(baseline).get("cpu_capability", "?"))
    base_devices = provenance(baseline).get("device_by_key")
    base_devices = base_devices if isinstance(base_devices, dict) else {}
    rows = []
    entries = baseline.get("metrics", {})
    for key in sorted(set(entries) | set(measured.values)):
        base_precision = baseline_precision(baseline, key, suite)
        now_device = measured.device.get(key, "cpu")
        now_in = f"{cpu if now_device == 'cpu' else now_device}/{measured.precision.get(key, '?')}"
        for metric in METRICS:
            base = entries.get(key, {}).get(metric)
            tol = tolerance if tolerance is not None else (base or {}).get("tolerance", 1.0)
            value, base_cpu = (None, "?") if base is None else expected(base, cpu, made_on)
            base_device = str(base_devices.get(key, "cpu"))
            base_where = base_cpu if base_device == "cpu" else base_device
            rows.append(
                Row(
                    key,
                    metric,
                    value,
                    measured.values.get(key, {}).get(metric),
                    tol,
                    f"{base_where}/{base_precision}",
                    now_in,
                )
            )
    return rows


def environment_notes(rows: list[Row], baseline: dict, measured: Measured) -> list[str]:
    """Why values may differ besides the code: rows measured under another capability
    or precision, and packages whose versions differ from the baseline's."""
    from cl_bench.packages import describe, differing, recorded

    notes = []
    across = [r for r in rows if r.elsewhere and ("cuda" in r.base_in) != ("cuda" in r.now_in)]
    if across:
        notes.append(
            f"{len(across)} value(s) were measured on a GPU and compared with a CPU "
            "baseline, or the other way round: GPU kernels round differently, so a "
            "difference within the tolerance may be the device alone; for a gate on "
            "GPU numbers, keep a baseline made on that GPU (--update-baseline "
            "--baseline FILE there)."
        )
    elsewhere = [r for r in rows if r.elsewhere]
    if elsewhere:
        where = sorted({r.ran_in for r in elsewhere})
        notes.append(
            f"{len(elsewhere)} baseline value(s) were measured under another CPU "
            f"capability or precision ({'; '.join(where)}; capability as torch "
            "dispatches, precision of the backbone passes): they are compared with "
            "their tolerance, and a difference within it may be rounding alone."
        )
    diff = differing([recorded(provenance(baseline)), measured.packages])
    if diff:
        notes.append(
            f"Package versions differ from the baseline's (baseline / now, in "
            f"sorted order): {describe(diff)}. A moved number may come from them; "
            "the locked environment (requirements/lock.txt) avoids this."
        )
    return notes


def table(rows: list[Row]) -> str:
    def num(v: float | None, sign: bool = False) -> str:
        if v is None:
            return "-"
        v = round(v, 2) + 0.0  # no "-0.00"
        return f"{v:+.2f}" if sign else f"{v:.2f}"

    body = [("run / method", "metric", "baseline", "now", "delta", "tol", "status", "ran in")]
    body += [
        (
            r.key,
            r.metric,
            num(r.baseline),
            num(r.now),
            num(r.delta, True),
            f"{r.tolerance:.2f}",
            r.status,
            r.ran_in,
        )
        for r in rows
    ]
    return "\n".join(text_table(body, right=range(2, 6)))
