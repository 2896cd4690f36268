"""What every figure of clusterclip shares: a headless, reproducible matplotlib and one
colour per strategy.

Any stage may draw (the K sweep, the report, the experiment, the search), so this module
sits below them all and imports nothing of clusterclip. matplotlib is imported inside the
functions, so importing this module stays cheap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

DPI = 110

#: One colour per strategy name, the same in every PNG and page (colour-blind-safe
#: Okabe-Ito hues; random is neutral grey, the reference the others are compared with).
STRATEGY_COLORS = {
    "random": "#6e6e6e",
    "uniform": "#0072b2",
    "temperature": "#009e73",
    "clusterclip": "#d55e00",
    "paced": "#cc79a7",
    "mixture": "#e69f00",
    "searched": "#e69f00",
    "prior": "#56b4e9",
    "natural": "#6e6e6e",
}
# Names outside the table (e.g. "clusterclip R=6") take these, in order of first use.
_SPARE = ("#000000", "#f0e442", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f")


def strategy_color(name: str, spare_index: int = 0) -> str:
    """The colour of strategy ``name``; a name not in :data:`STRATEGY_COLORS` whose first
    word is (``"paced R=5"``) takes that word's colour, any other the ``spare_index``-th spare."""
    if name in STRATEGY_COLORS:
        return STRATEGY_COLORS[name]
    head = name.split()[0] if name.split() else name
    if head in STRATEGY_COLORS:
        return STRATEGY_COLORS[head]
    return _SPARE[spare_index % len(_SPARE)]


def pyplot():
    """matplotlib.pyplot on the Agg backend with fixed rc settings (whatever the user's
    matplotlibrc says), so the same numbers draw the same bytes."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcdefaults()
    plt.rcParams.update({"figure.dpi": DPI, "axes.grid": True, "grid.alpha": 0.3,
                         "font.size": 9, "svg.hashsalt": "clusterclip"})
    return plt


def save_png(fig, path: str | os.PathLike[str], margins: Mapping[str, float]) -> None:
    """Write ``fig`` as a PNG without software/date metadata (same input, same bytes), then
    close it. Fixed margins instead of tight_layout: a layout pass costs as much as drawing."""
    fig.subplots_adjust(**margins)
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
