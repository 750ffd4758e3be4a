"""The critical-difference diagram at the report's figure size and dpi: the PNG has the
look's pixels; for 2, 7 and 16 methods, at the default size and a small one, every name
and the title lie inside the figure, no two names overlap, no name crosses a group line,
and the rank numbers of a narrow axis are thinned so none touches the next."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from cl_bench.reporting import cd_plot, plots

NAMES = [f"method-{i} (selection=sample)" if i % 3 == 0 else f"method-{i}" for i in range(16)]


def average(k: int) -> pd.Series:
    """Average ranks of ``k`` methods, spread over 1..k."""
    return pd.Series(np.linspace(1.2, k - 0.1, k), index=NAMES[:k])


def boxes(texts) -> list:
    return [t.get_window_extent() for t in texts if t.get_visible()]


def test_the_diagram_takes_the_looks_size_and_dpi():
    look = plots.look("6.4x4", 200)
    fig = cd_plot.diagram(average(7), 2.5, "avg acc", 4, look).figure
    with Image.open(io.BytesIO(plots.render(fig, "png"))) as im:
        assert im.size == look.pixels == (1280, 800)
    default = cd_plot.diagram(average(7), 2.5, "avg acc", 4).figure
    with Image.open(io.BytesIO(plots.render(default, "png"))) as im:
        assert im.size == plots.PIXELS


@pytest.mark.parametrize("size", [None, "4x3"])
@pytest.mark.parametrize("k", [2, 7, 16])
def test_names_and_title_fit_and_do_not_overlap(k, size):
    plot = cd_plot.diagram(average(k), 3.0, "avg acc", 4, plots.look(size))
    fig = plot.figure
    fig.canvas.draw()
    (ax,) = fig.axes
    page = fig.bbox
    names = [t for t in ax.texts if "(" in t.get_text() and "CD" not in t.get_text()]
    assert len(names) == k
    for box in boxes([*ax.texts, fig._suptitle]):
        assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1
        assert page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1
    named = boxes(names)
    assert not any(a.overlaps(b) for i, a in enumerate(named) for b in named[i + 1 :])
    numbers = boxes([t for t in ax.texts if t.get_text().isdigit()])
    assert numbers[0].x0 < numbers[-1].x0
    assert all(a.x1 < b.x0 for a, b in zip(numbers, numbers[1:], strict=False))
    group_lines = [c for c in ax.collections if max(c.get_linewidths()) == 3]
    lowest = max(
        (y for c in group_lines for y in np.asarray(c.get_segments())[:, :, 1].ravel()), default=0.0
    )
    rows = sorted({t.get_position()[1] for t in names})
    assert rows[0] > lowest  # the names' rows lie below every group line
