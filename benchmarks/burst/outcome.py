"""What a burst trial sends and what it saw: :class:`Load`, :class:`Outcome`, their summary.

A *load* is the cell that makes the burst: ``grid:N``, a ``GridBox`` of N Buttons (3 N + 2
``comm_open``: each Button with its layout and style, the grid and its layout; one
``display_data``; the idle), or ``comms:N``, N ``comm_open`` to a target nobody registered
(no display). An *outcome* is what one reader saw of one load under one condition on one
kernel; it *lost messages* if any comm_open, the display (grid only) or the idle is missing.
:func:`summarize` groups outcomes by condition, load and kernel: the columns every burst
table prints.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.trials import median
from harness.bursts import comm_loop_code, widget_grid_code

KINDS = ("grid", "comms")


@dataclass(frozen=True)
class Load:
    """The cell a trial runs: ``kind`` (``grid`` or ``comms``) and its size."""

    kind: str
    size: int

    @classmethod
    def parse(cls, text: str) -> Load:
        """``grid:3000`` or ``comms:20000``; a bare number is a grid."""
        kind, _, size = text.rpartition(":")
        kind = kind or "grid"
        if kind not in KINDS or not size.isdigit() or int(size) < 1:
            raise ValueError(f"a load is grid:N or comms:N with N >= 1, not {text!r}")
        return cls(kind, int(size))

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.size}"

    @property
    def code(self) -> str:
        return widget_grid_code(self.size) if self.kind == "grid" else comm_loop_code(self.size)

    @property
    def expected(self) -> int:
        """comm_open the load sends."""
        return 3 * self.size + 2 if self.kind == "grid" else self.size

    @property
    def displays(self) -> bool:
        """Whether the load sends a display_data (a grid does; a comm loop does not)."""
        return self.kind == "grid"


@dataclass
class Outcome:
    """What one reader saw of one load under one condition, on one kernel."""

    condition: str
    kernel: str
    load: str  # Load.label
    expected: int
    comm_open: int
    display_data: int
    idle: bool
    seconds_to_idle: float | None
    #: the kernel's peak RSS growth during the burst (MB), None when not sampled
    rss_growth_mb: float | None = None
    #: ipykernel_ext's iopub_stats after the burst (stock does not answer the request)
    stats: dict[str, Any] | None = None
    #: what the reader saw besides: the server's rate-limit warning, a skipped row's reason
    notes: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.expected - self.comm_open

    @property
    def lossy(self) -> bool:
        displays = Load.parse(self.load).displays
        return self.lost > 0 or not self.idle or (displays and self.display_data < 1)


def summarize(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    """One row per condition, load and kernel, in the order they first ran."""
    groups: dict[tuple[str, str, str], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.condition, o.load, o.kernel), []).append(o)
    return [
        {"condition": condition, "load": load, "kernel": kernel} | losses(group)
        for (condition, load, kernel), group in groups.items()
    ]


def losses(group: Sequence[Outcome]) -> dict[str, Any]:
    """The summary of one group of trials (same condition, load and kernel)."""
    displays = Load.parse(group[0].load).displays
    return {
        "expected": group[0].expected,
        "trials": len(group),
        "lossy_trials": sum(o.lossy for o in group),
        "mean_lost": statistics.mean(o.lost for o in group),
        "display_lost": sum(o.display_data < 1 for o in group) if displays else None,
        "idle_lost": sum(not o.idle for o in group),
        "mean_received": statistics.mean(o.comm_open for o in group),
        "min_received": min(o.comm_open for o in group),
        "median_s": median(o.seconds_to_idle for o in group),
        "rss_growth_mb": median(o.rss_growth_mb for o in group),
        "given_up": _total(o.stats.get("timeouts") for o in group if o.stats),
        "missed": _total(o.stats.get("missed") for o in group if o.stats),
        "notes": sorted({n for o in group for n in o.notes}),
    }


def _total(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
