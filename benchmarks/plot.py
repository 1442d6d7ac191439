"""The benchmarks' figures: one headless matplotlib figure, drawn by the caller, saved once.

What every figure shares lives here: the ``Agg`` backend (no display; chosen before pyplot
is imported), a row of axes, the layout, one resolution, the folders made, each file said
once written, and the figure closed. matplotlib comes with the ``bench`` extra and is imported
only when a figure is made, so ``--list`` and ``--help`` need none of it::

    with figure(path, ncols=2, size=(12, 4.5)) as (fig, axes):
        axes[0].bar(...)

Not a benchmark (``--list`` leaves it out); it imports nothing from the runner.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Dots per inch of every figure (the ones in docs/ were made so).
DPI = 110


def missing() -> str | None:
    """Why no figure can be made here (matplotlib not installed), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]')"
    return None


@contextmanager
def figure(
    paths: Path | Iterable[Path], ncols: int = 1, *, size: tuple[float, float]
) -> Iterator[tuple[Any, list[Any]]]:
    """A figure with ``ncols`` axes side by side, ``size`` inches; the caller draws on
    ``(fig, axes)``. On exit it is laid out and written to each of ``paths`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=size, squeeze=False)
    try:
        yield fig, list(axes[0])
        fig.tight_layout()
        for path in [paths] if isinstance(paths, Path) else list(paths):
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, dpi=DPI)
            print(f"plot: {path}")
    finally:
        plt.close(fig)
