"""How a burst is read: over a kernel client, over a server's kernel websocket; the kernel's memory.

* :func:`read_client`: the load over a ``jupyter_client`` client (for a grid, ``import
  ipywidgets`` first: its cost is not what is measured), counted (nothing kept) until the
  idle or until quiet after the reply: a lost idle;
* :func:`read_websocket`: the same over :class:`harness.kernel_websocket.KernelWebsocket`,
  optionally with the server paused at comm_open number ``PAUSE_AFTER_COMM_OPEN``;
* :func:`client_stats` and :func:`websocket_stats`: ipykernel_ext's ``iopub_stats`` after the
  burst (None from stock, which does not answer the request);
* :class:`RssSampler` and :func:`server_kernel_pid`: the kernel's peak memory growth.

Each returns :class:`Read`, the counts the conditions turn into an
:class:`~benchmarks.burst.outcome.Outcome`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
from jupyter_client import BlockingKernelClient

from benchmarks.burst.outcome import Load
from harness.bursts import PAUSE_AFTER_COMM_OPEN
from harness.cells import run_cell
from harness.kernel_websocket import KernelWebsocket
from harness.kernels import iopub_stats
from harness.server import JupyterServer, ServerPause
from ipykernel_ext.kernel.iopub.settings import DEFAULT_SEND_TIMEOUT_MS

#: Once the execute_reply is in (and any pause is over), this long without a message means
#: the idle was lost: the kernel has nothing more to send.
QUIET_S = 5.0
#: With a subscriber that never reads, ipykernel_ext holds every message (the healthy
#: reader's too) until it gives that subscriber up, a send timeout after its queue filled,
#: while the cell's reply comes at once: quiet for that long is waiting, not loss.
STALLED_QUIET_S = DEFAULT_SEND_TIMEOUT_MS / 1000 + QUIET_S


@dataclass
class Read:
    """What a reader saw of one cell: counts by type, the idle, its stderr."""

    counts: dict[str, int] = field(default_factory=dict)
    idle: bool = False
    seconds: float | None = None  # from sending the request to reading its idle
    stderr: str = ""
    rss_growth_mb: float | None = None  # the kernel's, during the load (not the warm-up)


def warm_up(load: Load) -> str:
    """The cell run before the load, so that an import's cost is not measured."""
    return "import ipywidgets" if load.kind == "grid" else "import comm"


def read_client(
    kc: BlockingKernelClient,
    load: Load,
    timeout: float,
    quiet: float = QUIET_S,
    rss_pid: int | None = None,
) -> Read:
    """The warm-up, then the load, counted until idle or ``quiet`` after the reply; with
    ``rss_pid``, that process's memory growth during the load."""
    run_cell(kc, warm_up(load), timeout=120)
    with RssSampler(rss_pid) as rss:
        run = run_cell(kc, load.code, timeout, keep=lambda m: False, quiet=quiet)
    return Read(run.counts, run.idle, run.seconds, rss_growth_mb=rss.growth_mb)


def read_websocket(
    ws: KernelWebsocket,
    load: Load,
    timeout: float,
    pause: Callable[[], ServerPause] | None = None,
    quiet: float = QUIET_S,
    rss_pid: int | None = None,
) -> Read:
    """The warm-up, then the load; ``pause()`` (if given) at comm_open ``PAUSE_AFTER_COMM_OPEN``.

    Collected until the idle, or until ``quiet`` s without a message once the reply is in and
    the pause is over (a paused server sends nothing: silence means a lost idle only once it
    runs again), or ``timeout``. Seconds are to the idle's frame as the reader thread read
    it, so the time spent sorting messages is not counted.
    """
    ws.run(warm_up(load), timeout=120)
    with RssSampler(rss_pid) as rss:
        out = _read_websocket(ws, load, timeout, pause, quiet)
    out.rss_growth_mb = rss.growth_mb
    return out


def _read_websocket(
    ws: KernelWebsocket,
    load: Load,
    timeout: float,
    pause: Callable[[], ServerPause] | None,
    quiet: float,
) -> Read:
    out = Read()
    pauses: list[ServerPause] = []
    start = time.perf_counter()
    msg_id = ws.execute(load.code)
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


def client_stats(kc: BlockingKernelClient, ext: bool) -> dict[str, Any] | None:
    """ipykernel_ext's iopub_stats over control (``ext=False``: stock, not asked)."""
    if not ext:
        return None
    try:
        return iopub_stats(kc)
    except queue.Empty:
        return None


def websocket_stats(ws: KernelWebsocket, ext: bool) -> dict[str, Any] | None:
    """The same over a server's websocket."""
    if not ext:
        return None
    try:
        return ws.request("control", "iopub_stats_request", timeout=30)["content"]
    except TimeoutError:
        return None


# --- the kernel's memory ---------------------------------------------------------------


class RssSampler:
    """The peak RSS of one process while a burst runs, minus its RSS at the start (MB).

    ``pid=None`` samples nothing (``growth_mb`` is None): a condition not asked for memory.
    """

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
        if self.proc is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self._rss())

    @property
    def growth_mb(self) -> float | None:
        return None if self.proc is None else (self.peak - self.start_rss) / 2**20


def server_kernel_pid(server: JupyterServer, kernel_id: str) -> int | None:
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
