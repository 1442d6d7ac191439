"""The Button-grid burst the burst benchmarks share: one trial's counts and their summary.

``iopub_burst`` (plain TCP vs CurveZMQ), ``cluster_burst`` (through gateway_provisioners'
launcher) and ``through_server`` (over jupyter_server's kernel websocket) run the same cell, a
``GridBox`` of N Buttons (3 N + 2 ``comm_open``, one ``display_data``, the idle), under another
condition; ``iopub_pause`` runs the seed's 3000-Button grid the same way behind a paused or
slow reader. This module owns what is the same in all of them:

* :class:`GridTrial`, what one trial saw (and when it *lost messages*: any comm_open, the
  display_data or the idle missing);
* :func:`run_grid`, the trial over a jupyter_client client (``import ipywidgets`` first, its
  cost is not what is measured, then the grid, collected until idle or until quiet after the
  reply: a lost idle);
* :func:`losses`, the summary of a group of trials (trials with loss, mean comm_open lost,
  display and idle lost, median time to idle), the columns every burst table prints.

What differs (how the kernel is started, who reads, what holds the reader up) stays in each
benchmark. Not a benchmark itself: ``python -m benchmarks --list`` leaves it out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jupyter_client import BlockingKernelClient

from benchmarks.trials import median
from harness.bursts import widget_grid_code
from ipykernel_ext.client import CellRun, run_cell

#: Quiet after the execute_reply that means the idle was lost (as in the demo).
QUIET_S = 5.0


def expected_comm_open(buttons: int) -> int:
    """comm_open of a grid of ``buttons`` Buttons: each with its layout and style, the grid
    and its layout."""
    return 3 * buttons + 2


@dataclass
class GridTrial:
    """What one reader saw of one grid: counts, the idle, seconds from request to idle."""

    kernel: str
    buttons: int
    comm_open: int
    display_data: int
    idle: bool
    seconds_to_idle: float | None

    @property
    def expected(self) -> int:
        return expected_comm_open(self.buttons)

    @property
    def lost(self) -> int:
        return self.expected - self.comm_open

    @property
    def lossy(self) -> bool:
        return self.lost > 0 or not self.idle or self.display_data < 1


def run_grid(
    kc: BlockingKernelClient, buttons: int, timeout: float, quiet: float = QUIET_S
) -> CellRun:
    """``import ipywidgets``, then the grid, counted (nothing kept) until idle or quiet."""
    run_cell(kc, "import ipywidgets", timeout=120)  # import cost is not what we measure
    return run_cell(kc, widget_grid_code(buttons), timeout, keep=lambda m: False, quiet=quiet)


def grid_counts(run: CellRun) -> dict[str, Any]:
    """The :class:`GridTrial` fields a :class:`CellRun` gives."""
    return {
        "comm_open": run.counts.get("comm_open", 0),
        "display_data": run.counts.get("display_data", 0),
        "idle": run.idle,
        "seconds_to_idle": run.seconds,
    }


def losses(trials: Sequence[GridTrial]) -> dict[str, Any]:
    """The summary of one group of trials (same kernel, condition and size)."""
    return {
        "expected": trials[0].expected,
        "trials": len(trials),
        "lossy_trials": sum(t.lossy for t in trials),
        "mean_lost": statistics.mean(t.lost for t in trials),
        "display_lost": sum(t.display_data < 1 for t in trials),
        "idle_lost": sum(not t.idle for t in trials),
        "mean_received": statistics.mean(t.comm_open for t in trials),
        "min_received": min(t.comm_open for t in trials),
        "median_s": median(t.seconds_to_idle for t in trials),
    }
