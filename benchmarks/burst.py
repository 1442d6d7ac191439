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
* :func:`collect_ws`, the same collection over a server's kernel websocket, optionally with
  the server paused mid-burst;
* :func:`losses`, the summary of a group of trials (trials with loss, mean comm_open lost,
  display and idle lost, median time to idle), the columns every burst table prints;
* :class:`RssSampler` and :func:`kernel_pid`, the kernel's memory growth during a burst.

What differs (how the kernel is started, who reads, what holds the reader up) stays in each
benchmark. Not a benchmark itself: ``python -m benchmarks --list`` leaves it out.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil
from jupyter_client import BlockingKernelClient

from benchmarks.trials import median
from harness.bursts import PAUSE_AFTER_COMM_OPEN, widget_grid_code
from harness.kernel_websocket import KernelWebsocket
from harness.server import JupyterServer, ServerPause
from ipykernel_ext.client import CellRun, run_cell
from ipykernel_ext.kernel.iopub_options import DEFAULT_SEND_TIMEOUT_MS

#: Once the execute_reply is in (and any pause is over), this long without a message means
#: the idle was lost: the kernel has nothing more to send.
QUIET_S = 5.0
#: With a subscriber that never reads, ipykernel_ext holds every message (the healthy
#: reader's too) until it gives that subscriber up, a send timeout after its queue filled,
#: while the cell's reply comes at once: quiet for that long is waiting, not loss.
STALLED_QUIET_S = DEFAULT_SEND_TIMEOUT_MS / 1000 + QUIET_S


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


def grid_counts(run: CellRun | WsRun) -> dict[str, Any]:
    """The :class:`GridTrial` fields a run gives (a :class:`CellRun` or a :class:`WsRun`)."""
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


# --- over a server's kernel websocket --------------------------------------------------


@dataclass
class WsRun:
    """What a websocket client saw of one cell: counts by type, the idle, its stderr."""

    counts: dict[str, int] = field(default_factory=dict)
    idle: bool = False
    seconds: float | None = None  # from sending the request to reading its idle's frame
    stderr: str = ""


def collect_ws(
    ws: KernelWebsocket,
    code: str,
    timeout: float,
    pause: Callable[[], ServerPause] | None = None,
    quiet: float = QUIET_S,
) -> WsRun:
    """Run ``code``; ``pause()`` (if given) at comm_open number ``PAUSE_AFTER_COMM_OPEN``.

    Collected until the idle, or until ``quiet`` s without a message once the reply is in and
    the pause is over (a paused server sends nothing: silence means a lost idle only once it
    runs again), or ``timeout``.
    """
    out = WsRun()
    pauses: list[ServerPause] = []
    start = time.perf_counter()
    msg_id = ws.execute(code)
    replied = False
    last = time.monotonic()
    deadline = last + timeout
    while time.monotonic() < deadline:
        if replied and all(p.over for p in pauses) and time.monotonic() - last > quiet:
            break
        try:
            msg = ws.recv(timeout=0.5)
        except TimeoutError:
            continue
        last = time.monotonic()
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["channel"] == "shell":
            replied = True
            continue
        if msg["channel"] != "iopub":
            continue
        kind = msg["msg_type"]
        out.counts[kind] = out.counts.get(kind, 0) + 1
        if pause is not None and kind == "comm_open" and out.counts[kind] == PAUSE_AFTER_COMM_OPEN:
            pauses.append(pause())
        if kind == "stream" and msg["content"]["name"] == "stderr":
            out.stderr += msg["content"]["text"]
        if kind == "status" and msg["content"]["execution_state"] == "idle":
            out.idle, out.seconds = True, msg["received"] - start
            break
    for p in pauses:
        p.join()
    return out


# --- the kernel's memory ---------------------------------------------------------------


class RssSampler:
    """The peak RSS of one process while a burst runs, minus its RSS at the start (MB)."""

    def __init__(self, pid: int | None) -> None:
        self.proc = psutil.Process(pid) if pid is not None else None
        self.start_rss = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _rss(self) -> int:
        if self.proc is None:
            return 0
        try:
            return self.proc.memory_info().rss
        except psutil.Error:
            return 0

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self._rss())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def growth_mb(self) -> float | None:
        return None if self.proc is None else (self.peak - self.start_rss) / 2**20


def kernel_pid(server: JupyterServer, kernel_id: str) -> int | None:
    """The kernel process the server started (its command line names the kernel id)."""
    assert server.proc is not None
    matches = [
        p
        for p in psutil.Process(server.proc.pid).children(recursive=True)
        if kernel_id in " ".join(_cmdline(p))
    ]
    # gateway_provisioners' listener is forked from the kernel process: take the top one.
    pids = {p.pid for p in matches}
    tops = [p for p in matches if p.ppid() not in pids]
    return tops[0].pid if tops else None


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []
