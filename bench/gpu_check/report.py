"""The printed table of a GPU check's JSON."""

from __future__ import annotations

from cl_bench.text_table import text_table


def _num(value, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def table(found: dict) -> list[str]:
    return text_table([("part", "what", "measured"), *rows(found)], free_last=True)


def rows(found: dict) -> list[tuple[str, str, str]]:
    """(part, what, measured) per figure of a check: the printed table's rows, and the
    recorded measurement's headline."""
    rows: list[tuple[str, str, str]] = []
    m = found.get("machine", {})
    rows += [
        (
            "machine",
            "device",
            f"{m.get('gpu') or m.get('device')} ({m.get('arch')}), "
            f"driver {m.get('driver')}, torch {m.get('torch')} CUDA "
            f"{m.get('torch_cuda')}",
        ),
        (
            "machine",
            "auto decides",
            f"--device {m.get('device_auto')}, --precision {m.get('precision_auto')}",
        ),
    ]
    for precision, e in found.get("extraction", {}).items():
        rows.append(
            (
                "extraction",
                f"{precision} images/s",
                f"{_num(e['images_per_s'], '.1f')} = {e['share_of_peak']:.0%} of the "
                f"{_num(e['matmul_peak_gflops'], ',.0f')} GFLOP/s matmul peak",
            )
        )
    for method, r in found.get("methods", {}).items():
        if method == "tree":
            continue
        rows.append(
            (
                "one task",
                method,
                f"step {_num(r['step_s_median'] * 1e3, '.1f')} ms (batch "
                f"{r['batch_size']}, {r['precision']}), peak {_num(r['peak_allocated_gb'])}"
                f" GB, waiting on data {r['data_wait_share']:.0%}",
            )
        )
    agree = found.get("agreement", {})
    if f := agree.get("features"):
        rows.append(
            (
                "cpu vs cuda",
                "features fp32",
                f"largest gap {f['largest_abs_difference']:.2e} "
                f"({f['relative_to_largest_feature']:.1e} of the largest; bound "
                f"{f['bound']:.0e}: {'ok' if f['within'] else 'OUTSIDE'})",
            )
        )
    for method, r in agree.get("runs", {}).items():
        rows.append(
            (
                "cpu vs cuda",
                f"{method} fp32",
                f"cpu {r['cpu']['avg_acc']:.2f}/{r['cpu']['last_acc']:.2f}, cuda "
                f"{r['cuda']['avg_acc']:.2f}/{r['cuda']['last_acc']:.2f} (bound "
                f"{r['bound']}: {'ok' if r['within'] else 'OUTSIDE'})",
            )
        )
    d = found.get("determinism", {})
    for mode in ("strict", "fast"):
        if mode in d:
            rows.append(
                (
                    "determinism",
                    f"{mode} twice ({d['precision']})",
                    f"{'bitwise equal' if d[mode]['bitwise_equal'] else 'differ'} (largest "
                    f"{d[mode]['largest_difference']:.1e}), step "
                    f"{_num(d[mode]['step_s'] * 1e3, '.1f')} ms",
                )
            )
    if "strict_cost" in d:
        rows.append(("determinism", "strict / fast step", f"{d['strict_cost']:.2f}x"))
    rows += [("error", part, text) for part, text in found.get("errors", {}).items()]
    rows.append(("total", "seconds", f"{sum(found.get('seconds', {}).values()):.0f}"))
    return rows
